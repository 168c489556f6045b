// Retention per account (issue 32, item 3; docs/audit-retention.md): how long a final fax keeps its
// content and a received fax its images, the zero-footprint mode, the purge that applies them (run by
// a pg-boss schedule, src/app.ts) and the deletion of one fax's content on request.
//
// Content of a sent fax: its documents (fax_documents: content, file_url, file name), its rendered
// image (fax_renders) and a broadcast's shared pages (document_renders). The transmission report is
// made on demand from the record and the image, and stored nowhere. The record, its transitions and
// its attempts stay: they are the history the account keeps.
import { purgeAuditEvents } from '../audit/record.ts';
import type { Queryable } from '../db/pool.ts';
import { SEALED_OPTION_FIELDS } from '../db/sealed-columns.ts';
import { isId } from '../domain/ids.ts';
import { PgDocumentStore } from '../documents/store.ts';
import { terminalStates } from '../domain/states.ts';
import { purgeReceivedImages } from '../receive/store.ts';

export interface Retention {
  /** Days a final fax keeps its content; null: the installation's default (DOCUMENT_RETENTION_DAYS). */
  sent_days: number | null;
  /** Days a received fax keeps its images; null: the installation's default. */
  received_days: number | null;
  zero_footprint: boolean;
}

export const MAX_RETENTION_DAYS = 36_500;

/** The account's retention as one JSON column of a query on accounts. */
export const RETENTION_JSON = `json_build_object('sent_days', sent_retention_days,
  'received_days', received_retention_days::float8, 'zero_footprint', zero_footprint)`;

/** Changes what `patch` names (undefined: unchanged; null: back to the default). */
export async function setRetention(
  c: Queryable,
  accountId: string,
  patch: Partial<Retention>,
): Promise<void> {
  const sets: string[] = [];
  const values: unknown[] = [accountId];
  const set = (col: string, v: unknown) => {
    values.push(v);
    sets.push(`${col} = $${values.length}`);
  };
  if (patch.sent_days !== undefined) set('sent_retention_days', patch.sent_days);
  if (patch.received_days !== undefined) set('received_retention_days', patch.received_days);
  if (patch.zero_footprint !== undefined) set('zero_footprint', patch.zero_footprint);
  if (sets.length > 0) await c.query(`UPDATE accounts SET ${sets.join(', ')} WHERE id = $1`, values);
}

const terminal = [...terminalStates];

/** The cover text of a fax's options (sealed, or in clear from before): content, purged with it. */
const COVER_TEXT_KEYS = ['sealed', ...SEALED_OPTION_FIELDS].map((k) => `- '${k}'`).join(' ');

/**
 * Purges the content of final faxes past their account's retention (zero footprint: as soon as they
 * are final), at most `batch` faxes per call, and writes one audit event per fax (fax.content_purge,
 * actor system) in the same statement. A fax whose forwards (which share its documents) are not all
 * final and past the same cutoff keeps its content. Returns the number of faxes purged.
 */
