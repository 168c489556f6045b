// Privacy deletion on demand: `npm run admin -- delete-documents --job <id>` (or `--account <id>`).
// Forwards share the documents of the job they forward, so deleting for any job of such a family
// deletes the family's documents. Jobs still in progress keep theirs unless --force: deleting under a
// running fax would fail it half-way (with --force such a job fails with `document_missing`).
import { recordAuditMany } from '../audit/record.ts';
import type { Queryable } from '../db/pool.ts';
import { isId } from '../domain/ids.ts';
import { terminalStates } from '../domain/states.ts';
import type { DocumentStore } from '../documents/store.ts';

export interface DeleteDocumentsResult {
  jobs: string[];
  documents: number;
}

export class DeleteRefused extends Error {}

export async function deleteDocuments(
  db: Queryable,
  store: DocumentStore,
  target: { jobId?: string; accountId?: string; force?: boolean },
): Promise<DeleteDocumentsResult> {
  let roots: string[];
  if (target.jobId !== undefined) {
    if (!isId(target.jobId)) throw new DeleteRefused(`"${target.jobId}" is not a job id`);
    const r = await db.query<{ root: string }>(
      'SELECT coalesce(source_job_id, id) AS root FROM fax_jobs WHERE id = $1',
      [target.jobId],
    );
    if (!r.rows[0]) throw new DeleteRefused(`no job ${target.jobId}`);
    roots = [r.rows[0].root];
  } else if (target.accountId !== undefined) {
    if (!isId(target.accountId)) throw new DeleteRefused(`"${target.accountId}" is not an account id`);
    const r = await db.query<{ id: string }>(
      `SELECT DISTINCT job_id AS id FROM fax_documents WHERE account_id = $1 AND deleted_at IS NULL`,
      [target.accountId],
    );
    roots = r.rows.map((x) => x.id);
  } else {
    throw new DeleteRefused('name a job (--job <id>) or an account (--account <id>)');
  }
  if (roots.length === 0) return { jobs: [], documents: 0 };

  const family = await db.query<{ id: string; state: string; account_id: string }>(
    'SELECT id, state, account_id FROM fax_jobs WHERE id = ANY($1::uuid[]) OR source_job_id = ANY($1::uuid[]) ORDER BY created_at',
    [roots],
  );
  const active = family.rows.filter((j) => !terminalStates.has(j.state as never));
  if (active.length > 0 && !target.force)
    throw new DeleteRefused(
      `${active.map((j) => `job ${j.id} is ${j.state}`).join(', ')}: cancel it or wait until it ends, or pass --force`,
    );
  let documents = 0;
  for (const root of roots) documents += await store.delete(root, 'request');
  // The audit trail: one event per fax whose content went (actor admin: the operator's CLI).
  await recordAuditMany(
    db,
    family.rows.map((j) => ({
      accountId: j.account_id,
      actor: { type: 'admin', id: null },
      action: 'fax.content_delete',
      object: { type: 'fax', id: j.id },
      result: 'ok',
      detail: { via: 'admin delete-documents' },
    })),
  );
  return { jobs: family.rows.map((j) => j.id), documents };
}
