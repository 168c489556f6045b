// What a broadcast costs its account (issue 27, finding 2): the request rate limit counts requests,
// and a broadcast is one request for up to BROADCAST_MAX_RECIPIENTS jobs, so ten at once put 10,000
// jobs on the intake, RabbitMQ and PostgreSQL in seconds and delayed every other account's sends.
// Two bounds, both in PostgreSQL so that every API and AMQP intake process shares them, both decided
// before the broadcast's jobs are written (a refusal writes no job):
// - a recipient rate: a token bucket per account (table recipient_buckets), one token per recipient,
//   `perSecond` refilled, `burst` at most. The tokens are taken in a short transaction of their own
//   (the row is locked for two statements, not for the broadcast's whole write, so that an account's
//   concurrent broadcasts do not hold pooled connections waiting for each other) and given back when
//   the broadcast is then not written.
// - the account's jobs that are not yet final: at most `maxOpenJobs`, counted in the broadcast's
//   transaction through the partial index fax_jobs_account_open (at most maxOpenJobs index entries;
//   final jobs are not read). Concurrent broadcasts of one account count before each other's commit,
//   so the bound can be passed by what the bucket lets through at once (BROADCAST_RECIPIENTS_BURST).
// Both answer 429 in the envelope with data.retry_after and a Retry-After header.
import type { Queryable } from '../db/pool.ts';
import { ApiError } from '../domain/envelope.ts';

export interface BroadcastLimits {
  /** BROADCAST_RECIPIENTS_PER_SECOND: recipients an account's bucket regains per second (0 = no rate). */
  perSecond: number;
  /** BROADCAST_RECIPIENTS_BURST: recipients the bucket holds (what an account may send at once). */
  burst: number;
  /** ACCOUNT_MAX_OPEN_JOBS: jobs of an account not yet final that a broadcast may add to (0 = no bound). */
  maxOpenJobs: number;
}

/** The defaults of src/config.ts, for callers that are given none (tests of other things, tools). */
export const DEFAULT_BROADCAST_LIMITS: BroadcastLimits = { perSecond: 20, burst: 1000, maxOpenJobs: 20_000 };

/** How long a refusal for too many open jobs suggests to wait: jobs end at the lines' pace. */
const OPEN_JOBS_RETRY_SECONDS = 60;

const tooMany = (message: string, retryAfter: number): ApiError =>
  new ApiError(429, message, {
    data: { retry_after: retryAfter },
    headers: { 'retry-after': String(retryAfter) },
  });

/**
 * Takes `n` recipients from the account's bucket inside the caller's transaction, or throws 429 with
 * the seconds until the bucket holds `n` again. A refusal takes nothing (the bucket is only read).
 */
export async function takeRecipients(
  c: Queryable,
  accountId: string,
  n: number,
  l: Pick<BroadcastLimits, 'perSecond' | 'burst'>,
): Promise<void> {
  if (l.perSecond <= 0) return;
  if (n > l.burst)
    throw new ApiError(
      422,
      `recipients: has ${n} recipients; this installation sends at most ${l.burst} at once (BROADCAST_RECIPIENTS_BURST)`,
    );
  // Refill and take in one statement, under the row's lock; `fill` is the content now.
  const r = await c.query<{ taken: boolean; fill: number }>(
    `INSERT INTO recipient_buckets AS b (account_id, tokens, at) VALUES ($1, $3::float8, clock_timestamp())
     ON CONFLICT (account_id) DO UPDATE SET account_id = b.account_id
     RETURNING
       least($3::float8, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * $4::float8) >= $2 AS taken,
       least($3::float8, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * $4::float8) AS fill`,
    [accountId, n, l.burst, l.perSecond],
  );
  const row = r.rows[0]!;
  if (row.taken) {
    await c.query(
      `UPDATE recipient_buckets SET tokens = $2::float8 - $3::float8, at = clock_timestamp() WHERE account_id = $1`,
      [accountId, row.fill, n],
    );
    return;
  }
  const retryAfter = Math.max(1, Math.ceil((n - row.fill) / l.perSecond));
  throw tooMany(
    `Too many broadcast recipients: this account may send to ${l.perSecond} recipients per second ` +
      `(${l.burst} at once); ${n} asked, ${Math.floor(row.fill)} available; retry after ${retryAfter} s`,
    retryAfter,
  );
}

/** Refuses with 429 when `n` more jobs would take the account past `maxOpenJobs` jobs not yet final. */
export async function checkOpenJobs(
  c: Queryable,
  accountId: string,
  n: number,
  maxOpenJobs: number,
): Promise<void> {
  if (maxOpenJobs <= 0) return;
  // The predicate is the partial index's (migration 023), so only that index is read, and at most
  // maxOpenJobs entries of it.
  const r = await c.query<{ open: number }>(
    `SELECT count(*)::int AS open FROM (
       SELECT 1 FROM fax_jobs
        WHERE account_id = $1 AND state NOT IN ('delivered', 'failed', 'cancelled', 'rejected', 'unknown')
        LIMIT $2) j`,
    [accountId, maxOpenJobs],
  );
  const open = r.rows[0]!.open;
  if (open + n <= maxOpenJobs) return;
  throw tooMany(
    `Too many faxes in progress: this account has ${open >= maxOpenJobs ? `${maxOpenJobs} or more` : open} ` +
      `faxes not yet delivered, failed or cancelled, and may have at most ${maxOpenJobs}; this broadcast adds ${n}; ` +
      `retry when some have finished (after ${OPEN_JOBS_RETRY_SECONDS} s, for example)`,
    OPEN_JOBS_RETRY_SECONDS,
  );
}

/** Gives back what `takeRecipients` took for a broadcast that was not written (a replay, a refusal, 503). */
export async function refundRecipients(
  c: Queryable,
  accountId: string,
  n: number,
  l: Pick<BroadcastLimits, 'perSecond' | 'burst'>,
): Promise<void> {
  if (l.perSecond <= 0) return;
  await c.query(
    'UPDATE recipient_buckets SET tokens = least($3::float8, tokens + $2::float8) WHERE account_id = $1',
    [accountId, n, l.burst],
  );
}
