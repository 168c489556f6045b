// Scheduled faxes, in two tiers (docs/scheduling.md).
//
// Near tier: a fax due within the near window is held as a job in the pg-boss due queue. Its
// pg-boss job and its fax_jobs row (state `scheduled`, schedule_ref = the pg-boss id) are written in
// one PostgreSQL transaction (pg-boss's `db` option), so one never exists without the other.
//
// Far tier: a fax due later waits as its fax_jobs row alone (state `scheduled`, schedule_ref NULL),
// found through a partial index on scheduled_at. The promoter moves faxes entering the near window
// into pg-boss, again in one transaction with the row (locked FOR UPDATE SKIP LOCKED, so several
// scheduler processes never promote one fax twice and a racing cancel waits for the commit).
// This keeps pg-boss's fetch path small whatever the number of pending faxes: a million faxes due
// next month cost the due-time fetch nothing, and pg-boss's retention never sees them.
//
// Firing: a loop looks every SCHEDULE_POLL_MS whether a fax is due (one index probe; sooner when the
// next fax falls due sooner) and only then fetches due jobs from pg-boss (and looks again at once after
// each batch it fired), moves the batch's faxes scheduled → accepted by conditional transitions in one statement,
// completes the pg-boss jobs and publishes the send commands (the command publisher's outbox sweep
// republishes one whose publish is lost). A fax a cancel moved first is simply not moved.
import { randomUUID } from 'node:crypto';
import { PgBoss, type Job } from 'pg-boss';
import { pgConnection } from '../db/hosts.ts';
import { ApiError } from '../domain/envelope.ts';
import type { Clock } from '../clock.ts';
import { type Pool, type Queryable, withTx } from '../db/pool.ts';
import type { CommandPublisher } from '../jobs/command-publisher.ts';
import { transitionMany } from '../jobs/repo.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';
import { currentTraceContext, inSpan, linksTo } from '../trace.ts';

export const DUE_QUEUE = 'faxline-due';

export interface SchedulerOptions {
  databaseUrl: string;
  schema: string;
  clock: Clock;
  log: Logger;
  metrics?: Metrics;
  /** Longest scheduling horizon, days. */
  horizonDays?: number;
  /** A date at most this far in the past is sent at once, seconds. */
  pastToleranceSeconds?: number;
  /** Faxes due within this many seconds live in pg-boss; later ones wait for the promoter. */
  nearWindowSeconds?: number;
  /** Promoter period, seconds. */
  promoteSeconds?: number;
  /** Due-queue fetch period when idle, ms. */
  pollMs?: number;
}

interface DueData {
  job_id: string;
  account_id: string;
  /** The fax's trace context (src/trace.ts), when tracing was on: the fire continues its trace. */
  trace?: string;
}

/** A fax whose due time goes into the due queue. */
export interface DueFax {
  jobId: string;
  accountId: string;
  at: Date;
  /** The fax's trace context; the active one when absent. */
  trace?: string | null;
}

/**
 * Puts faxes into the due queue inside the caller's transaction `tx`: their pg-boss jobs in one
 * insert (pg-boss's `db` option, so they commit or vanish with the rows) and each row's
 * schedule_ref in one update.
 */
async function insertDue(tx: Queryable, boss: PgBoss, faxes: readonly DueFax[]): Promise<void> {
  if (faxes.length === 0) return;
  const refs = faxes.map(() => randomUUID());
  await boss.insert(
    DUE_QUEUE,
    faxes.map((f, i) => ({
      id: refs[i]!,
      data: { job_id: f.jobId, account_id: f.accountId, ...traceData(f.trace ?? currentTraceContext()) },
      startAfter: f.at,
    })),
    { db: { executeSql: (text, values) => tx.query(text, values) } },
  );
  await tx.query(
    `UPDATE fax_jobs f SET schedule_ref = v.ref
       FROM unnest($1::uuid[], $2::text[]) AS v(id, ref) WHERE f.id = v.id`,
    [faxes.map((f) => f.jobId), refs],
  );
}

/** pg-boss job data for a trace context (nothing when there is none). */
const traceData = (trace: string | null | undefined): { trace?: string } => (trace ? { trace } : {});

const FIRE_BATCH = 100;
const PROMOTE_BATCH = 1000;

export class Scheduler {
  readonly boss: PgBoss;
  readonly horizonDays: number;
  readonly pastToleranceSeconds: number;
  readonly nearWindowSeconds: number;
  private readonly promoteMs: number;
  private readonly pollMs: number;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly metrics: Metrics | undefined;
  private started = false;
  private running = false;
  private loops: Promise<void>[] = [];
  private readonly sleepers = new Set<() => void>();

