// SQL of the line stage: ready jobs, claims, leases and call attempts. Every state change still goes
// through transition(); the extra columns (lease, page sizes, ready time) are set in the same
// transaction.
import type { Queryable } from '../db/pool.ts';
import type { JobState } from '../domain/states.ts';
import type { JobRow } from '../jobs/repo.ts';

export const activeStates: JobState[] = ['dialling', 'sending'];

export interface Candidate {
  id: string;
  account_id: string;
  fax_number: string;
  state: JobState;
  attempts: number;
}

/** Calls in progress across the installation (lines in use). */
export async function activeCalls(db: Queryable): Promise<number> {
  const r = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM fax_jobs WHERE state IN ('dialling', 'sending')`,
  );
  return r.rows[0]?.n ?? 0;
}

/**
 * Ready jobs in the order they get lines, at most `limit`, excluding destinations already at their
 * call limit (and at most the remaining room per destination). Order: urgent first (high priority,
 * or regular ready for longer than the ageing time), then fair share (calls the account has in
 * progress + the job's rank inside its account), then time ready.
 */
export async function pickCandidates(
  db: Queryable,
  o: { limit: number; agingSeconds: number; perDestination: number; onlyIds?: string[] },
): Promise<Candidate[]> {
  const r = await db.query<Candidate>(
    `WITH act AS (
       SELECT account_id, count(*)::int AS n FROM fax_jobs
        WHERE state IN ('dialling', 'sending') GROUP BY account_id
     ), dest AS (
       SELECT fax_number, count(*)::int AS n FROM fax_jobs
        WHERE state IN ('dialling', 'sending') GROUP BY fax_number
     ), c AS (
       SELECT j.id, j.account_id, j.fax_number, j.state, j.attempts, j.ready_at,
              (j.fax_priority = 'high' OR j.ready_at < now() - make_interval(secs => $2)) AS urgent
         FROM fax_jobs j
        WHERE j.state IN ('queued', 'blocked') AND ($4::uuid[] IS NULL OR j.id = ANY($4::uuid[]))
     ), r AS (
       SELECT c.*,
              row_number() OVER (PARTITION BY c.account_id, c.urgent ORDER BY c.ready_at, c.id) AS rn,
              row_number() OVER (PARTITION BY c.fax_number ORDER BY c.urgent DESC, c.ready_at, c.id) AS dn,
              coalesce(d.n, 0) AS dest_active,
              coalesce(a.n, 0) AS acct_active
         FROM c LEFT JOIN dest d USING (fax_number) LEFT JOIN act a USING (account_id)
     )
     SELECT id, account_id, fax_number, state, attempts FROM r
      WHERE $3::int = 0 OR dn <= $3::int - dest_active
      ORDER BY urgent DESC, acct_active + rn, ready_at, id
      LIMIT $1`,
    [o.limit, o.agingSeconds, o.perDestination, o.onlyIds ?? null],
  );
  return r.rows;
}

/** Queued jobs whose destination is at its call limit (they become `blocked`). */
export async function queuedBehindBusyDestination(
  db: Queryable,
  perDestination: number,
  limit: number,
): Promise<string[]> {
  if (perDestination === 0) return [];
  const r = await db.query<{ id: string }>(
    `SELECT j.id FROM fax_jobs j
      WHERE j.state = 'queued'
        AND (SELECT count(*) FROM fax_jobs a
              WHERE a.state IN ('dialling', 'sending') AND a.fax_number = j.fax_number) >= $1
      ORDER BY j.ready_at LIMIT $2`,
    [perDestination, limit],
  );
  return r.rows.map((x) => x.id);
}

/** What a call round must do, in one statement (an idle round is then this alone). */
export interface LineSurvey {
  /** A call in progress whose lease lapsed (its worker may have died). */
  lapsed: boolean;
  /** A job is queued or blocked: a claim may find work. */
  ready: boolean;
  /** Milliseconds until the next retry falls due (0 or less: due now); null: no job waits to retry. */
  retryInMs: number | null;
}

/**
 * Probes, through partial indexes, for lapsed leases, ready jobs and the next retry's due time, so
 * that a round with nothing to do costs one statement instead of a claim transaction and three reads.
 */
export async function surveyLines(db: Queryable): Promise<LineSurvey> {
  const r = await db.query<{ lapsed: boolean; ready: boolean; retry_in_ms: number | null }>(
    `SELECT EXISTS (SELECT 1 FROM fax_jobs WHERE state IN ('dialling', 'sending')
                       AND (lease_until IS NULL OR lease_until < now())) AS lapsed,
            EXISTS (SELECT 1 FROM fax_jobs WHERE state IN ('queued', 'blocked')) AS ready,
            (SELECT EXTRACT(EPOCH FROM (next_attempt_at - now())) * 1000 FROM fax_jobs
              WHERE state = 'retry_waiting' ORDER BY next_attempt_at LIMIT 1)::float8 AS retry_in_ms`,
  );
  const row = r.rows[0]!;
  return {
    lapsed: row.lapsed,
    ready: row.ready,
    retryInMs: row.retry_in_ms === null ? null : Number(row.retry_in_ms),
  };
}

export async function dueRetries(db: Queryable, limit: number): Promise<{ id: string; at: Date }[]> {
  const r = await db.query<{ id: string; at: Date }>(
    `SELECT id, next_attempt_at AS at FROM fax_jobs
      WHERE state = 'retry_waiting' AND next_attempt_at <= now()
      ORDER BY next_attempt_at LIMIT $1`,
    [limit],
  );
  return r.rows;
}

export async function setReady(db: Queryable, jobId: string, at: Date | null): Promise<void> {
  await db.query('UPDATE fax_jobs SET ready_at = coalesce($2, now()) WHERE id = $1', [jobId, at]);
}

/** Renews this worker's leases on its calls in progress (one statement for all of them). */
export async function renewLeases(
  db: Queryable,
  owner: string,
  jobIds: string[],
  seconds: number,
): Promise<number> {
  if (jobIds.length === 0) return 0;
  const r = await db.query(
    `UPDATE fax_jobs SET lease_until = now() + make_interval(secs => $3)
      WHERE id = ANY($1::uuid[]) AND lease_owner = $2 AND state IN ('dialling', 'sending')`,
    [jobIds, owner, seconds],
  );
  return r.rowCount ?? 0;
}

export async function lapsedLeases(
  db: Queryable,
  limit: number,
): Promise<{ id: string; attempts: number; lease_owner: string | null }[]> {
  const r = await db.query<{ id: string; attempts: number; lease_owner: string | null }>(
    `SELECT id, attempts, lease_owner FROM fax_jobs
      WHERE state IN ('dialling', 'sending') AND (lease_until IS NULL OR lease_until < now())
      LIMIT $1`,
    [limit],
  );
  return r.rows;
}

export interface LineJob {
  id: string;
  account_id: string;
  fax_number: string;
  caller_id: string;
  fax_quality: 'low' | 'standard' | 'hd';
  page_bytes: number[];
  attempts: number;
  created_at: Date;
  scheduled_at: Date | null;
  state: JobState;
  lease_owner: string | null;
  request_id: string | null;
  /** station_id of the account's number the fax presents (PATCH /v1/numbers/{id}), if it has one. */
  station_id: string | null;
  /** The fax's own retry limits (send options max_dials, give_up_after); null = the installation's. */
  max_dials: number | null;
  give_up_after: number | null;
  /** The fax's trace (migration 030): the call's span continues it. */
  trace_context: string | null;
}

const lineJobColumns = `id, account_id, fax_number, caller_id, fax_quality,
  coalesce(page_bytes, '{}') AS page_bytes, attempts, created_at, scheduled_at, state, lease_owner, request_id,
  max_dials, give_up_after, trace_context,
  (SELECT n.station_id FROM numbers n
    WHERE n.number = fax_jobs.caller_id AND n.account_id = fax_jobs.account_id) AS station_id`;

export async function lockLineJob(db: Queryable, jobId: string): Promise<LineJob | null> {
  const r = await db.query<LineJob>(`SELECT ${lineJobColumns} FROM fax_jobs WHERE id = $1 FOR UPDATE`, [
    jobId,
  ]);
  return r.rows[0] ?? null;
}

/**
 * What a call needs of a job just moved to dialling (transitionMany with a CallStart, which returns
 * the whole row and the station_id of the number it presents).
 */
export function lineJobOf(
  r: JobRow & { page_bytes?: number[] | null; lease_owner?: string | null; station_id?: string | null },
): LineJob {
  return {
    id: r.id,
    account_id: r.account_id,
    fax_number: r.fax_number,
    caller_id: r.caller_id,
    fax_quality: r.fax_quality,
    page_bytes: r.page_bytes ?? [],
    attempts: r.attempts,
    created_at: r.created_at,
    scheduled_at: r.scheduled_at,
    state: r.state,
    lease_owner: r.lease_owner ?? null,
    request_id: r.request_id,
    station_id: r.station_id ?? null,
    max_dials: r.max_dials,
    give_up_after: r.give_up_after,
    trace_context: r.trace_context,
  };
}

export interface AttemptEnd {
  outcome: 'delivered' | 'failed' | 'unknown';
  failureType?: string | null;
  failureCode?: string | null;
  failureMessage?: string | null;
  retryable?: boolean | null;
  reachedFax: boolean;
  pagesSent: number;
  bitRate?: number | null;
  remoteStationId?: string | null;
  durationMs?: number | null;
  /** What the fax engine reported (the outcome's `engine`), kept for the transmission report. */
  engine?: Record<string, unknown> | null;
}

/** The columns of fax_attempts an attempt's end sets (ended_at is set with them). */
export function attemptEndColumns(e: AttemptEnd): Record<string, unknown> {
  return {
    outcome: e.outcome,
    failure_type: e.failureType ?? null,
    failure_code: e.failureCode ?? null,
    failure_message: e.failureMessage ?? null,
    retryable: e.retryable ?? null,
    reached_fax: e.reachedFax,
    pages_sent: e.pagesSent,
    bit_rate: e.bitRate ?? null,
    remote_station_id: e.remoteStationId ?? null,
    duration_ms: e.durationMs === undefined || e.durationMs === null ? null : Math.round(e.durationMs),
    engine: e.engine ? JSON.stringify(e.engine) : null,
  };
}

export async function endAttempt(
  db: Queryable,
  jobId: string,
  attempt: number,
  e: AttemptEnd,
): Promise<void> {
  const cols = Object.entries(attemptEndColumns(e));
  await db.query(
    `UPDATE fax_attempts SET ended_at = now(), ${cols.map(([k], i) => `${k} = $${i + 3}`).join(', ')}
      WHERE job_id = $1 AND attempt = $2`,
    [jobId, attempt, ...cols.map(([, v]) => v)],
  );
}

/** Pages the receiver got in the most recent earlier attempt that reached it (for the retry). */
export async function lastPagesSent(db: Queryable, jobId: string): Promise<number> {
  const r = await db.query<{ pages_sent: number }>(
    'SELECT pages_sent FROM fax_attempts WHERE job_id = $1 ORDER BY attempt DESC LIMIT 1',
    [jobId],
  );
  return r.rows[0]?.pages_sent ?? 0;
}

export async function triesSoFar(db: Queryable, jobId: string): Promise<number> {
  const r = await db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM fax_attempts WHERE job_id = $1 AND reached_fax',
    [jobId],
  );
  return r.rows[0]?.n ?? 0;
}

export interface AttemptRow {
  attempt: number;
  backend: string;
  started_at: Date;
  ended_at: Date | null;
  outcome: 'delivered' | 'failed' | 'unknown' | null;
  failure_type: string | null;
  failure_code: string | null;
  failure_message: string | null;
  retryable: boolean | null;
  reached_fax: boolean;
  pages_sent: number;
  page_count: number;
  resumed_after_page: number;
  bit_rate: number | null;
  remote_station_id: string | null;
  duration_ms: number | null;
  /** What the fax engine reported (migration 020); null before it or without an engine. */
  engine: Record<string, unknown> | null;
}

export async function getAttempts(db: Queryable, jobId: string): Promise<AttemptRow[]> {
  const r = await db.query<AttemptRow>(
    `SELECT attempt, backend, started_at, ended_at, outcome, failure_type, failure_code, failure_message,
            retryable, reached_fax, pages_sent, page_count, resumed_after_page, bit_rate,
            remote_station_id, duration_ms, engine
       FROM fax_attempts WHERE job_id = $1 ORDER BY attempt`,
    [jobId],
  );
  return r.rows;
}

/** The customer's view of one attempt (GET /v1/faxes/{job_id}). */
export function attemptView(a: AttemptRow) {
  return {
    attempt: a.attempt,
    started_at: a.started_at.toISOString(),
    ended_at: a.ended_at?.toISOString() ?? null,
    outcome: a.outcome ?? 'in_progress',
    failure: a.failure_type
      ? { type: a.failure_type, code: a.failure_code, message: a.failure_message, retryable: a.retryable }
      : null,
    pages_sent: a.pages_sent,
    page_count: a.page_count,
    pages_already_sent_before: a.resumed_after_page,
    bit_rate: a.bit_rate,
    remote_station_id: a.remote_station_id,
    duration_ms: a.duration_ms,
    /** What the fax engine reported for this call (T.30 result, ECM, resolution…), or null. */
    engine: a.engine,
  };
}

export async function waitingCounts(db: Queryable): Promise<Record<string, number>> {
  const r = await db.query<{ state: string; n: number }>(
    `SELECT state, count(*)::int AS n FROM fax_jobs
      WHERE state IN ('queued', 'blocked', 'retry_waiting') GROUP BY state`,
  );
  const out: Record<string, number> = { queued: 0, blocked: 0, retry_waiting: 0 };
  for (const row of r.rows) out[row.state] = row.n;
  return out;
}

/** Jobs leased to `owner` in `dialling` that it is not calling (a claim whose commit was uncertain). */
export async function ownUnstarted(db: Queryable, owner: string, calling: string[]): Promise<LineJob[]> {
  const r = await db.query<LineJob>(
    `SELECT ${lineJobColumns} FROM fax_jobs
      WHERE lease_owner = $1 AND state = 'dialling' AND NOT (id = ANY($2::uuid[]))`,
    [owner, calling],
  );
  return r.rows;
}
