// The line caller: runs in every send-worker process and drives calls without RabbitMQ.
// The send worker leaves prepared jobs `queued` (committed) and acks its delivery; this loop then
// claims ready jobs from PostgreSQL under one advisory lock (so line, destination and fairness
// limits hold across processes), moves each to `dialling` through the fenced transition (attempt
// number + 1, lease, attempt row: the only way a call starts), places the calls, renews the leases
// while they last, and records each outcome (delivered, retry_waiting, failed). A lease that lapses
// means the driving process died: the call's outcome is unknown and follows UNKNOWN_OUTCOME_POLICY.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { deadline } from '../deadline.ts';
import { untilDbAvailable } from '../db/errors.ts';
import type { Pool } from '../db/pool.ts';
import { withTx } from '../db/pool.ts';
import { moveJob, transition, transitionMany } from '../jobs/repo.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';
import { getRender } from '../documents/render/store.ts';
import type { Outcome, TransmissionBackend } from '../transmission/backend.ts';
import { countsAsTry, decideRetry, policyForFax, type RetryPolicy } from '../transmission/retry.ts';
import { contextFromStored, inSpan, SpanKind, type Span } from '../trace.ts';
import {
  activeCalls,
  attemptEndColumns,
  dueRetries,
  endAttempt,
  lapsedLeases,
  lastPagesSent,
  lineJobOf,
  lockLineJob,
  ownUnstarted,
  type LineJob,
  pickCandidates,
  queuedBehindBusyDestination,
  renewLeases,
  setReady,
  surveyLines,
  triesSoFar,
  waitingCounts,
} from './repo.ts';

/** The call ended: its lease is cleared in the statement that records its end state (one statement, not two). */
const NO_LEASE = { lease_owner: null, lease_until: null } as const;

export interface LineOptions {
  lines: number;
  maxCallsPerProcess: number;
  perDestination: number;
  agingSeconds: number;
  leaseSeconds: number;
  pollMs: number;
  callTimeoutMs: number;
  unknownPolicy: 'reconcile' | 'mark' | 'retry';
  retry: RetryPolicy;
}

export interface LineDeps {
  db: Pool;
  backend: TransmissionBackend;
  log: Logger;
  metrics: Metrics;
  opts: LineOptions;
  workerId?: string;
}

/** Any constant: serialises claims across every line caller sharing the database. */
const CLAIM_LOCK = 0x6661786c; // "faxl"
const CLAIM_BATCH = 200;

interface Call {
  attempt: number;
  abort: AbortController;
  done: Promise<void>;
}

export class LineCaller {
  readonly workerId: string;
  private readonly d: LineDeps;
  private readonly log: Logger;
  private readonly calls = new Map<string, Call>();
  private timer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryTimerAt = 0;
  private ticking: Promise<void> | undefined;
  private again = false;
  private gaugedAt = 0;
  private claimUncertain = false;
  private stopped = false;
  /** Draining (shutdown): no work from the backlog, only jobs this process queued meanwhile. */
  private draining = false;
  private readonly drainIds = new Set<string>();
  private stopping: Promise<void> | undefined;

  constructor(d: LineDeps) {
    this.d = d;
    this.workerId = d.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.log = d.log.child({ component: 'lines', worker: this.workerId });
  }

  get callsInProgress(): number {
    return this.calls.size;
  }

  start(): void {
    const loop = () => {
      this.timer = setTimeout(() => {
        this.wake();
        if (!this.stopped && !this.draining) loop();
      }, this.d.opts.pollMs);
    };
    loop();
    this.heartbeat = setInterval(
      () => {
        renewLeases(this.d.db, this.workerId, [...this.calls.keys()], this.d.opts.leaseSeconds).catch(
          (err: unknown) => this.log.warn({ err: (err as Error).message }, 'lease renewal failed'),
        );
      },
      Math.max(50, (this.d.opts.leaseSeconds * 1000) / 3),
    );
    this.wake();
  }

  /**
   * Runs a call round now (or right after the current one). `queuedJobId`: a job this process
   * just queued; while draining, only such jobs are still called here.
   */
  wake(queuedJobId?: string): void {
    if (this.stopped) return;
    if (queuedJobId && this.draining) this.drainIds.add(queuedJobId);
    if (this.ticking) {
      this.again = true;
      return;
    }
    this.ticking = this.tick()
      .catch((err: unknown) => this.log.warn({ err: (err as Error).message }, 'call round failed'))
      .finally(() => {
        this.ticking = undefined;
        if (this.again) {
          this.again = false;
          this.wake();
        }
      });
  }

