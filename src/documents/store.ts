// The document store: where a job's PDFs live. A small interface so another store (an object store)
// can replace the built-in one; PostgreSQL is the built-in store, so every worker machine sees the
// same documents. The API's intake writes documents in the same transaction as their job (same
// table, src/jobs/repo.ts insertJob), so a job and its documents always commit together.
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
  /**
   * Keeps the checked bytes of a fetched file_url document (unless it has content already or was
   * deleted meanwhile), so a forward or a second preparation sends the very same document without
   * fetching the URL again: the URL may have expired or now serve something else.
   */
  keepFetched(documentId: string, content: Buffer): Promise<void>;
  /** Deletes the content, file_url and file name of a job's documents; returns how many. */
  delete(jobId: string, reason: DeletionReason): Promise<number>;
}

const wipe = `content = NULL, file_url = NULL, file_name = '(deleted)', deleted_at = now()`;

export class PgDocumentStore implements DocumentStore {
  private readonly db: Queryable;
  constructor(db: Queryable) {
    this.db = db;
  }

  async put(jobId: string, accountId: string, docs: NewStoredDocument[]): Promise<void> {
    if (docs.length === 0) return;
    await this.db.query(
      `INSERT INTO fax_documents (job_id, account_id, position, file_name, file_url, content, byte_size)
       SELECT $1, $2, d.pos, d.name, d.url, d.content, length(d.content)
         FROM unnest($3::int[], $4::text[], $5::text[], $6::bytea[]) AS d(pos, name, url, content)`,
      [
        jobId,
        accountId,
        docs.map((_, i) => i),
        docs.map((d) => d.fileName),
        docs.map((d) => d.fileUrl),
        docs.map((d) => d.content),
      ],
    );
  }

  async get(jobId: string): Promise<StoredDocument[]> {
    const r = await this.db.query<StoredDocument>(
      `SELECT id, position, file_name, file_url, content, deleted_at
         FROM fax_documents WHERE job_id = $1 ORDER BY position`,
      [jobId],
    );
    return r.rows;
  }

  async keepFetched(documentId: string, content: Buffer): Promise<void> {
    await this.db.query(
      `UPDATE fax_documents SET content = $2::bytea, byte_size = length($2::bytea)
        WHERE id = $1 AND content IS NULL AND deleted_at IS NULL`,
      [documentId, content],
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
