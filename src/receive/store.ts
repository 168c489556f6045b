// Received faxes in PostgreSQL: the receiving side's writes (as the schema owner: a call belongs to
// no customer request) and the customer's reads (under the account's row-level security). Every
// write that changes what a customer is told adds its event to received_fax_outbox in the same
// transaction.
import { open, sealMany } from '../db/encryption.ts';
import type { Pool, Queryable } from '../db/pool.ts';
import { receivedContext } from '../db/sealed-columns.ts';
import { isId } from '../domain/ids.ts';
import type { ReceivingNumber } from './routing.ts';

export type ReceivedStatus = 'receiving' | 'received' | 'partial' | 'failed';
export type ReceiveEventType = 'fax.receiving' | 'fax.received' | 'fax.receive_failed';

/** The record as the API shows it (no images). */
export interface ReceivedFaxRow {
  id: string;
  status: ReceivedStatus;
  to: string;
  number_id: string | null;
  from: string | null;
  remote_csid: string | null;
  station_id: string | null;
  pages: number;
  resolution: string | null;
  x_dpi: number | null;
  y_dpi: number | null;
  encoding: string | null;
  bit_rate: number | null;
  ecm: boolean | null;
  transport: 'audio' | 't38' | null;
  duration_ms: number | null;
  result_code: number | null;
  result_text: string | null;
  call_id: string | null;
  created_at: string;
  received_at: string | null;
  read: boolean;
  read_at: string | null;
  tiff_bytes: number | null;
  pdf_bytes: number | null;
  images_deleted_at: string | null;
  images_deleted_reason: 'retention' | 'request' | null;
}