  private async tick(): Promise<void> {
    if (this.draining) {
      // In-flight work of this process finishes here: a job its send worker prepared during the
      // drain is called by it (if a line is free); the backlog is left to other workers.
      const ids = [...this.drainIds];
      this.drainIds.clear();
      const room = this.d.opts.maxCallsPerProcess - this.calls.size;
      if (ids.length === 0 || room <= 0) return;
      for (const job of await this.claim(Math.min(room, CLAIM_BATCH), ids)) this.startCall(job);
      return;
    }
    // One statement says what this round has to do: a round with nothing to do is that alone.
    const survey = await surveyLines(this.d.db);
    this.retryAt(survey.retryInMs);
    if (Date.now() - this.gaugedAt >= 1000) {
      this.gaugedAt = Date.now();
      // Nothing ready and nothing waiting to retry: every count is 0 without counting.
      const counts =
        survey.ready || survey.retryInMs !== null
          ? await waitingCounts(this.d.db)
          : { queued: 0, blocked: 0, retry_waiting: 0 };
      for (const [state, n] of Object.entries(counts)) this.d.metrics.waitingForLine.set({ state }, n);
    }
    if (survey.lapsed) await this.reapLapsed();
    const promoted = survey.retryInMs !== null && survey.retryInMs <= 0 ? await this.promoteDueRetries() : 0;
    const room = this.d.opts.maxCallsPerProcess - this.calls.size;
    if (room <= 0) return;
    if (this.claimUncertain) {
      // The last claim's COMMIT may have happened before its connection broke: jobs leased to us
      // and still `dialling` without a call here were claimed by us, and nobody has called them.
      for (const job of await ownUnstarted(this.d.db, this.workerId, [...this.calls.keys()]))
        this.startCall(job);
      this.claimUncertain = false;
    }
    if (!survey.ready && promoted === 0) return;
    let claimed: LineJob[];
    try {
      claimed = await this.claim(Math.min(room, CLAIM_BATCH));
    } catch (err) {
      this.claimUncertain = true;
      throw err;
    }
    for (const job of claimed) this.startCall(job);
    if (claimed.length === CLAIM_BATCH) this.again = true;
  }

  /** Moves retries that fell due back to `queued`; returns how many it moved. */
  private async promoteDueRetries(): Promise<number> {
    const due = await dueRetries(this.d.db, 500);
    let moved = 0;
    for (const r of due) {
      await withTx(this.d.db, async (c) => {
        const row = await transition(c, r.id, 'queued', { from: ['retry_waiting'] });
        if (row) {
          await setReady(c, r.id, r.at);
          moved++;
        }
      });
    }
    return moved;
  }

  /**
   * A retry falling due before the next poll gets a round of its own at its due time (a retry
   * waits for its time, not for the poll after it). `inMs`: the survey's time to the next retry.
   */
  private retryAt(inMs: number | null): void {
    if (inMs === null || inMs <= 0 || inMs >= this.d.opts.pollMs) return;
    const at = Date.now() + inMs;
    if (this.retryTimer && this.retryTimerAt <= at) return;
    clearTimeout(this.retryTimer);
    this.retryTimerAt = at;
    this.retryTimer = setTimeout(
      () => {
        this.retryTimer = undefined;
        this.wake();
      },
      Math.ceil(inMs) + 2,
    );
  }