  constructor(o: SchedulerOptions) {
    // pg-boss hands its options to pg.Pool: a multi-host URL gets the same host choice as our pools.
    this.boss = new PgBoss({ ...pgConnection(o.databaseUrl), schema: o.schema, max: 4 });
    this.clock = o.clock;
    this.log = o.log.child({ component: 'scheduler' });
    this.metrics = o.metrics;
    this.horizonDays = o.horizonDays ?? 90;
    this.pastToleranceSeconds = o.pastToleranceSeconds ?? 300;
    this.nearWindowSeconds = o.nearWindowSeconds ?? 120;
    this.promoteMs = Math.round((o.promoteSeconds ?? 10) * 1000);
    this.pollMs = o.pollMs ?? 100;
    if (this.promoteMs * 2 > this.nearWindowSeconds * 1000)
      throw new Error(
        `SCHEDULE_PROMOTE_SECONDS (${this.promoteMs / 1000}) must be at most half of SCHEDULE_NEAR_WINDOW_SECONDS (${this.nearWindowSeconds})`,
      );
    this.boss.on('error', (err: Error) => this.log.warn({ err: err.message }, 'pg-boss error'));
  }

  async start(): Promise<void> {
    await this.boss.start();
    await this.boss.createQueue(DUE_QUEUE, {
      // Only near-window faxes are ever queued here, so the default 14-day retention of queued jobs
      // is far beyond any wait (the far tier is not pg-boss's, so maintenance cannot purge it).
      retentionSeconds: 14 * 86_400,
      // A fire is one short transaction; a fetched job whose process died is retried soon.
      expireInSeconds: 30,
      retryLimit: 10,
      retryDelay: 1,
      retryBackoff: true,
      retryDelayMax: 60,
    });
    this.started = true;
  }

  /**
   * Resolves a customer's scheduled_date: a time at or before now (up to the past tolerance, for
   * clock skew) means "send now" and returns null; further in the past or beyond the horizon → 422.
   * Dates must carry an offset (the request schema refuses one without).
   */
  resolveDate(iso: string): Date | null {
    const at = new Date(iso);
    const now = this.clock.now().getTime();
    if (at.getTime() < now - this.pastToleranceSeconds * 1000)
      throw new ApiError(
        422,
        `scheduled_date: is more than ${this.pastToleranceSeconds} seconds in the past`,
      );
    if (at.getTime() > now + this.horizonDays * 86_400_000)
      throw new ApiError(422, `scheduled_date: is more than ${this.horizonDays} days ahead`);
    return at.getTime() <= now ? null : at;
  }

  /**
   * Records the due time of a fax whose row (state `scheduled`, scheduled_at = at) the caller just
   * inserted in transaction `tx`: a near fax gets its pg-boss job in the same transaction; a far fax
   * needs nothing more (the promoter finds its row).
   */
  async schedule(tx: Queryable, jobId: string, accountId: string, at: Date): Promise<void> {
    await this.scheduleMany(tx, [{ jobId, accountId, at }]);
  }

  /**
   * schedule() for many faxes at once (a batch, a broadcast): the near ones get their pg-boss jobs in
   * one insert and their refs in one update, however many there are.
   */
  async scheduleMany(tx: Queryable, faxes: readonly DueFax[]): Promise<void> {
    const limit = this.clock.now().getTime() + this.nearWindowSeconds * 1000;
    await insertDue(
      tx,
      this.boss,
      faxes.filter((f) => f.at.getTime() <= limit),
    );
  }

  /** Removes the due-time job of a cancelled fax (cleanup: the job state already forbids sending). */
  async unschedule(ref: string): Promise<void> {
    await this.boss.cancel(DUE_QUEUE, ref);
  }

  /**
   * Moves far-tier faxes that entered the near window into pg-boss, one transaction per batch.
   * Returns how many were promoted.
   */
  async promote(db: Pool): Promise<number> {
    let total = 0;
    for (;;) {
      const n = await withTx(db, async (tx) => {
        const due = await tx.query<{
          id: string;
          account_id: string;
          scheduled_at: Date;
          trace_context: string | null;
        }>(
          `SELECT id, account_id, scheduled_at, trace_context FROM fax_jobs
            WHERE state = 'scheduled' AND schedule_ref IS NULL
              AND scheduled_at < now() + make_interval(secs => $1)
            ORDER BY scheduled_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED`,
          [this.nearWindowSeconds, PROMOTE_BATCH],
        );
        if (due.rows.length === 0) return 0;
        await insertDue(
          tx,
          this.boss,
          due.rows.map((r) => ({
            jobId: r.id,
            accountId: r.account_id,
            at: r.scheduled_at,
            trace: r.trace_context,
          })),
        );
        return due.rows.length;
      });
      total += n;
      if (n < PROMOTE_BATCH) break;
    }
    if (total > 0) this.log.debug({ promoted: total }, 'scheduled faxes promoted into the due queue');
    return total;
  }

  /**
   * Fires one batch of due jobs. The faxes leave `scheduled` in one statement of conditional
   * transitions scheduled → accepted (the fence a racing cancel meets: a fax cancelled first is
   * simply not moved); their send commands are then published (confirms pipeline), and the pg-boss
   * jobs are completed. A process dying in between loses nothing: an uncompleted pg-boss job is
   * retried after expireInSeconds and finds its fax already accepted, and an accepted fax whose
   * publish was not confirmed is republished by the command publisher's outbox sweep.
   */
  private async fireBatch(db: Pool, publisher: CommandPublisher, jobs: Job<DueData>[]): Promise<void> {
    // One span for the batch, linked to the trace of every fax in it (a fax's own trace continues
    // through its command's traceparent).
    await inSpan(
      'schedule.fire',
      { links: linksTo(jobs.map((j) => j.data.trace)), attributes: { 'faxline.jobs': jobs.length } },
      () => this.fireBatchTraced(db, publisher, jobs),
    );
  }

