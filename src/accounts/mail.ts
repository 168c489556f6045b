// The mail gateway's SQL (migration 028): sender entries, settings, the per-account message bucket,
// the faxes made from mails, and the outgoing queue. Run as the schema owner (the gateway looks a
// sender up across accounts); the API routes use the same tables as the API role (row-level security).
import { openText, sealText } from '../db/encryption.ts';
import type { Queryable } from '../db/pool.ts';
import { outboxContext } from '../db/sealed-columns.ts';
import { DEFAULT_MAIL_SETTINGS, entriesFor, type MailSettings } from '../domain/mail.ts';

export interface SenderMatch {
  /** The allowed-sender entry (mail_senders.id): the actor of the faxes it lets in. */
  id: string;
  account_id: string;
  address: string;
  caller_id: string | null;
}

/** The sender entry allowing `address`: an exact entry before a `*@domain` one; null when none. */
export async function findSender(c: Queryable, address: string): Promise<SenderMatch | null> {
  const entries = entriesFor(address);
  if (entries.length === 0) return null;
  const r = await c.query<SenderMatch>(
    `SELECT id, account_id, address, caller_id FROM mail_senders WHERE address = ANY($1::text[])
      ORDER BY address LIKE '*@%', address LIMIT 1`,
    [entries],
  );
  return r.rows[0] ?? null;
}

export async function loadSettings(c: Queryable, accountId: string): Promise<MailSettings> {
  const r = await c.query<MailSettings>(
    'SELECT body, receipts, sender_auth, subject_token FROM mail_settings WHERE account_id = $1',
    [accountId],
  );
  return r.rows[0] ?? DEFAULT_MAIL_SETTINGS;
}

/**
 * Takes one message from the account's bucket (`perMinute` a minute, as many at once); false when
 * it is empty (the message is answered 451: the sending server tries again later).
 */
export async function takeMessage(c: Queryable, accountId: string, perMinute: number): Promise<boolean> {
  if (perMinute <= 0) return true;
  const r = await c.query<{ taken: boolean }>(
    `INSERT INTO mail_buckets AS b (account_id, tokens, at) VALUES ($1, $2::float8 - 1, clock_timestamp())
     ON CONFLICT (account_id) DO UPDATE
       SET tokens = least($2::float8, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * $2::float8 / 60) - 1,
           at = clock_timestamp()
       WHERE least($2::float8, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * $2::float8 / 60) >= 1
     RETURNING true AS taken`,
    [accountId, perMinute],
  );
  return r.rows.length === 1;
}

export interface MailOrigin {
  accountId: string;
  replyTo: string;
  messageId: string;
}

/**
 * Records which faxes a mail made, in one transaction with their receipt (when `receipt`). The jobs'
 * rows are locked first, so a job that becomes final meanwhile waits for this commit and its trigger
 * (migration 028) then sees the mail_jobs row; a job final already gets its result queued here.
 * A repeated mail (the intake replayed it) finds its rows and queues nothing again.
 */
export async function recordMailJobs(
  c: Queryable,
  o: MailOrigin,
  jobIds: string[],
  receipt: boolean,
): Promise<boolean> {
  await c.query('SELECT id FROM fax_jobs WHERE id = ANY($1::uuid[]) FOR NO KEY UPDATE', [jobIds]);
  const ins = await c.query(
    `INSERT INTO mail_jobs (job_id, account_id, reply_to, message_id)
     SELECT j, $2, $3, $4 FROM unnest($1::uuid[]) j ON CONFLICT (job_id) DO NOTHING`,
    [jobIds, o.accountId, o.replyTo, o.messageId],
  );
  if ((ins.rowCount ?? 0) === 0) return false;
  await c.query(
    `INSERT INTO mail_outbox (account_id, kind, to_addr, job_id, message_id)
     SELECT account_id, 'result', ARRAY[$2], id, $3 FROM fax_jobs
      WHERE id = ANY($1::uuid[]) AND state IN ('delivered', 'failed', 'cancelled', 'rejected', 'unknown')`,
    [jobIds, o.replyTo, o.messageId],
  );
  if (receipt)
    await enqueue(c, {
      accountId: o.accountId,
      kind: 'receipt',
      to: [o.replyTo],
      jobId: jobIds[0]!,
      messageId: o.messageId,
    });
  return true;
}