  /** Claims up to `max` ready jobs: each moves to `dialling` with a new attempt number and our lease. */
  private async claim(max: number, onlyIds?: string[]): Promise<LineJob[]> {
    const o = this.d.opts;
    return withTx(this.d.db, async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1)', [CLAIM_LOCK]);
      const free = Math.min(max, o.lines - (await activeCalls(c)));
      const out: LineJob[] = [];
      if (free > 0) {
        const picks = await pickCandidates(c, {
          limit: free,
          agingSeconds: o.agingSeconds,
          perDestination: o.perDestination,
          ...(onlyIds ? { onlyIds } : {}),
        });
        // All of them in one statement: each moves to dialling with its next attempt number, our
        // lease and its attempt opened (CallStart). Under the claim lock nothing else moves a
        // picked job between its pick and here but a cancel, which the fence then keeps.
        const moved = await transitionMany(
          c,
          picks.map((p) => p.id),
          'dialling',
          {
            from: [...new Set(picks.map((p) => p.state))],
            set: { pages_sent: 0, next_attempt_at: null },
            detail: { worker: this.workerId, backend: this.d.backend.name },
            call: { owner: this.workerId, leaseSeconds: o.leaseSeconds, backend: this.d.backend.name },
          },
        );
        const byId = new Map(moved.map((r) => [r.id, r]));
        // In the order they were picked (fair between accounts, oldest first).
        for (const p of picks) {
          const r = byId.get(p.id);
          if (r) out.push(lineJobOf(r));
        }
      }
      for (const id of await queuedBehindBusyDestination(c, o.perDestination, 500)) {
        await transition(c, id, 'blocked', { from: ['queued'], detail: { reason: 'destination_busy' } });
        this.d.metrics.transitions.inc({ to: 'blocked' });
      }
      return out;
    });
  }

  private startCall(job: LineJob): void {
    const abort = new AbortController();
    const call: Call = { attempt: job.attempts, abort, done: Promise.resolve() };
    this.calls.set(job.id, call);
    this.d.metrics.transitions.inc({ to: 'dialling' });
    // The call continues the fax's trace (stored with the job at acceptance): a child of its request.
    call.done = inSpan(
      'fax.call',
      {
        parent: contextFromStored(job.trace_context),
        kind: SpanKind.CLIENT,
        attributes: {
          'faxline.job_id': job.id,
          'faxline.account_id': job.account_id,
          'faxline.attempt': job.attempts,
          'faxline.backend': this.d.backend.name,
          'faxline.pages': job.page_bytes.length,
        },
      },
      (span) => this.runCall(job, abort, span),
    )
      .catch((err: unknown) =>
        this.log.error({ err: (err as Error).message, jobId: job.id }, 'recording a call failed'),
      )
      .finally(() => {
        this.calls.delete(job.id);
        this.wake();
      });
  }

  private async runCall(job: LineJob, abort: AbortController, span: Span | null): Promise<void> {
    const backend = this.d.backend;
    const attempt = job.attempts;
    const log = this.log.child({
      jobId: job.id,
      accountId: job.account_id,
      attempt,
      ...(job.request_id ? { requestId: job.request_id } : {}),
    });
    const o = this.d.opts;
    const m = this.d.metrics;
    m.attempts.inc({ backend: backend.name });
    if (attempt > 1) m.retries.inc({ backend: backend.name });
    m.linesInUse.inc({ backend: backend.name });
    let pageStarted = 0; // end of training, then end of the previous page
    const trainings: number[] = [];
    let outcome: Outcome;
    try {
      const resume = attempt > 1 ? await lastPagesSent(this.d.db, job.id) : 0;
      // The rendered fax image, for backends that put real fax signals on a line.
      const tiff = backend.name === 'simulated' ? undefined : (await getRender(this.d.db, job.id))?.tiff;
      // Hang-up (stop) or the call's deadline; released when the call ends (see src/deadline.ts).
      const limit = deadline(o.callTimeoutMs, abort.signal, 'the call');
      const signal = limit.signal;
      try {
        outcome = await backend.transmit(
          {
            jobId: job.id,
            attempt,
            faxNumber: job.fax_number,
            callerId: job.caller_id,
            ...(job.station_id !== null ? { stationId: job.station_id } : {}),
            quality: job.fax_quality,
            pageBytes: job.page_bytes,
            ...(resume > 0 ? { resumeFromPage: resume } : {}),
            ...(tiff ? { tiff } : {}),
          },
          {
            signal,
            deadline: new Date(Date.now() + o.callTimeoutMs),
            // Progress is recorded best effort: a database hiccup must not cut a call in progress.
            onProgress: async (p) => {
              try {
                if (p.type === 'training') trainings.push(p.bitRate);
                else if (p.type === 'connected') {
                  pageStarted = Date.now();
                  await moveJob(this.d.db, job.id, 'sending', {
                    from: ['dialling'],
                    detail: { bit_rate: p.bitRate, ...(trainings.length > 1 ? { trainings } : {}) },
                  });
                  m.transitions.inc({ to: 'sending' });
                } else if (p.type === 'page_sent') {
                  const t = Date.now();
                  m.pageDuration.observe({ backend: backend.name }, (t - pageStarted) / 1000);
                  pageStarted = t;
                  await moveJob(this.d.db, job.id, 'sending', {
                    from: ['sending'],
                    set: { pages_sent: p.page },
                    detail: { page: p.page, of: p.of },
                  });
                }
              } catch (err) {
                log.warn({ err: (err as Error).message, progress: p.type }, 'progress not recorded');
              }
            },
          },
        );
      } catch (err) {
        outcome = {
          ok: false,
          type: 'backend_error',
          code: 'BACKEND_ERROR',
          message: `the backend failed: ${(err as Error).message}`.slice(0, 500),
          pagesSent: 0,
          retryable: true,
          durationMs: 0,
        };
      } finally {
        limit.dispose();
      }
      // The call happened: its outcome is written even if the database has to be waited for.
      const final = outcome;
      span?.setAttributes(
        final.ok
          ? {
              'faxline.outcome': 'delivered',
              'faxline.pages_sent': final.pages,
              'faxline.bit_rate': final.bitRate,
            }
          : {
              'faxline.outcome': final.type,
              'faxline.code': final.code,
              'faxline.pages_sent': final.pagesSent,
              'faxline.retryable': final.retryable,
            },
      );
      span?.setAttribute('faxline.call_ms', final.durationMs);
      await untilDbAvailable(() =>
        this.record(job.id, attempt, final, log, trainings.length > 1 ? trainings : undefined),
      );
    } finally {
      m.linesInUse.dec({ backend: backend.name });
    }
  }

  /**
   * Records the outcome of attempt `attempt`. Accepted from `dialling`/`sending`, and from `unknown`
   * when that same attempt was marked unknown because our lease lapsed (we now know the truth).
   */
  private async record(
    jobId: string,
    attempt: number,
    outcome: Outcome,
    log: Logger,
    trainings?: number[],
  ): Promise<void> {
    const m = this.d.metrics;
    const backend = this.d.backend.name;
    const now = new Date();
    const from = ['dialling', 'sending', 'unknown'] as const;
    const result = outcome.ok
      ? // One statement: the job moves only if it is still on this attempt and in one of those
        // states, and the attempt's row ends with it (nothing is written when it moved on).
        await moveJob(this.d.db, jobId, 'delivered', {
          from,
          set: {
            pages_sent: outcome.pages,
            completed_at: now,
            failure_code: null,
            failure_reason: null,
            ...NO_LEASE,
          },
          detail: {
            duration_ms: outcome.durationMs,
            bit_rate: outcome.bitRate,
            remote_station_id: outcome.remoteStationId,
            ...(trainings ? { trainings } : {}),
          },
          end: {
            attempt,
            columns: attemptEndColumns({
              outcome: 'delivered',
              reachedFax: true,
              pagesSent: outcome.pages,
              bitRate: outcome.bitRate,
              remoteStationId: outcome.remoteStationId,
              durationMs: outcome.durationMs,
              engine: outcome.engine ?? null,
            }),
          },
        }).then((row) => (row ? { to: 'delivered' as const, created: row.created_at } : ('stale' as const)))
      : await this.recordFailure(jobId, attempt, outcome, from, now);
    if (result === 'stale') {
      log.warn({ ok: outcome.ok }, 'call ended but the job moved on; outcome kept out of the job');
      return;
    }
    m.transitions.inc({ to: result.to });
    if (outcome.ok) {
      m.outcomes.inc({ backend, outcome: 'delivered' });
      m.pagesSent.inc({ backend }, outcome.pages);
      m.acceptToDelivered.observe((now.getTime() - result.created.getTime()) / 1000);
      log.info({ pages: outcome.pages, durationMs: outcome.durationMs }, 'fax delivered');
    } else {
      m.outcomes.inc({ backend, outcome: outcome.type });
      log.info({ type: outcome.type, code: outcome.code, next: result.to }, 'call failed');
    }
  }

  /** A failed call: its attempt ended, then a retry or the job's failure, under the job's row lock. */
  private recordFailure(
    jobId: string,
    attempt: number,
    outcome: Extract<Outcome, { ok: false }>,
    from: readonly ('dialling' | 'sending' | 'unknown')[],
    now: Date,
  ) {
    return withTx(this.d.db, async (c) => {
      const job = await lockLineJob(c, jobId);
      if (!job || job.attempts !== attempt) return 'stale' as const;
      if (!from.includes(job.state as (typeof from)[number])) return 'stale' as const;
      const reached = countsAsTry(outcome.type);
      await endAttempt(c, jobId, attempt, {
        outcome: 'failed',
        failureType: outcome.type,
        failureCode: outcome.code,
        failureMessage: outcome.message,
        retryable: outcome.retryable,
        reachedFax: reached,
        pagesSent: outcome.pagesSent,
        durationMs: outcome.durationMs,
        engine: outcome.engine ?? null,
      });
      const tries = await triesSoFar(c, jobId);
      const since = job.scheduled_at && job.scheduled_at > job.created_at ? job.scheduled_at : job.created_at;
      const decision =
        job.state === 'unknown'
          ? ({ retry: false, why: 'outcome learnt after the job was marked unknown' } as const)
          : decideRetry(policyForFax(this.d.opts.retry, job), outcome, { dials: attempt, tries, since, now });
      const detail = {
        type: outcome.type,
        code: outcome.code,
        retryable: outcome.retryable,
        pages_sent: outcome.pagesSent,
        duration_ms: outcome.durationMs,
      };
      if (decision.retry) {
        await transition(c, jobId, 'retry_waiting', {
          from,
          set: {
            pages_sent: outcome.pagesSent,
            next_attempt_at: decision.at,
            failure_code: outcome.type,
            failure_reason: outcome.message,
            ...NO_LEASE,
          },
          detail: { ...detail, next_attempt_at: decision.at.toISOString() },
        });
        return { to: 'retry_waiting' as const, created: job.created_at };
      }
      await transition(c, jobId, 'failed', {
        from,
        set: {
          pages_sent: outcome.pagesSent,
          completed_at: now,
          failure_code: outcome.type,
          failure_reason: `${outcome.message} (attempt ${attempt}; ${decision.why})`,
          ...NO_LEASE,
        },
        detail: { ...detail, gave_up: decision.why },
      });
      return { to: 'failed' as const, created: job.created_at };
    });
  }

  /** Calls whose driving process stopped renewing its lease: their outcome is unknown. */
  private async reapLapsed(): Promise<void> {
    const lapsed = await lapsedLeases(this.d.db, 100);
    for (const l of lapsed) {
      if (this.calls.has(l.id)) continue; // ours and still running: the renewal was only late
      let known: Outcome | null = null;
      if (this.d.opts.unknownPolicy === 'reconcile' && this.d.backend.reconcile) {
        known = await this.d.backend.reconcile(l.id, l.attempts).catch(() => null);
      }
      const log = this.log.child({ jobId: l.id, attempt: l.attempts });
      if (known) {
        log.warn({ ok: known.ok, previousWorker: l.lease_owner }, 'worker lost; outcome reconciled');
        await this.record(l.id, l.attempts, known, log);
        continue;
      }
      if (this.d.opts.unknownPolicy === 'retry') {
        log.warn(
          { previousWorker: l.lease_owner },
          'worker lost during a call; calling again (policy retry)',
        );
        await this.record(
          l.id,
          l.attempts,
          {
            ok: false,
            type: 'backend_error',
            code: 'OUTCOME_UNKNOWN',
            message: 'the worker stopped during the call; called again by policy',
            pagesSent: 0,
            retryable: true,
            durationMs: 0,
          },
          log,
        );
        continue;
      }
      const marked = await withTx(this.d.db, async (c) => {
        const job = await lockLineJob(c, l.id);
        if (!job || job.attempts !== l.attempts || (job.state !== 'dialling' && job.state !== 'sending'))
          return false;
        const row = await transition(c, l.id, 'unknown', {
          from: ['dialling', 'sending'],
          set: {
            failure_code: 'outcome_unknown',
            failure_reason: `the worker stopped during call attempt ${l.attempts}; whether the fax arrived is unknown, so it is not resent automatically`,
            completed_at: new Date(),
          },
          detail: { previous_worker: l.lease_owner },
        });
        if (!row) return false;
        await endAttempt(c, l.id, l.attempts, {
          outcome: 'unknown',
          failureType: 'outcome_unknown',
          failureCode: 'OUTCOME_UNKNOWN',
          failureMessage: 'the worker driving the call stopped',
          reachedFax: false,
          pagesSent: row.pages_sent,
        });
        return true;
      });
      if (marked) {
        this.d.metrics.transitions.inc({ to: 'unknown' });
        log.warn({ previousWorker: l.lease_owner }, 'worker lost during a call; outcome unknown');
      }
    }
  }

  /**
   * First step of a shutdown: stop taking work from the backlog. Jobs this process's send worker is
   * still preparing (its in-flight deliveries) are still called here when they are queued.
   */
  drain(): void {
    this.draining = true;
    if (this.timer) clearTimeout(this.timer);
    clearTimeout(this.retryTimer);
  }

  /**
   * Stops claiming; lets calls in progress finish for up to `graceMs`, then hangs them up (they end
   * `aborted` and are queued again at once, since they are known to be incomplete). Idempotent.
   */
  stop(graceMs: number): Promise<void> {
    this.stopping ??= (async () => {
      this.drain();
      this.stopped = true;
      await this.ticking;
      const all = () => Promise.allSettled([...this.calls.values()].map((c) => c.done));
      let t: NodeJS.Timeout | undefined;
      const graceOver = new Promise<void>((r) => {
        t = setTimeout(r, graceMs);
      });
      await Promise.race([all(), graceOver]);
      clearTimeout(t);
      for (const c of this.calls.values()) c.abort.abort();
      await all();
      if (this.heartbeat) clearInterval(this.heartbeat);
    })();
    return this.stopping;
  }
}
