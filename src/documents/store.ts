// The document store: where a job's PDFs live. A small interface so another store (an object store)
// can replace the built-in one; PostgreSQL is the built-in store, so every worker machine sees the
// same documents. The API's intake writes documents in the same transaction as their job (same
// table, src/jobs/repo.ts insertJob), so a job and its documents always commit together.
import { contentDigest, open, seal } from '../db/encryption.ts';
import { documentContext } from '../db/sealed-columns.ts';
import { insertDocuments } from '../jobs/repo.ts';
import type { Queryable } from '../db/pool.ts';

export interface StoredDocument {
  id: string;
  position: number;
  file_name: string;
  file_url: string | null;
  /**
   * null once purged or deleted, and for a file_url document until a worker has fetched and checked
   * it (the bytes are then kept here, so forwards and re-preparations send the same document).
   */
  content: Buffer | null;
  deleted_at: Date | null;
  /** The content's digest (contentDigest) and size; null where the content is (and for older rows). */
  content_digest: Buffer | null;
  byte_size: number | null;
}

export interface NewStoredDocument {
  fileName: string;
  fileUrl: string | null;
  content: Buffer | null;
}

export type DeletionReason = 'retention' | 'request';
// The retention purge (per account, zero footprint, audited) is src/accounts/retention.ts.

export interface DocumentStore {
  /** Stores a job's documents, in order. */
  put(jobId: string, accountId: string, docs: NewStoredDocument[]): Promise<void>;
  /** A job's documents in order (deleted ones included, with content null). */
  get(jobId: string): Promise<StoredDocument[]>;
  /** The same without their content (content null): enough to find their pages rendered before. */
  list(jobId: string): Promise<StoredDocument[]>;
  /**
   * Keeps the checked bytes of a fetched file_url document (unless it has content already or was
   * deleted meanwhile), so a forward or a second preparation sends the very same document without
   * fetching the URL again: the URL may have expired or now serve something else.
   */
  keepFetched(documentId: string, content: Buffer): Promise<void>;
  /** Deletes the content, file_url and file name of a job's documents; returns how many. */
  delete(jobId: string, reason: DeletionReason): Promise<number>;
}

const wipe = `content = NULL, content_digest = NULL, file_url = NULL, file_name = '(deleted)', deleted_at = now()`;

export class PgDocumentStore implements DocumentStore {
  private readonly db: Queryable;
  constructor(db: Queryable) {
    this.db = db;
  }

  async put(jobId: string, accountId: string, docs: NewStoredDocument[]): Promise<void> {
    await insertDocuments(this.db, jobId, accountId, docs);
  }

  async list(jobId: string): Promise<StoredDocument[]> {
    const r = await this.db.query<StoredDocument>(
      `SELECT id, position, file_name, file_url, NULL::bytea AS content, deleted_at, content_digest, byte_size
         FROM fax_documents WHERE job_id = $1 ORDER BY position`,
      [jobId],
    );
    return r.rows;
  }

  async get(jobId: string): Promise<StoredDocument[]> {
    const r = await this.db.query<StoredDocument & { job_id: string; account_id: string }>(
      `SELECT id, job_id, account_id, position, file_name, file_url, content, deleted_at, content_digest,
              byte_size
         FROM fax_documents WHERE job_id = $1 ORDER BY position`,
      [jobId],
    );
    const out: StoredDocument[] = [];
    for (const { job_id, account_id, ...d } of r.rows)
      out.push({
        ...d,
        content:
          d.content && (await open(this.db, documentContext(account_id, job_id, d.position), d.content)),
      });
    return out;
  }

  async keepFetched(documentId: string, content: Buffer): Promise<void> {
    const row = (
      await this.db.query<{ job_id: string; account_id: string; position: number }>(
        'SELECT job_id, account_id, position FROM fax_documents WHERE id = $1',
        [documentId],
      )
    ).rows[0];
    if (!row) return;
    const sealed = await seal(this.db, documentContext(row.account_id, row.job_id, row.position), content);
    await this.db.query(
      `UPDATE fax_documents SET content = $2::bytea, byte_size = $3, content_digest = $4
        WHERE id = $1 AND content IS NULL AND deleted_at IS NULL`,
      [documentId, sealed, content.length, await contentDigest(this.db, row.account_id, content)],
    );
  }

  async delete(jobId: string, reason: DeletionReason): Promise<number> {
    // The rendered fax image holds the same content: it goes too (this job's and its forwards').
    // A broadcast's shared document pages (document_renders) are kept on the job holding the documents.
    const r = await this.db.query(
      `WITH renders AS (
         DELETE FROM fax_renders WHERE job_id = $1 OR job_id IN (SELECT id FROM fax_jobs WHERE source_job_id = $1)
       ), shared AS (
         DELETE FROM document_renders WHERE job_id = $1
       )
       UPDATE fax_documents SET ${wipe}, deleted_reason = $2 WHERE job_id = $1 AND deleted_at IS NULL`,
      [jobId, reason],
    );
    return r.rowCount ?? 0;
  }
}
