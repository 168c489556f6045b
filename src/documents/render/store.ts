// Where a job's rendered fax is kept: PostgreSQL (table fax_renders), so the process that
// transmits need not be the one that rendered.
import {
  HEADER_BYTES,
  isSealedText,
  open,
  openRange,
  openText,
  plainSize,
  seal,
  sealText,
} from '../../db/encryption.ts';
import type { Queryable } from '../../db/pool.ts';
import { coverContext, renderContext } from '../../db/sealed-columns.ts';
import type { CoverValues } from '../cover.ts';
import type { Quality } from './raster.ts';

export interface StoredRender {
  jobId: string;
  quality: Quality;
  pageCount: number;
  pageBytes: number[];
  cover: CoverValues | null;
  tiff: Buffer;
}

export async function saveRender(db: Queryable, accountId: string, r: StoredRender): Promise<void> {
  const tiff = await seal(db, renderContext(accountId, r.jobId), r.tiff);
  // The cover's resolved values are the customer's text (subject, message, names): kept sealed, as a
  // JSON string of sealed text in the jsonb column (clear JSON when ENCRYPTION=off or stored before).
  const coverText = r.cover
    ? await sealText(db, coverContext(accountId, r.jobId), JSON.stringify(r.cover))
    : null;
  const cover = coverText === null ? null : JSON.stringify(isSealedText(coverText) ? coverText : r.cover);
  await db.query(
    `INSERT INTO fax_renders (job_id, account_id, quality, page_count, page_bytes, cover, tiff)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (job_id) DO UPDATE SET quality = EXCLUDED.quality, page_count = EXCLUDED.page_count,
       page_bytes = EXCLUDED.page_bytes, cover = EXCLUDED.cover, tiff = EXCLUDED.tiff, created_at = now()`,
    [r.jobId, accountId, r.quality, r.pageCount, r.pageBytes, cover, tiff],
  );
}

export async function getRender(db: Queryable, jobId: string): Promise<StoredRender | null> {
  const q = await db.query<{
    job_id: string;
    account_id: string;
    quality: Quality;
    page_count: number;
    page_bytes: number[];
    cover: CoverValues | string | null;
    tiff: Buffer;
  }>(
    'SELECT job_id, account_id, quality, page_count, page_bytes, cover, tiff FROM fax_renders WHERE job_id = $1',
    [jobId],
  );
  const row = q.rows[0];
  if (!row) return null;
  return {
    jobId: row.job_id,
    quality: row.quality,
    pageCount: row.page_count,
    pageBytes: row.page_bytes,
    cover:
      typeof row.cover === 'string'
        ? (JSON.parse(await openText(db, coverContext(row.account_id, row.job_id), row.cover)) as CoverValues)
        : row.cover,
    tiff: await open(db, renderContext(row.account_id, row.job_id), row.tiff),
  };
}

export async function deleteRender(db: Queryable, jobId: string): Promise<boolean> {
  return ((await db.query('DELETE FROM fax_renders WHERE job_id = $1', [jobId])).rowCount ?? 0) > 0;
}

interface StoredShape {
  account_id: string;
  n: number;
  head: Buffer;
}

/** The stored image's account, stored size and first bytes (its sealed header), without the rest. */
async function shape(db: Queryable, jobId: string): Promise<StoredShape | null> {
  const q = await db.query<StoredShape>(
    'SELECT account_id, length(tiff) AS n, substring(tiff FROM 1 FOR $2::int) AS head FROM fax_renders WHERE job_id = $1',
    [jobId, HEADER_BYTES],
  );
  return q.rows[0] ?? null;
}

/**
 * The size of a job's stored fax image, without reading it; null when there is none (the image
 * endpoint reads it a range at a time: readRenderRange).
 */
export async function renderSize(db: Queryable, jobId: string): Promise<number | null> {
  const s = await shape(db, jobId);
  return s ? plainSize(s.head, s.n) : null;
}

/**
 * Bytes [offset, offset + length) of a job's stored fax image; null when it is gone. Of a sealed
 * image only the chunks holding them are read and opened (src/db/encryption.ts).
 */
export async function readRenderRange(
  db: Queryable,
  jobId: string,
  offset: number,
  length: number,
): Promise<Buffer | null> {
  const s = await shape(db, jobId);
  if (!s) return null;
  return openRange(db, renderContext(s.account_id, jobId), s.head, s.n, offset, length, async (from, n) => {
    const q = await db.query<{ b: Buffer }>(
      'SELECT substring(tiff FROM $2::int FOR $3::int) AS b FROM fax_renders WHERE job_id = $1',
      [jobId, from + 1, n],
    );
    return q.rows[0]?.b ?? null;
  });
}