export interface NewMail {
  accountId: string | null;
  kind: 'receipt' | 'result' | 'refused' | 'received' | 'text';
  to: string[];
  jobId?: string;
  receivedFaxId?: string;
  messageId?: string;
  /** Only for 'refused' and 'text': a short text of faxline's own (never a document). */
  subject?: string;
  body?: string;
}

export async function enqueue(c: Queryable, m: NewMail): Promise<string> {
  // The id first: the sealed subject and body are bound to their row (src/db/sealed-columns.ts).
  const id = (await c.query<{ id: string }>(`SELECT nextval('mail_outbox_id_seq')::text AS id`)).rows[0]!.id;
  const sealed = async (column: 'subject' | 'body', v: string | undefined) =>
    v === undefined ? null : m.accountId ? sealText(c, outboxContext(m.accountId, id, column), v) : v;
  await c.query(
    `INSERT INTO mail_outbox (id, account_id, kind, to_addr, job_id, received_fax_id, message_id, subject, body)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      id,
      m.accountId,
      m.kind,
      m.to,
      m.jobId ?? null,
      m.receivedFaxId ?? null,
      m.messageId ?? null,
      await sealed('subject', m.subject),
      await sealed('body', m.body),
    ],
  );
  return id;
}

export interface OutboxRow {
  id: string;
  account_id: string | null;
  kind: NewMail['kind'];
  to_addr: string[];
  job_id: string | null;
  received_fax_id: string | null;
  message_id: string | null;
  subject: string | null;
  body: string | null;
  attempts: number;
  /** Seconds since the mail was queued (MAIL_GIVE_UP_HOURS). */
  age_seconds: number;
}

/** The next due mail, locked for the caller's transaction (other senders skip it); its text opened. */
/** Whether a mail is due now (the poll loop's idle probe: one look into the due index). */
export async function anyDue(c: Queryable): Promise<boolean> {
  const r = await c.query<{ due: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM mail_outbox
                     WHERE sent_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()) AS due`,
  );
  return r.rows[0]?.due ?? false;
}

export async function claimDue(c: Queryable): Promise<OutboxRow | null> {
  const r = await c.query<OutboxRow>(
    `SELECT id::text, account_id, kind, to_addr, job_id, received_fax_id, message_id, subject, body, attempts,
            extract(epoch FROM now() - created_at)::float8 AS age_seconds
       FROM mail_outbox WHERE sent_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
      ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED`,
  );
  const row = r.rows[0];
  if (!row) return null;
  const opened = async (column: 'subject' | 'body', v: string | null) =>
    v === null || !row.account_id ? v : openText(c, outboxContext(row.account_id, row.id, column), v);
  return { ...row, subject: await opened('subject', row.subject), body: await opened('body', row.body) };
}

export async function markSent(c: Queryable, id: string): Promise<void> {
  await c.query(
    'UPDATE mail_outbox SET sent_at = now(), attempts = attempts + 1, last_error = NULL WHERE id = $1',
    [id],
  );
}

/** A failed attempt: tried again after `delaySeconds`, or (delaySeconds null) never again. */
export async function markFailed(
  c: Queryable,
  id: string,
  delaySeconds: number | null,
  error: string,
): Promise<void> {
  await c.query(
    `UPDATE mail_outbox SET attempts = attempts + 1, last_error = $3,
            next_attempt_at = now() + make_interval(secs => coalesce($2, 0)),
            failed_at = CASE WHEN $2::float8 IS NULL THEN now() END
      WHERE id = $1`,
    [id, delaySeconds, error.slice(0, 500)],
  );
}

/**
 * Deletes mails sent or given up more than `days` ago, at most `batch` per call (the retention
 * schedule calls it until it returns less). Returns the number deleted.
 */
