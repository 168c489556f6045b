// The rendered pages of a broadcast's documents, made once and reused by every recipient's fax
// (table document_renders, migration 017): only each recipient's cover page is rendered for it.
// The first preparation of a broadcast at a quality takes a PostgreSQL advisory lock on the key
// (the job holding the documents, the quality), checks and renders the documents, stores the pages
// and unlocks; preparations of the other recipients, in this process or another, wait for the
// stored pages instead of rendering them again. A waiter holds no connection while it waits. When
// the documents are refused (a DocumentError: broken, over a limit), the refusal is stored instead,
// and every other recipient's fax fails with it without checking the documents again.
//
// The same table holds the pages of a send's documents under a content key (migration 034): a
// SHA-256 over the documents' bytes, the check's limits and the renderer's generation
// (repeatKey). A later send of the same account whose documents have that key reads those pages
// (the latest row with it) instead of checking and rendering them again. A refusal is not kept under
// a content key: a refused document is checked again on its next send.
import { createHash } from 'node:crypto';
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

/**
 * Which stored pages: those of `jobId` (the job that holds the documents) at `quality`; with
 * `contentKey`, those of any job of the account whose documents had that key, and pages made are
 * stored under `jobId` with it.
 */
export interface RenderKey {
  jobId: string;
  accountId: string;
  quality: Quality;
  contentKey?: Buffer;
}

export interface SharedRenders {
  /**
   * The document pages for `key`: read when stored, else made by `produce` (under the key's lock)
   * and stored. `reused` says which.
   */
  once(
    key: RenderKey,
    produce: () => Promise<SharedBody>,
    signal: AbortSignal,
  ): Promise<SharedBody & { reused: boolean }>;
}

/**
 * Raised whenever what the render makes of the same bytes changes (the rasteriser, the binarisation,
 * the page fitting, the T.6 coder): pages stored under an older generation are then never reused.
 */
const RENDER_GENERATION = 1;

/**
 * The content key of a send's documents: the same for the same bytes in the same order, checked
 * under the same limits, by the same renderer. Null when a document's bytes are not at hand (a
 * file_url not fetched yet): such a send is rendered as it is.
 */
export function repeatKey(
  docs: { content: Buffer | null; content_digest?: Buffer | null; byte_size?: number | null }[],
  limits: unknown,
): Buffer | null {
  if (docs.length === 0) return null;
  // From the stored digests when every document has one (no need to read the documents); else from
  // the bytes themselves. The two never give the same key.
  if (docs.every((d) => d.content_digest && typeof d.byte_size === 'number')) {
    const h = createHash('sha256');
    h.update(
      `faxline document render by digest ${RENDER_GENERATION}\n${JSON.stringify(limits)}\n${docs.length}\n`,
    );
    for (const d of docs) {
      h.update(`${d.byte_size}\n`);
      h.update(d.content_digest!);
    }
    return h.digest();
  }
  if (docs.some((d) => !d.content)) return null;
  const h = createHash('sha256');
  h.update(`faxline document render ${RENDER_GENERATION}\n${JSON.stringify(limits)}\n${docs.length}\n`);
  for (const d of docs) {
    h.update(`${d.content!.length}\n`);
    h.update(d.content!);
  }
  return h.digest();
}

/** How often a preparation waiting for another's render looks again. */
const WAIT_STEP_MS = 100;

const lockKey = (k: RenderKey) =>
  k.contentKey
    ? `document_render_content:${k.accountId}:${k.contentKey.toString('hex')}:${k.quality}`
    : `document_render:${k.jobId}:${k.quality}`;

export class PgSharedRenders implements SharedRenders {
  private readonly pool: Pool;
  constructor(pool: Pool) {
    this.pool = pool;
  }

  async once(
    key: RenderKey,
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
          [lockKey(key)],
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
            // A permanent refusal of a broadcast's documents is kept: the other recipients fail with
            // it too. Under a content key it is not: the next send checks the documents again.
            if (err instanceof DocumentError && !key.contentKey) await writeFailure(c, key, err);
            throw err;
          }
          await write(c, key, made);
          return { ...made, reused: false };
        }
      } finally {
        if (locked)
          await c
            .query('SELECT pg_advisory_unlock(hashtextextended($1, 7301017))', [lockKey(key)])
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
async function read(db: Pool | PoolClient, key: RenderKey): Promise<SharedBody | null> {
  // One row per page, each page a bytea of its own: node-pg parses a bytea[] column character by
  // character in JavaScript (postgres-array), which was a quarter of the service process's CPU in
  // bench:pipeline when every fax read its document's pages; a plain bytea is decoded natively.
  const r = await db.query<{
    job_id: string;
    document_pages: number | null;
    failure_code: string | null;
    failure_reason: string | null;
    page: Buffer | null;
    width: number | null;
    height: number | null;
  }>(
    `WITH r AS (
       SELECT job_id, document_pages, pages, widths, heights, failure_code, failure_reason
         FROM document_renders
        WHERE account_id = $1 AND quality = $3 AND ${
          key.contentKey ? 'content_key = $2 AND failure_code IS NULL' : 'job_id = $2'
        }
        ORDER BY created_at DESC LIMIT 1)
     SELECT r.job_id, r.document_pages, r.failure_code, r.failure_reason,
            p.page, r.widths[p.i] AS width, r.heights[p.i] AS height
       FROM r LEFT JOIN LATERAL unnest(r.pages) WITH ORDINALITY AS p(page, i) ON true
      ORDER BY p.i`,
    [key.accountId, key.contentKey ?? key.jobId, key.quality],
  );
  const row = r.rows[0];
  if (!row) return null;
  if (row.failure_code !== null) throw new DocumentError(row.failure_code, row.failure_reason ?? '');
  const pages = [];
  for (const [i, x] of r.rows.entries()) {
    // Sealed under the job the pages were rendered for (under a content key, maybe another job).
    const ctx = sharedPageContext(key.accountId, row.job_id, key.quality, i);
    pages.push({ data: await open(db, ctx, x.page!), width: x.width!, height: x.height! });
  }
  return { documentPages: row.document_pages!, pages };
}

async function write(c: PoolClient, key: RenderKey, b: SharedBody): Promise<void> {
  const sealed = await sealMany(
    c,
    key.accountId,
    b.pages.map((p, i) => ({
      ...sharedPageContext(key.accountId, key.jobId, key.quality, i),
      plain: p.data,
    })),
  );
  await c.query(
    `INSERT INTO document_renders (job_id, quality, account_id, document_pages, pages, widths, heights, content_key)
     VALUES ($1, $2, $3, $4, $5::bytea[], $6::int[], $7::int[], $8)
     ON CONFLICT (job_id, quality) DO NOTHING`,
    [
      key.jobId,
      key.quality,
      key.accountId,
      b.documentPages,
      sealed,
      b.pages.map((p) => p.width),
      b.pages.map((p) => p.height),
      key.contentKey ?? null,
    ],
  );
}

async function writeFailure(c: PoolClient, key: RenderKey, err: DocumentError): Promise<void> {
  await c.query(
    `INSERT INTO document_renders (job_id, quality, account_id, failure_code, failure_reason)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (job_id, quality) DO NOTHING`,
    [key.jobId, key.quality, key.accountId, err.code, err.message],
  );
}
