// The rendered pages of a broadcast's documents, made once and reused by every recipient's fax
// (table document_renders, migration 017): only each recipient's cover page is rendered for it.
// The first preparation of a broadcast at a quality takes a PostgreSQL advisory lock on the key
// (the job holding the documents, the quality), checks and renders the documents, stores the pages
// and unlocks; preparations of the other recipients, in this process or another, wait for the
// stored pages instead of rendering them again. A waiter holds no connection while it waits. When
// the documents are refused (a DocumentError: broken, over a limit), the refusal is stored instead,
// and every other recipient's fax fails with it without checking the documents again.
import { open, sealMany } from '../../db/encryption.ts';
import { sharedPageContext } from '../../db/sealed-columns.ts';
import type { Pool, PoolClient } from '../../db/pool.ts';
import { DocumentError } from '../errors.ts';
import type { EncodedPage } from './protocol.ts';
import type { Quality } from './raster.ts';

export interface SharedBody {
  /** Pages of the documents alone (the cover counts them as the fax's document pages). */
  documentPages: number;
  pages: EncodedPage[];
}

export interface SharedRenders {
  /**
   * The document pages of `jobId` (the job that holds the documents) at `quality`: read when stored,
   * else made by `produce` (under the key's lock) and stored. `reused` says which.
   */
  once(
    key: { jobId: string; accountId: string; quality: Quality },
    produce: () => Promise<SharedBody>,
    signal: AbortSignal,
  ): Promise<SharedBody & { reused: boolean }>;
}

/** How often a preparation waiting for another's render looks again. */
const WAIT_STEP_MS = 100;

const lockKey = (jobId: string, quality: Quality) => `document_render:${jobId}:${quality}`;

export class PgSharedRenders implements SharedRenders {
  private readonly pool: Pool;
  constructor(pool: Pool) {
    this.pool = pool;
  }

  async once(
    key: { jobId: string; accountId: string; quality: Quality },
    produce: () => Promise<SharedBody>,
    signal: AbortSignal,
  ): Promise<SharedBody & { reused: boolean }> {
    for (;;) {
      signal.throwIfAborted();
      const stored = await read(this.pool, key);
      if (stored) return { ...stored, reused: true };
      const c = await this.pool.connect();
      let locked = false;
      try {
        const r = await c.query<{ ok: boolean }>(
          'SELECT pg_try_advisory_lock(hashtextextended($1, 7301017)) AS ok',
          [lockKey(key.jobId, key.quality)],
        );
        locked = r.rows[0]?.ok === true;
        if (locked) {
          // Stored between the read above and the lock: another preparation finished first.
          const again = await read(c, key);
          if (again) return { ...again, reused: true };
          let made: SharedBody;
          try {
            made = await produce();
          } catch (err) {
            // A permanent refusal of the documents is kept: the other recipients fail with it too.
            if (err instanceof DocumentError) await writeFailure(c, key, err);
            throw err;
          }
          await write(c, key, made);
          return { ...made, reused: false };
        }
      } finally {
        if (locked)
          await c
            .query('SELECT pg_advisory_unlock(hashtextextended($1, 7301017))', [
              lockKey(key.jobId, key.quality),
            ])
            .catch(() => undefined);
        c.release();
      }
      // Another preparation is rendering these documents: wait for its pages (or for its lock to go,
      // when it failed or its process died: then this one renders).
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        }, WAIT_STEP_MS);
        const onAbort = () => {
          clearTimeout(t);
          reject(signal.reason as Error);
        };
        signal.addEventListener('abort', onAbort, { once: true });
      });
    }
  }
}

/**
 * The stored pages; null when none are stored; throws the stored refusal of the documents. Read
 * under the key's account too: a key naming another account's job never returns that account's pages.
 */
async function read(
  db: Pool | PoolClient,
  key: { jobId: string; accountId: string; quality: Quality },
): Promise<SharedBody | null> {
  const r = await db.query<{
    document_pages: number;
    pages: Buffer[];
    widths: number[];
    heights: number[];
    failure_code: string | null;
    failure_reason: string | null;
  }>(
    `SELECT document_pages, pages, widths, heights, failure_code, failure_reason
       FROM document_renders WHERE job_id = $1 AND quality = $2 AND account_id = $3`,
    [key.jobId, key.quality, key.accountId],
  );
  const row = r.rows[0];
  if (!row) return null;
  if (row.failure_code !== null) throw new DocumentError(row.failure_code, row.failure_reason ?? '');
  const pages = [];
  for (const [i, stored] of row.pages.entries()) {
    const ctx = sharedPageContext(key.accountId, key.jobId, key.quality, i);
    pages.push({ data: await open(db, ctx, stored), width: row.widths[i]!, height: row.heights[i]! });
  }
  return { documentPages: row.document_pages, pages };
}

async function write(
  c: PoolClient,
  key: { jobId: string; accountId: string; quality: Quality },
  b: SharedBody,
): Promise<void> {
  const sealed = await sealMany(
    c,
    key.accountId,
    b.pages.map((p, i) => ({
      ...sharedPageContext(key.accountId, key.jobId, key.quality, i),
      plain: p.data,
    })),
  );
  await c.query(
    `INSERT INTO document_renders (job_id, quality, account_id, document_pages, pages, widths, heights)
     VALUES ($1, $2, $3, $4, $5::bytea[], $6::int[], $7::int[])
     ON CONFLICT (job_id, quality) DO NOTHING`,
    [
      key.jobId,
      key.quality,
      key.accountId,
      b.documentPages,
      sealed,
      b.pages.map((p) => p.width),
      b.pages.map((p) => p.height),
    ],
  );
}

async function writeFailure(
  c: PoolClient,
  key: { jobId: string; accountId: string; quality: Quality },
  err: DocumentError,
): Promise<void> {
  await c.query(
    `INSERT INTO document_renders (job_id, quality, account_id, failure_code, failure_reason)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (job_id, quality) DO NOTHING`,
    [key.jobId, key.quality, key.accountId, err.code, err.message],
  );
}