export async function purgeOutbox(c: Queryable, now: Date, days: number, batch = 1000): Promise<number> {
  const r = await c.query(
    `DELETE FROM mail_outbox WHERE id IN (
       SELECT id FROM mail_outbox
        WHERE (sent_at IS NOT NULL OR failed_at IS NOT NULL)
          AND coalesce(sent_at, failed_at) < $1::timestamptz - make_interval(days => $2)
        LIMIT $3)`,
    [now, days, batch],
  );
  return r.rowCount ?? 0;
}

/** purgeOutbox in batches until none is left (at most `maxBatches`); the number deleted. */
export async function purgeOutboxAll(
  c: Queryable,
  now: Date,
  days: number,
  maxBatches = 100,
): Promise<number> {
  let n = 0;
  for (let i = 0; i < maxBatches; i++) {
    const k = await purgeOutbox(c, now, days);
    n += k;
    if (k === 0) break;
  }
  return n;
}

// ---- What the account manages over the API (/v1/mail-senders, /v1/mail-settings), as the API role.

export interface SenderRow {
  id: string;
  address: string;
  caller_id: string | null;
  created_at: string;
}

export const SENDER_COLUMNS = `id, address, caller_id,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`;

export const mailMessages = {
  senderAdded: 'Mail sender has been allowed.',
  senderDeleted: 'Mail sender has been removed.',
  sendersListed: 'Mail senders listed.',
  senderNotFound: 'Mail sender not found',
  senderTaken: (a: string) =>
    `address: ${a} is already allowed to send (in this or another account); an address sends for one account only`,
  settings: 'Mail settings.',
  settingsUpdated: 'Mail settings have been updated.',
} as const;

/** Inserts a sender entry (the account's scoped transaction); null when the address is taken. */
export async function insertSender(
  c: Queryable,
  accountId: string,
  address: string,
  callerId: string | null,
): Promise<SenderRow | null> {
  const r = await c.query<SenderRow>(
    `INSERT INTO mail_senders (account_id, address, caller_id) VALUES ($1, $2, $3)
     ON CONFLICT (address) DO NOTHING RETURNING ${SENDER_COLUMNS}`,
    [accountId, address, callerId],
  );
  return r.rows[0] ?? null;
}

export async function deleteSender(c: Queryable, id: string): Promise<boolean> {
  const r = await c.query('DELETE FROM mail_senders WHERE id = $1', [id]);
  return (r.rowCount ?? 0) > 0;
}

/** Sets the fields given, keeping the others; returns the settings as they are now. */
export async function updateSettings(
  c: Queryable,
  accountId: string,
  patch: Partial<MailSettings>,
): Promise<MailSettings> {
  const cur = await loadSettings(c, accountId);
  const next = { ...cur, ...patch };
  await c.query(
    `INSERT INTO mail_settings (account_id, body, receipts, sender_auth, subject_token, updated_at)
     VALUES ($1, $2, $3, $4, $5, now())
     ON CONFLICT (account_id) DO UPDATE SET body = $2, receipts = $3, sender_auth = $4,
       subject_token = $5, updated_at = now()`,
    [accountId, next.body, next.receipts, next.sender_auth, next.subject_token],
  );
  return next;
}

/**
 * Queues a plain-text mail (an invitation, a notice) to `to`: sent by the mail component through
 * SMTP_RELAY, retried with back-off, surviving restarts. For the console and other callers. With
 * `accountId` the subject and text are stored sealed with the account's data key; without one they
 * are stored as they are until the row is purged (MAIL_KEEP_DAYS after it was sent): keep documents,
 * patient data and secrets out of an account-less mail.
 */
export async function enqueueMail(
  c: Queryable,
  m: { to: string | string[]; subject: string; text: string; accountId?: string | null },
): Promise<string> {
  return enqueue(c, {
    accountId: m.accountId ?? null,
    kind: 'text',
    to: Array.isArray(m.to) ? m.to : [m.to],
    subject: m.subject,
    body: m.text,
  });
}
