// SQL for webhook endpoints and the delivery log.
import { randomBytes } from 'node:crypto';
import { openText, sealText } from '../db/encryption.ts';
import type { Queryable } from '../db/pool.ts';
import { webhookSecretContext } from '../db/sealed-columns.ts';
import { newId } from '../domain/ids.ts';

export interface EndpointRow {
  id: string;
  account_id: string;
  url: string;
  secret: string;
  event_types: string[] | null;
  created_at: Date;
  /** Circuit breaker (migration 011): attempts in a row without an HTTP answer, and the pause. */
  failures_in_row: number;
  paused_until: Date | null;
}

/** A Standard Webhooks secret: `whsec_` + Base64 of 24 random bytes. */
export function newSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

export async function createEndpoint(
  db: Queryable,
  accountId: string,
  url: string,
  eventTypes: string[] | null,
): Promise<EndpointRow> {
  // The id is chosen here: the secret is sealed to it (src/db/sealed-columns.ts).
  const id = newId();
  const secret = newSecret();
  const stored = await sealText(db, webhookSecretContext(accountId, id), secret);
  const r = await db.query<EndpointRow>(
    `INSERT INTO webhook_endpoints (id, account_id, url, secret, event_types) VALUES ($1, $2, $3, $4, $5)
     RETURNING *`,
    [id, accountId, url, stored, eventTypes],
  );
  return { ...r.rows[0]!, secret };
}

/** A row as read, with its secret opened. */
async function opened(db: Queryable, row: EndpointRow): Promise<EndpointRow> {
  return { ...row, secret: await openText(db, webhookSecretContext(row.account_id, row.id), row.secret) };
}

/**
 * Creates an endpoint unless the account already has `max`; null when it has. Run it inside a
 * transaction: the advisory lock (per account, released at commit) makes concurrent registrations
 * of one account take turns, so they cannot together pass the cap.
 */
export async function createEndpointWithinCap(
  tx: Queryable,
  accountId: string,
  url: string,
  eventTypes: string[] | null,
  max: number,
): Promise<EndpointRow | null> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints:' || $1, 0))`, [
    accountId,
  ]);
  const r = await tx.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM webhook_endpoints WHERE account_id = $1',
    [accountId],
  );
  if ((r.rows[0]?.n ?? 0) >= max) return null;
  return createEndpoint(tx, accountId, url, eventTypes);
}

export async function listEndpoints(db: Queryable, accountId: string): Promise<EndpointRow[]> {
  const r = await db.query<EndpointRow>(
    'SELECT * FROM webhook_endpoints WHERE account_id = $1 ORDER BY created_at, id',
    [accountId],
  );
  const out: EndpointRow[] = [];
  for (const row of r.rows) out.push(await opened(db, row));
  return out;
}

export async function getEndpoint(db: Queryable, id: string, accountId: string): Promise<EndpointRow | null> {
  const r = await db.query<EndpointRow>('SELECT * FROM webhook_endpoints WHERE id = $1 AND account_id = $2', [
    id,
    accountId,
  ]);
  return r.rows[0] ? opened(db, r.rows[0]) : null;
}

export async function deleteEndpoint(db: Queryable, id: string, accountId: string): Promise<boolean> {
  const r = await db.query('DELETE FROM webhook_endpoints WHERE id = $1 AND account_id = $2', [
    id,
    accountId,
  ]);
  return (r.rowCount ?? 0) > 0;
}

export interface DeliveryView {
  delivery_id: string;
  event_id: string;
  event_type: string;
  job_id: string;
  sequence: number;
  state: 'pending' | 'delivered' | 'failed';
  attempts: number;
  next_attempt_at: string | null;
  last_status: number | null;
  last_error: string | null;
  created_at: string;
  delivered_at: string | null;
  attempt_log: {
    attempt: number;
    at: string;
    http_status: number | null;
    error: string | null;
    duration_ms: number;
  }[];
}

/** Newest first; `before` (a delivery id) pages backwards. */
export async function listDeliveries(
  db: Queryable,
  endpointId: string,
  limit: number,
  before: string | null,
): Promise<DeliveryView[]> {
  const r = await db.query<{
    id: string;
    event_id: string;
    event_type: string;
    job_id: string;
    sequence: string;
    state: DeliveryView['state'];
    attempts: number;
    next_attempt_at: Date;
    last_status: number | null;
    last_error: string | null;
    created_at: Date;
    delivered_at: Date | null;
    attempt_log: {
      attempt: number;
      at: string;
      http_status: number | null;
      error: string | null;
      duration_ms: number;
    }[];
  }>(
    `SELECT d.*, COALESCE((
        SELECT json_agg(json_build_object('attempt', a.attempt, 'at', a.at, 'http_status', a.http_status,
                                          'error', a.error, 'duration_ms', a.duration_ms) ORDER BY a.id)
          FROM webhook_attempts a WHERE a.delivery_id = d.id), '[]'::json) AS attempt_log
       FROM webhook_deliveries d
      WHERE d.endpoint_id = $1 AND ($3::bigint IS NULL OR d.id < $3::bigint)
      ORDER BY d.id DESC LIMIT $2`,
    [endpointId, limit, before],
  );
  return r.rows.map((d) => ({
    delivery_id: String(d.id),
    event_id: d.event_id,
    event_type: d.event_type,
    job_id: d.job_id,
    sequence: Number(d.sequence),
    state: d.state,
    attempts: d.attempts,
    next_attempt_at: d.state === 'pending' ? d.next_attempt_at.toISOString() : null,
    last_status: d.last_status,
    last_error: d.last_error,
    created_at: d.created_at.toISOString(),
    delivered_at: d.delivered_at?.toISOString() ?? null,
    attempt_log: d.attempt_log.map((a) => ({ ...a, at: new Date(a.at).toISOString() })),
  }));
}
