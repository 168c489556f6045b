// Seals content stored before encryption was switched on (issue 32: "migrations encrypt what is
// already stored, online, in batches"). Walks each table of sealed-columns.ts in key order, `batch`
// rows per transaction, sealing every value that is not sealed yet. Idempotent (a sealed value is
// skipped, re-checked under the row lock) and resumable (a new run starts over and finds only what
// is left); reads accept both forms meanwhile (src/db/encryption.ts). The send worker runs it in the
// background at start; `npm run admin -- encrypt-existing` runs it to the end.
import { encryptionOn, isSealed, isSealedText, sealMany, sealText, type SealContext } from './encryption.ts';
import type { Pool, Queryable } from './pool.ts';
import {
  coverContext,
  documentContext,
  SEALED_OPTION_FIELDS,
  sealJobOptions,
  receivedContext,
  renderContext,
  sharedPageContext,
  templateContext,
  webhookSecretContext,
} from './sealed-columns.ts';

/** "\0FXC": the first bytes of every sealed value. */
const MAGIC_SQL = `'\\x00465843'::bytea`;
const clear = (col: string) => `(${col} IS NOT NULL AND substring(${col} FROM 1 FOR 4) <> ${MAGIC_SQL})`;

interface Target {
  table: string;
  /** The ordering key: one uuid column (the primary key or its first column). Walked with >=: what
   * a batch sealed no longer matches `where`, and a key split over two batches is not skipped. */
  key: string;
  /** Rows of it still holding a value in clear. */
  where: string;
  columns: string;
  /** Seals the row's clear values; returns the UPDATE that stores them. */
  seal(c: Queryable, row: Record<string, unknown>): Promise<{ sql: string; values: unknown[] }>;
}

async function sealBytes(c: Queryable, ctx: SealContext, b: Buffer | null): Promise<Buffer | null> {
  if (b === null || isSealed(b)) return b;
  return (await sealMany(c, ctx.accountId, [{ ...ctx, plain: b }]))[0]!;
}

const targets: Target[] = [
  {
    table: 'fax_documents',
    key: 'id',
    where: clear('content'),
    columns: 'id, job_id, account_id, position, content',
    async seal(c, r) {
      const ctx = documentContext(r.account_id as string, r.job_id as string, r.position as number);
      return {
        // The digest taken in clear (a plain SHA-256 of the content) would still let a guess be
        // confirmed: it goes (a forward of this job is then keyed by the documents' bytes, shared.ts repeatKey).
        sql: 'UPDATE fax_documents SET content = $2, content_digest = NULL WHERE id = $1',
        values: [r.id, await sealBytes(c, ctx, r.content as Buffer)],
      };
    },
  },
  {
    // The content fields of a send's options (cover text, names), kept as JSON in clear before they were sealed.
    table: 'fax_jobs',
    key: 'id',
    where: `options ?| array[${SEALED_OPTION_FIELDS.map((f) => `'${f}'`).join(', ')}]`,
    columns: 'id, account_id, options',
    async seal(c, r) {
      return {
        sql: 'UPDATE fax_jobs SET options = $2::jsonb WHERE id = $1',
        values: [
          r.id,
          JSON.stringify(
            await sealJobOptions(c, r.account_id as string, r.id as string, r.options as object),
          ),
        ],
      };
    },
  },
  {
    // The image, and the cover's resolved values (a JSON object in clear; sealed: a JSON string).
    table: 'fax_renders',
    key: 'job_id',
    where: `(${clear('tiff')} OR jsonb_typeof(cover) = 'object')`,
    columns: 'job_id, account_id, tiff, cover',
    async seal(c, r) {
      const a = r.account_id as string;
      const id = r.job_id as string;
      const cover = r.cover as unknown;
      return {
        sql: 'UPDATE fax_renders SET tiff = $2, cover = $3::jsonb WHERE job_id = $1',
        values: [
          id,
          await sealBytes(c, renderContext(a, id), r.tiff as Buffer),
          cover === null
            ? null
            : typeof cover === 'object'
              ? JSON.stringify(await sealText(c, coverContext(a, id), JSON.stringify(cover)))
              : JSON.stringify(cover),
        ],
      };
    },
  },
  {
    // The key is (job_id, quality); walked by job_id, every quality of a job in one batch.
    table: 'document_renders',
    key: 'job_id',
    where: `pages IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(pages) p WHERE ${clear('p')})`,
    columns: 'job_id, quality, account_id, pages',
    async seal(c, r) {
      const pages: Buffer[] = [];
      for (const [i, p] of (r.pages as Buffer[]).entries()) {
        const ctx = sharedPageContext(r.account_id as string, r.job_id as string, r.quality as string, i);
        pages.push((await sealBytes(c, ctx, p))!);
      }
      return {
        // Its content key, taken over the documents in clear, goes too (the pages are then no longer
        // found by a later send, which renders its documents again).
        sql: 'UPDATE document_renders SET pages = $3::bytea[], content_key = NULL WHERE job_id = $1 AND quality = $2',
        values: [r.job_id, r.quality, pages],
      };
    },
  },
  {
    table: 'received_faxes',
    key: 'id',
    where: `(${clear('tiff')} OR ${clear('pdf')})`,
    columns: 'id, account_id, tiff, pdf',
    async seal(c, r) {
      const a = r.account_id as string;
      const id = r.id as string;
      return {
        sql: 'UPDATE received_faxes SET tiff = $2, pdf = $3 WHERE id = $1',
        values: [
          id,
          await sealBytes(c, receivedContext(a, id, 'tiff'), r.tiff as Buffer | null),
          await sealBytes(c, receivedContext(a, id, 'pdf'), r.pdf as Buffer | null),
        ],
      };
    },
  },
  {
    table: 'smart_templates',
    key: 'id',
    where: clear('pdf'),
    columns: 'id, account_id, pdf',
    async seal(c, r) {
      const ctx = templateContext(r.account_id as string, r.id as string);
      const pdf = r.pdf as Buffer;
      return {
        sql: 'UPDATE smart_templates SET pdf = $2, byte_size = coalesce(byte_size, $3) WHERE id = $1',
        values: [r.id, await sealBytes(c, ctx, pdf), pdf.length],
      };
    },
  },
  {
    table: 'webhook_endpoints',
    key: 'id',
    where: `secret NOT LIKE 'fxc1:%'`,
    columns: 'id, account_id, secret',
    async seal(c, r) {
      const s = r.secret as string;
      const ctx = webhookSecretContext(r.account_id as string, r.id as string);
      return {
        sql: 'UPDATE webhook_endpoints SET secret = $2 WHERE id = $1',
        values: [r.id, isSealedText(s) ? s : await sealText(c, ctx, s)],
      };
    },
  },
];

