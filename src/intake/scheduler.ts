// Scheduled faxes: the job row (state `scheduled`) and its pg-boss job are written in the same
// PostgreSQL transaction (pg-boss's `db` option), so one never exists without the other. When the
// pg-boss job falls due, the fax is moved scheduled → accepted by a conditional transition and its
// send command is published; a cancel that won the race first leaves nothing to send.
import { PgBoss } from 'pg-boss';
import { ApiError } from '../api/envelope.ts';
import type { Clock } from '../clock.ts';
import type { Pool, Queryable } from '../db/pool.ts';
import type { Dispatcher } from '../jobs/dispatcher.ts';
import { transition } from '../jobs/repo.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';

export const DUE_QUEUE = 'faxline-due';
/** Longest accepted scheduling horizon. */
export const MAX_SCHEDULE_DAYS = 90;

export interface SchedulerOptions {
  databaseUrl: string;
  schema: string;
  clock: Clock;
  log: Logger;
  metrics?: Metrics;
}

export class Scheduler {
  readonly boss: PgBoss;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly metrics: Metrics | undefined;
  private started = false;

  constructor(o: SchedulerOptions) {
    this.boss = new PgBoss({ connectionString: o.databaseUrl, schema: o.schema, max: 4 });
    this.clock = o.clock;
    this.log = o.log.child({ component: 'scheduler' });
    this.metrics = o.metrics;
    this.boss.on('error', (err: Error) => this.log.warn({ err: err.message }, 'pg-boss error'));
  }

  async start(): Promise<void> {
    await this.boss.start();
    await this.boss.createQueue(DUE_QUEUE, {
      // Keep a scheduled fax queued for at least the whole horizon (pg-boss deletes queued jobs older
      // than retentionSeconds).
      retentionSeconds: (MAX_SCHEDULE_DAYS + 7) * 86_400,
      retryLimit: 10,
      retryDelay: 2,
      retryBackoff: true,
    });
    this.started = true;
  }

  /**
   * Resolves a customer's scheduled_date: a time at or before now (within 5 minutes in the past,
   * for clock skew) means "send now" and returns null; further in the past or beyond the horizon → 422.
   */
  resolveDate(iso: string): Date | null {
    const at = new Date(iso);
    const now = this.clock.now().getTime();
    if (at.getTime() < now - 5 * 60_000)
      throw new ApiError(422, 'scheduled_date: is more than 5 minutes in the past');
    if (at.getTime() > now + MAX_SCHEDULE_DAYS * 86_400_000)
      throw new ApiError(422, `scheduled_date: is more than ${MAX_SCHEDULE_DAYS} days ahead`);
    return at.getTime() <= now ? null : at;
  }

  /** Enqueues the due-time job inside the caller's transaction. */
  async schedule(tx: Queryable, jobId: string, accountId: string, at: Date): Promise<void> {
    const ref = await this.boss.send(
      DUE_QUEUE,
      { job_id: jobId, account_id: accountId },
      {
        startAfter: at,
        singletonKey: jobId,
        db: { executeSql: (text, values) => tx.query(text, values) },
      },
    );
    await tx.query('UPDATE fax_jobs SET schedule_ref = $2 WHERE id = $1', [jobId, ref]);
  }

  /** Removes the due-time job of a cancelled fax (cleanup: the job state already forbids sending). */
  async unschedule(ref: string): Promise<void> {
    await this.boss.cancel(DUE_QUEUE, ref);
  }

  /** Runs the due-time worker: scheduled → accepted, then the send command. */
  async work(db: Pool, dispatcher: Dispatcher): Promise<void> {
    await this.boss.work<{ job_id: string; account_id: string }>(
      DUE_QUEUE,
      { pollingIntervalSeconds: 0.5, batchSize: 50 },
      async (jobs) => {
        for (const j of jobs) {
          const row = await transition(db, j.data.job_id, 'accepted', {
            from: ['scheduled'],
            set: { dispatched_at: null },
            detail: { due: true },
          });
          if (!row) continue; // cancelled (or already fired): nothing to send
          this.metrics?.transitions.inc({ to: 'accepted' });
          if (row.scheduled_at)
            this.metrics?.scheduleLateness.observe(
              Math.max(0, Date.now() - row.scheduled_at.getTime()) / 1000,
            );
          await dispatcher.dispatch({
            type: row.kind,
            job_id: row.id,
            account_id: row.account_id,
            ...(row.request_id ? { request_id: row.request_id } : {}),
          });
        }
      },
    );
  }

  async stop(): Promise<void> {
    if (this.started) await this.boss.stop({ graceful: true, timeout: 10_000 });
    this.started = false;
  }
}