  private async fireBatchTraced(db: Pool, publisher: CommandPublisher, jobs: Job<DueData>[]): Promise<void> {
    const traces = new Map(jobs.map((j) => [j.data.job_id, j.data.trace]));
    let rows;
    try {
      rows = await transitionMany(
        db,
        jobs.map((j) => j.data.job_id),
        'accepted',
        { from: ['scheduled'], set: { dispatched_at: null }, detail: { due: true } },
      );
    } catch (err) {
      this.log.warn({ err: (err as Error).message, jobs: jobs.length }, 'fire failed; retried');
      await this.boss
        .fail(
          DUE_QUEUE,
          jobs.map((j) => j.id),
        )
        .catch(() => undefined);
      return;
    }
    for (const row of rows) {
      this.metrics?.transitions.inc({ to: 'accepted' });
      if (row.scheduled_at)
        this.metrics?.scheduleLateness.observe(
          Math.max(0, (row.updated_at.getTime() - row.scheduled_at.getTime()) / 1000),
        );
    }
    // Jobs whose fax was not moved (cancelled first, or already fired) are done too.
    await this.boss.complete(
      DUE_QUEUE,
      jobs.map((j) => j.id),
    );
    await Promise.all(
      rows.map((row) => {
        const cmd = {
          type: row.kind,
          job_id: row.id,
          account_id: row.account_id,
          ...(row.request_id ? { request_id: row.request_id } : {}),
          trace: traces.get(row.id) ?? row.trace_context,
        };
        return publisher.publish(cmd).catch((err: unknown) => {
          this.log.warn(
            { jobId: row.id, err: (err as Error).message },
            'send command not confirmed; published again once RabbitMQ answers (the outbox sweep is the backstop)',
          );
          publisher.retrySoon([cmd]);
        });
      }),
    );
  }

  /** Runs the due-time loop, the promoter and the pending gauge until stop(). */
  async work(db: Pool, publisher: CommandPublisher): Promise<void> {
    this.running = true;
    this.loops.push(this.fireLoop(db, publisher), this.promoteLoop(db));
  }

  private async fireLoop(db: Pool, publisher: CommandPublisher): Promise<void> {
    while (this.running) {
      let wait: number;
      try {
        // pg-boss is asked only when a fax is due: an idle round is one index probe.
        const dueIn = await this.nextDueIn(db);
        if (dueIn !== null && dueIn <= 0) {
          const jobs = await this.boss.fetch<DueData>(DUE_QUEUE, { batchSize: FIRE_BATCH });
          if (jobs.length > 0) {
            // Probe again at once: the next fax may fall due within milliseconds.
            await this.fireBatch(db, publisher, jobs);
            continue;
          }
        }
        wait = dueIn === null || dueIn <= 0 ? this.pollMs : Math.min(this.pollMs, dueIn + 2);
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'due-queue fetch or fire failed');
        wait = 1000;
      }
      await this.sleep(wait);
    }
  }

  /**
   * Milliseconds until the earliest scheduled fax falls due (0 or less: one is due now), by the
   * database clock, through the partial index (one probe); null when no fax is scheduled. The loop
   * sleeps until then but never longer than pollMs (a fax scheduled meanwhile may be due sooner):
   * waking at the due time takes the polling interval out of the lateness. A due fax whose pg-boss
   * job is not yet fetchable (a retry after a fire that died) keeps the loop fetching every pollMs.
   */
  private async nextDueIn(db: Pool): Promise<number | null> {
    const r = await db.query<{ ms: number | null }>(
      `SELECT (EXTRACT(EPOCH FROM (min(scheduled_at) - now())) * 1000)::float8 AS ms
         FROM fax_jobs WHERE state = 'scheduled'`,
    );
    const ms = r.rows[0]?.ms;
    return ms === null || ms === undefined ? null : Number(ms);
  }

  private async promoteLoop(db: Pool): Promise<void> {
    // faxline_scheduled_pending is exported by the database collector (src/metrics/collectors.ts).
    while (this.running) {
      try {
        await this.promote(db);
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'promotion failed; retrying');
      }
      await this.sleep(this.promoteMs);
    }
  }

  /** Sleeps up to `ms`; stop() ends it early. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.sleepers.delete(done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.sleepers.add(done);
    });
  }

  /** Stops firing and promoting (in-flight fires finish); pg-boss stays usable for intake and cancel. */
  async stopWork(): Promise<void> {
    this.running = false;
    for (const s of [...this.sleepers]) s();
    await Promise.all(this.loops);
    this.loops = [];
  }

  async stop(): Promise<void> {
    await this.stopWork();
    if (this.started) await this.boss.stop({ graceful: true, timeout: 10_000 });
    this.started = false;
  }
}