export interface EncryptExistingProgress {
  table: string;
  sealed: number;
}

/**
 * Seals every value still in clear, `batch` rows per transaction, at most `maxBatches` batches in
 * all (a bound for a loop; the default is far beyond any installation). Stops early when `signal`
 * aborts. Returns the rows sealed per table.
 */
export async function encryptExisting(
  db: Pool,
  o: {
    batch?: number;
    maxBatches?: number;
    signal?: AbortSignal;
    onBatch?: (p: EncryptExistingProgress) => void;
  } = {},
): Promise<Record<string, number>> {
  if (!encryptionOn()) throw new Error('encrypt-existing needs a key (ENCRYPTION=on with KEK_FILE or KEK)');
  const batch = o.batch ?? 200;
  let budget = o.maxBatches ?? 10_000_000;
  const done: Record<string, number> = {};
  for (const t of targets) {
    let sealed = 0;
    let after: string | null = null;
    while (budget-- > 0 && !o.signal?.aborted) {
      const c = await db.connect();
      let rows: Record<string, unknown>[];
      try {
        await c.query('BEGIN');
        rows = (
          await c.query(
            `SELECT ${t.columns}, ${t.key} AS walk_key FROM ${t.table}
              WHERE ($1::uuid IS NULL OR ${t.key} >= $1::uuid) AND ${t.where}
              ORDER BY ${t.key} LIMIT $2 FOR UPDATE`,
            [after, batch],
          )
        ).rows;
        for (const r of rows) {
          const u = await t.seal(c, r);
          await c.query(u.sql, u.values);
        }
        await c.query('COMMIT');
      } catch (err) {
        await c.query('ROLLBACK').catch(() => undefined);
        throw err;
      } finally {
        c.release();
      }
      if (rows.length === 0) break;
      after = rows[rows.length - 1]!.walk_key as string;
      sealed += rows.length;
      o.onBatch?.({ table: t.table, sealed });
      if (rows.length < batch) break;
    }
    done[t.table] = sealed;
  }
  return done;
}

/** Values still in clear, per table (admin `kek-status`; the test of encrypt-existing). */
export async function countClear(db: Queryable): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of targets)
    out[t.table] = (
      await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${t.table} WHERE ${t.where}`)
    ).rows[0]!.n;
  return out;
}

/** Runs encryptExisting once in the background; stop() aborts it between batches and waits. */
export function startEncryptExisting(
  db: Pool,
  o: {
    batch: number;
    onBatch: (p: EncryptExistingProgress) => void;
    onDone: (sealed: Record<string, number>) => void;
    onError: (err: unknown) => void;
  },
): { stop(): Promise<void> } {
  const abort = new AbortController();
  const run = encryptExisting(db, { batch: o.batch, signal: abort.signal, onBatch: o.onBatch }).then(
    (sealed) => {
      if (!abort.signal.aborted) o.onDone(sealed);
    },
    (err: unknown) => o.onError(err),
  );
  return {
    stop: async () => {
      abort.abort();
      await run;
    },
  };
}