const ts = (c: string) => `to_char(${c} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

export const RECEIVED_COLUMNS = `id, status, to_number AS "to", number_id, from_number AS "from", remote_csid,
  station_id, pages, resolution, x_dpi, y_dpi, encoding, bit_rate, ecm, transport, duration_ms,
  result_code, result_text, call_id, ${ts('created_at')} AS created_at,
  ${ts('received_at')} AS received_at, read_at IS NOT NULL AS read, ${ts('read_at')} AS read_at,
  CASE WHEN tiff IS NULL THEN NULL ELSE tiff_bytes END AS tiff_bytes,
  CASE WHEN pdf IS NULL THEN NULL ELSE pdf_bytes END AS pdf_bytes,
  ${ts('images_deleted_at')} AS images_deleted_at, images_deleted_reason`;

/** The number an inbound call is for, whoever holds it (schema owner). */
export async function findReceivingNumber(db: Queryable, e164: string): Promise<ReceivingNumber | null> {
  const r = await db.query<ReceivingNumber>(
    `SELECT id AS "numberId", account_id AS "accountId", number, station_id AS "stationId", receive
       FROM numbers WHERE number = $1`,
    [e164],
  );
  return r.rows[0] ?? null;
}

export interface NewReception {
  accountId: string;
  numberId: string | null;
  to: string;
  from: string | null;
  stationId: string;
  callId: string | null;
}

/** What the reception ended with, as the row and its event record it. */
export interface ReceptionRecord {
  status: Exclude<ReceivedStatus, 'receiving'>;
  remoteCsid: string | null;
  pages: number;
  resolution: string | null;
  xDpi: number | null;
  yDpi: number | null;
  encoding: string | null;
  bitRate: number | null;
  ecm: boolean | null;
  transport: 'audio' | 't38' | null;
  durationMs: number;
  resultCode: number | null;
  resultText: string;
  tiff: Uint8Array | null;
  pdf: Uint8Array | null;
}

/** Inserts the row of an answered call and its fax.receiving event, in one transaction. */
export async function insertReception(db: Pool, n: NewReception): Promise<{ id: string; createdAt: Date }> {
  const r = await db.query<{ id: string; created_at: Date }>(
    `WITH f AS (
       INSERT INTO received_faxes (account_id, number_id, to_number, from_number, station_id, call_id)
       VALUES ($1, $2, $3, $4, $5, $6) RETURNING id, created_at),
     o AS (
       INSERT INTO received_fax_outbox (received_fax_id, type, details)
       SELECT id, 'fax.receiving', jsonb_build_object('status', 'receiving', 'to', $3::text, 'from', $4::text,
              'station_id', $5::text, 'call_id', $6::text) FROM f)
     SELECT id, created_at FROM f`,
    [n.accountId, n.numberId, n.to, n.from, n.stationId, n.callId],
  );
  const row = r.rows[0]!;
  return { id: row.id, createdAt: row.created_at };
}

/**
 * Stores how a reception ended: images, metadata and its event (fax.received, or fax.receive_failed
 * for a partial or failed one) in ONE statement, so a row is complete and announced together or not
 * at all. Only a row still 'receiving' is completed (false otherwise: the sweep failed it already).
 */
export async function completeReception(db: Queryable, id: string, r: ReceptionRecord): Promise<boolean> {
  const type: ReceiveEventType = r.status === 'received' ? 'fax.received' : 'fax.receive_failed';
  const owner = await db.query<{ account_id: string }>(
    'SELECT account_id FROM received_faxes WHERE id = $1',
    [id],
  );
  const accountId = owner.rows[0]?.account_id;
  if (!accountId) return false;
  const images = [
    ...(r.tiff ? [{ ...receivedContext(accountId, id, 'tiff'), plain: r.tiff }] : []),
    ...(r.pdf ? [{ ...receivedContext(accountId, id, 'pdf'), plain: r.pdf }] : []),
  ];
  const sealed = await sealMany(db, accountId, images);
  const tiff = r.tiff ? sealed[0]! : null;
  const pdf = r.pdf ? sealed[r.tiff ? 1 : 0]! : null;
  const res = await db.query(
    `WITH f AS (
       UPDATE received_faxes
          SET status = $2, remote_csid = $3, pages = $4, resolution = $5, x_dpi = $6, y_dpi = $7,
              encoding = $8, bit_rate = $9, ecm = $10, transport = $11, duration_ms = $12,
              result_code = $13, result_text = $14, tiff = $15, pdf = $16,
              tiff_bytes = $18, pdf_bytes = $19, received_at = now()
        WHERE id = $1 AND status = 'receiving'
        RETURNING id, to_number, from_number, station_id, call_id)
     INSERT INTO received_fax_outbox (received_fax_id, type, details)
     SELECT id, $17, jsonb_build_object('status', $2::text, 'to', to_number, 'from', from_number,
            'station_id', station_id, 'call_id', call_id, 'remote_csid', $3::text, 'pages', $4::int,
            'resolution', $5::text, 'x_dpi', $6::int, 'y_dpi', $7::int, 'encoding', $8::text,
            'bit_rate', $9::int, 'ecm', $10::boolean, 'transport', $11::text, 'duration_ms', $12::int,
            'result_code', $13::int, 'result_text', $14::text)
       FROM f`,
    [
      id,
      r.status,
      r.remoteCsid,
      r.pages,
      r.resolution,
      r.xDpi,
      r.yDpi,
      r.encoding,
      r.bitRate,
      r.ecm,
      r.transport,
      r.durationMs,
      r.resultCode,
      r.resultText,
      tiff,
      pdf,
      type,
      r.tiff?.length ?? null,
      r.pdf?.length ?? null,
    ],
  );
  return (res.rowCount ?? 0) === 1;
}

export const abandonedText = 'the receiving process ended during the call; nothing of it was stored';

/**
 * Fails receptions still 'receiving' that began before `cutoff`: their process died (a live one ends
 * every call within INBOUND_MAX_CALL_SECONDS). Each gets fax.receive_failed. Returns how many.
 */
export async function failAbandoned(db: Queryable, cutoff: Date): Promise<number> {
  const r = await db.query(
    `WITH f AS (
       UPDATE received_faxes SET status = 'failed', received_at = now(), result_text = $2
        WHERE id IN (SELECT id FROM received_faxes WHERE status = 'receiving' AND created_at < $1
                      ORDER BY created_at LIMIT 500 FOR UPDATE SKIP LOCKED)
        RETURNING id, to_number, from_number, station_id, call_id, pages)
     INSERT INTO received_fax_outbox (received_fax_id, type, details)
     SELECT id, 'fax.receive_failed', jsonb_build_object('status', 'failed', 'to', to_number,
            'from', from_number, 'station_id', station_id, 'call_id', call_id, 'pages', pages,
            'result_code', NULL, 'result_text', $2::text)
       FROM f`,
    [cutoff, abandonedText],
  );
  return r.rowCount ?? 0;
}

// ---- the customer's side (run inside TenantDb.tx: row-level security scopes every statement) ----

export const receivedMessages = {
  listed: 'Received faxes retrieved successfully',
  found: 'Received fax found',
  notFound: 'Received fax not found',
  markedRead: 'Received fax marked as read',
  markedUnread: 'Received fax marked as unread',
  deleted: 'Received fax has been deleted successfully.',
  stillReceiving: 'Received fax has no image yet: it is still being received',
  noImage: 'Received fax has no image: no page arrived',
  imageRemoved: 'Received fax image was removed',
  noPdf: 'Received fax has no PDF: its TIFF could not be wrapped as PDF; download the TIFF',
} as const;

export async function getReceived(c: Queryable, id: string): Promise<ReceivedFaxRow | null> {
  if (!isId(id)) return null;
  const r = await c.query<ReceivedFaxRow>(
    `SELECT ${RECEIVED_COLUMNS} FROM received_faxes WHERE id = $1 AND deleted_at IS NULL`,
    [id],
  );
  return r.rows[0] ?? null;
}

/** The stored image, or why there is none. */
export async function getImage(
  c: Queryable,
  id: string,
  kind: 'tiff' | 'pdf',
): Promise<{ image: Buffer } | { missing: 'not_found' | 'receiving' | 'none' | 'removed' | 'no_pdf' }> {
  if (!isId(id)) return { missing: 'not_found' };
  const col = kind === 'tiff' ? 'tiff' : 'pdf';
  const r = await c.query<{
    image: Buffer | null;
    account_id: string;
    status: ReceivedStatus;
    gone: boolean;
    tiff: boolean;
  }>(
    `SELECT ${col} AS image, account_id, status, images_deleted_at IS NOT NULL AS gone, tiff IS NOT NULL AS tiff
       FROM received_faxes WHERE id = $1 AND deleted_at IS NULL`,
    [id],
  );
  const row = r.rows[0];
  if (!row) return { missing: 'not_found' };
  if (row.image) return { image: await open(c, receivedContext(row.account_id, id, kind), row.image) };
  if (row.status === 'receiving') return { missing: 'receiving' };
  if (row.gone) return { missing: 'removed' };
  if (kind === 'pdf' && row.tiff) return { missing: 'no_pdf' };
  return { missing: 'none' };
}

export async function markRead(c: Queryable, id: string, read: boolean): Promise<ReceivedFaxRow | null> {
  if (!isId(id)) return null;
  const r = await c.query<ReceivedFaxRow>(
    `UPDATE received_faxes SET read_at = CASE WHEN $2 THEN coalesce(read_at, now()) ELSE NULL END
      WHERE id = $1 AND deleted_at IS NULL RETURNING ${RECEIVED_COLUMNS}`,
    [id, read],
  );
  return r.rows[0] ?? null;
}

/** Deletes a received fax for the customer: its images go, the row stays (hidden) for the operator. */
export async function deleteReceived(c: Queryable, id: string): Promise<boolean> {
  if (!isId(id)) return false;
  const r = await c.query(
    `UPDATE received_faxes
        SET deleted_at = now(), tiff = NULL, pdf = NULL,
            images_deleted_at = coalesce(images_deleted_at, now()),
            images_deleted_reason = coalesce(images_deleted_reason, 'request')
      WHERE id = $1 AND deleted_at IS NULL AND status <> 'receiving'`,
    [id],
  );
  return (r.rowCount ?? 0) === 1;
}

/**
 * Retention of received images: removes the TIFF and PDF of faxes received more than their account's
 * days ago (accounts.received_retention_days, else `defaultDays`; 0 keeps them), and, for an account
 * in zero-footprint mode, of faxes already downloaded or marked read. Each removal writes an audit event
 * (received_fax.content_purge, actor system) in the same statement. At most `batch` per call.
 */
export async function purgeReceivedImages(
  db: Queryable,
  now: Date,
  defaultDays: number,
  batch = 500,
): Promise<number> {
  const r = await db.query(
    `WITH purged AS (
       UPDATE received_faxes f
          SET tiff = NULL, pdf = NULL, images_deleted_at = now(), images_deleted_reason = 'retention'
         FROM accounts a
        WHERE f.id IN (
                SELECT f2.id FROM received_faxes f2 JOIN accounts a2 ON a2.id = f2.account_id
                 WHERE (f2.tiff IS NOT NULL OR f2.pdf IS NOT NULL)
                   AND f2.status <> 'receiving'
                   AND ((coalesce(a2.received_retention_days, $2::numeric) > 0
                         AND f2.received_at < $1::timestamptz
                           - make_interval(secs => (coalesce(a2.received_retention_days, $2::numeric) * 86400)::float8))
                        OR (a2.zero_footprint AND (f2.downloaded_at IS NOT NULL OR f2.read_at IS NOT NULL)))
                 LIMIT $3)
          AND a.id = f.account_id
       RETURNING f.id, f.account_id,
                 a.zero_footprint AND (f.downloaded_at IS NOT NULL OR f.read_at IS NOT NULL) AS zero)
     INSERT INTO audit_events (account_id, actor_type, action, object_type, object_id, result, detail)
     SELECT account_id, 'system', 'received_fax.content_purge', 'received_fax', id::text, 'ok',
            jsonb_build_object('reason', CASE WHEN zero THEN 'zero_footprint' ELSE 'retention' END)
       FROM purged`,
    [now, defaultDays, batch],
  );
  return r.rowCount ?? 0;
}

/** The first download of a received fax's images (zero footprint removes them after it). */
export async function markDownloaded(c: Queryable, id: string): Promise<void> {
  await c.query('UPDATE received_faxes SET downloaded_at = now() WHERE id = $1 AND downloaded_at IS NULL', [
    id,
  ]);
}
