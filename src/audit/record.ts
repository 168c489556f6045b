// The audit trail (migration 025, docs/audit-retention.md): one row per access to fax content and per
// change of settings. Append-only: the service's roles can insert and read events, never change them.
// Everything that writes one goes through recordAudit (one row) or recordAuditMany (a batch, one
// statement); the HTTP adapter's hook (src/api/audit.ts) and the AMQP intake call them, the retention
// purge writes its own rows in the statement that purges.
import type { Queryable } from '../db/pool.ts';

export type ActorType = 'api_key' | 'user' | 'amqp_sender' | 'mail_sender' | 'system' | 'admin';

export interface Actor {
  type: ActorType;
  /** The API key's id, the user's id, the broker user, the allowed-sender entry's id; null for the system. */
  id: string | null;
}

export interface AuditEvent {
  accountId: string;
  actor: Actor;
  /** Dotted lower-case name, e.g. `fax.send`, `received_fax.download`, `contact.update`. */
  action: string;
  object?: { type: string; id: string | null } | null;
  ip?: string | null;
  userAgent?: string | null;
  result: 'ok' | 'refused';
  /** The HTTP status of the answer (or null outside HTTP). */
  status?: number | null;
  /** Small facts worth keeping (a refusal's reason, a format): never content, numbers or names. */
  detail?: Record<string, unknown> | null;
}

const ACTION = /^[a-z_]+(\.[a-z_]+)+$/;

function clip(s: string | null | undefined, n: number): string | null {
  if (s === null || s === undefined || s === '') return null;
  return s.length > n ? s.slice(0, n) : s;
}

function row(e: AuditEvent): unknown[] {
  if (!ACTION.test(e.action) || e.action.length > 64) throw new Error(`not an audit action: ${e.action}`);
  return [
    e.accountId,
    e.actor.type,
    clip(e.actor.id, 200),
    e.action,
    clip(e.object?.type, 64),
    clip(e.object?.id, 200),
    clip(e.ip, 64),
    clip(e.userAgent, 512),
    e.result,
    e.status ?? null,
    e.detail ? JSON.stringify(e.detail) : null,
  ];
}

const COLUMNS =
  'account_id, actor_type, actor_id, action, object_type, object_id, ip, user_agent, result, status, detail';

/**
 * Writes one event. `db` is what the caller writes with: the request's account-scoped transaction
 * (the API role may insert only its account's events) or the owner's pool.
 */
export async function recordAudit(db: Queryable, e: AuditEvent): Promise<void> {
  await db.query(
    `INSERT INTO audit_events (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb)`,
    row(e),
  );
}

/**
 * Writes one event as its own account in one statement, outside any transaction: the statement sets
 * the account (set_config(..., true), which ends with the statement's own implicit transaction)
 * in a CTE that it reads before its row is formed, so the row-level policy of the API's role
 * (tenant-db.ts) checks the row against that account. One statement where a scoped transaction
 * takes three more (BEGIN and the setting, then COMMIT): the API writes one per audited request.
 * `db` must be a pool (or a client outside a transaction).
 */
export async function recordAuditAs(db: Queryable, e: AuditEvent): Promise<void> {
  const q = auditAsQuery(e);
  await db.query(q.text, q.values);
}

/** recordAuditAs's statement; `scope`, the account it sets, is the event's (a test sets another). */
export function auditAsQuery(e: AuditEvent, scope = e.accountId): { text: string; values: unknown[] } {
  return {
    text: `WITH scope AS (SELECT set_config('faxline.account_id', $12::text, true))
     INSERT INTO audit_events (${COLUMNS})
     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb FROM scope`,
    values: [...row(e), scope],
  };
}

/** Writes many events in one statement (a batch of the AMQP intake). */
export async function recordAuditMany(db: Queryable, events: readonly AuditEvent[]): Promise<void> {
  if (events.length === 0) return;
  const rows = events.map(row);
  const col = (i: number) => rows.map((r) => r[i]);
  await db.query(
    `INSERT INTO audit_events (${COLUMNS})
     SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                          $7::text[], $8::text[], $9::text[], $10::int[], $11::jsonb[])`,
    Array.from({ length: 11 }, (_, i) => col(i)),
  );
}

/** Keeps events AUDIT_RETENTION_DAYS: deletes older ones in bounded batches; returns how many. */
export async function purgeAuditEvents(
  db: Queryable,
  now: Date,
  retentionDays: number,
  o: { batch?: number; maxBatches?: number } = {},
): Promise<number> {
  const before = new Date(now.getTime() - retentionDays * 86_400_000);
  let total = 0;
  for (let i = 0; i < (o.maxBatches ?? 100); i++) {
    const r = await db.query<{ n: number }>('SELECT faxline_purge_audit_events($1, $2) AS n', [
      before,
      o.batch ?? 1000,
    ]);
    const n = r.rows[0]?.n ?? 0;
    total += n;
    if (n === 0) break;
  }
  return total;
}