export async function purgeSentContent(
  db: Queryable,
  now: Date,
  defaultDays: number,
  batch = 200,
): Promise<number> {
  const r = await db.query(
    `WITH due AS (
       SELECT DISTINCT d.job_id, j.account_id, a.zero_footprint AS zero
         FROM fax_documents d
         JOIN fax_jobs j ON j.id = d.job_id
         JOIN accounts a ON a.id = j.account_id
         CROSS JOIN LATERAL (
           SELECT $1::timestamptz - make_interval(secs => (CASE WHEN a.zero_footprint THEN 0
                    ELSE coalesce(a.sent_retention_days, $3::numeric) END * 86400)::float8) AS cutoff) c
        WHERE d.deleted_at IS NULL
          AND j.state = ANY($2::text[])
          AND (a.zero_footprint OR coalesce(a.sent_retention_days, $3::numeric) > 0)
          AND coalesce(j.completed_at, j.updated_at) <= c.cutoff
          AND NOT EXISTS (
            SELECT 1 FROM fax_jobs f
             WHERE f.source_job_id = j.id
               AND (f.state <> ALL($2::text[]) OR coalesce(f.completed_at, f.updated_at) > c.cutoff))
        LIMIT $4),
     renders AS (
       DELETE FROM fax_renders r USING fax_jobs j
        WHERE r.job_id = j.id AND (j.id IN (SELECT job_id FROM due) OR j.source_job_id IN (SELECT job_id FROM due))),
     shared AS (
       DELETE FROM document_renders s WHERE s.job_id IN (SELECT job_id FROM due)),
     cover_text AS (
       UPDATE fax_jobs f SET options = f.options ${COVER_TEXT_KEYS}
        WHERE f.id IN (SELECT job_id FROM due) OR f.source_job_id IN (SELECT job_id FROM due)),
     docs AS (
       UPDATE fax_documents d
          SET content = NULL, content_digest = NULL, file_url = NULL, file_name = '(deleted)', deleted_at = now(),
              deleted_reason = 'retention'
         FROM due WHERE d.job_id = due.job_id AND d.deleted_at IS NULL)
     INSERT INTO audit_events (account_id, actor_type, action, object_type, object_id, result, detail)
     SELECT account_id, 'system', 'fax.content_purge', 'fax', job_id::text, 'ok',
            jsonb_build_object('reason', CASE WHEN zero THEN 'zero_footprint' ELSE 'retention' END)
       FROM due`,
    [now, terminal, defaultDays, batch],
  );
  return r.rowCount ?? 0;
}

export interface RetentionPassResult {
  faxes: number;
  received: number;
  auditEvents: number;
}

/**
 * One pass of the retention schedule: sent faxes' content, received faxes' images, audit events past
 * AUDIT_RETENTION_DAYS. Each part runs bounded batches until nothing is left (at most `maxBatches`).
 */
export async function retentionPass(
  db: Queryable,
  o: { now: Date; defaultDays: number; auditDays: number; maxBatches?: number },
): Promise<RetentionPassResult> {
  const max = o.maxBatches ?? 100;
  let faxes = 0;
  for (let i = 0; i < max; i++) {
    const n = await purgeSentContent(db, o.now, o.defaultDays);
    faxes += n;
    if (n === 0) break;
  }
  let received = 0;
  for (let i = 0; i < max; i++) {
    const n = await purgeReceivedImages(db, o.now, o.defaultDays);
    received += n;
    if (n === 0) break;
  }
  const auditEvents = await purgeAuditEvents(db, o.now, o.auditDays, { maxBatches: max });
  return { faxes, received, auditEvents };
}

export type DeleteContentResult =
  | { ok: true; documents: number; images: number }
  | { ok: false; why: 'not_found' }
  | { ok: false; why: 'not_final'; state: string };

/**
 * DELETE /v1/faxes/{id}/content: deletes one final fax's content now, in the caller's transaction
 * (the API role, under the account's row-level security). A forward shares the documents of the fax
 * it forwards: deleting either deletes the documents of both, and needs every fax of the family final.
 */
export async function deleteFaxContent(c: Queryable, jobId: string): Promise<DeleteContentResult> {
  if (!isId(jobId)) return { ok: false, why: 'not_found' };
  const j = await c.query<{ root: string }>(
    'SELECT coalesce(source_job_id, id) AS root FROM fax_jobs WHERE id = $1',
    [jobId],
  );
  const root = j.rows[0]?.root;
  if (!root) return { ok: false, why: 'not_found' };
  const family = await c.query<{ id: string; state: string }>(
    'SELECT id, state FROM fax_jobs WHERE id = $1 OR source_job_id = $1 ORDER BY id = $2 DESC FOR UPDATE',
    [root, jobId],
  );
  const open = family.rows.find((f) => !terminalStates.has(f.state as never));
  if (open) return { ok: false, why: 'not_final', state: open.state };
  const images = await c.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM fax_renders WHERE job_id = ANY($1::uuid[])',
    [family.rows.map((f) => f.id)],
  );
  const documents = await new PgDocumentStore(c).delete(root, 'request');
  await c.query(`UPDATE fax_jobs SET options = options ${COVER_TEXT_KEYS} WHERE id = ANY($1::uuid[])`, [
    family.rows.map((f) => f.id),
  ]);
  return { ok: true, documents, images: images.rows[0]?.n ?? 0 };
}
