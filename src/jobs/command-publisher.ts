// Puts job commands on RabbitMQ. The job row is committed first; the command is then published with
// a publisher confirm; the confirmation is recorded (batched) in dispatched_at, or, for HTTP intake
// batches, by deleting their intake lot (migration 009). A sweep republishes commands of accepted
// jobs that were never confirmed (a process died between commit and confirm).
// Consumers fence on the job's state, so a command published twice makes one fax.
import type { Broker } from '../amqp/broker.ts';
import type { Pool } from '../db/pool.ts';
import type { JobCommand } from '../domain/commands.ts';
import type { Logger } from '../log.ts';
import { traceHeaders } from '../trace.ts';
import { claimParkedLots, deleteLots, findStaleLots, findUndispatched, markDispatched } from './repo.ts';

/** How old an unconfirmed command (or intake lot) must be before the sweep republishes it. */
export const SWEEP_GRACE_SECONDS = 30;
/** How often commands handed to retrySoon are tried again while RabbitMQ is reachable. */
export const RETRY_SOON_MS = 500;
/** Commands retrySoon keeps at most; beyond, the sweep alone republishes them. */
const RETRY_SOON_MAX = 10_000;

/**
 * A job command, and the trace context of its fax (fax_jobs.trace_context): it travels in the
 * message's `traceparent` header, never in the body.
 */
type Command = Omit<JobCommand, 'version' | 'issued_at'> & { trace?: string | null };

export class CommandPublisher {
  private pending: string[] = [];
  private pendingLots: string[] = [];
  private flushTimer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();
  private sweepTimer: NodeJS.Timeout | undefined;
  /** Commands whose publish failed in this process, by `job_id:type`, tried again soon. */
  private readonly retry = new Map<string, Command>();
  private retryTimer: NodeJS.Timeout | undefined;
  /** The retry round in flight (stop() waits for it). */
  private retrying: Promise<void> = Promise.resolve();
  private stopped = false;
  private readonly db: Pool;
  private readonly broker: Broker;
  private readonly log: Logger;

  constructor(db: Pool, broker: Broker, log: Logger) {
    this.db = db;
    this.broker = broker;
    this.log = log.child({ component: 'command-publisher' });
  }

  /** Publishes the command for a committed job; resolves once RabbitMQ confirmed it. */
  async publish(cmd: Command): Promise<void> {
    await this.publishMany([cmd]);
  }

  /**
   * Publishes the commands of several committed jobs at once and resolves when RabbitMQ confirmed
   * every one; rejects when any was not (the caller treats all of them as unconfirmed). Confirmed,
   * the jobs in `mark` (default: all) are marked dispatched and the intake `lots` are forgotten.
   */
  async publishMany(cmds: Command[], o: { mark?: string[]; lots?: string[] } = {}): Promise<void> {
    if (cmds.length === 0) return;
    const issued_at = new Date().toISOString();
    await this.broker.publishMany(
      this.broker.names.commands,
      cmds.map(({ trace, ...cmd }) => ({
        routingKey: cmd.type,
        body: { version: 1, issued_at, ...cmd } satisfies JobCommand,
        messageId: `${cmd.job_id}:${cmd.type}`,
        ...(trace ? { headers: traceHeaders(trace) } : {}),
      })),
    );
    // Confirmed commands are recorded together, at most every 50 ms.
    for (const id of o.mark ?? cmds.map((c) => c.job_id)) this.pending.push(id);
    for (const id of o.lots ?? []) this.pendingLots.push(id);
    this.flushTimer ??= setTimeout(() => {
      this.flushTimer = undefined;
      this.flushing = this.flush();
    }, 50);
  }

  private async flush(): Promise<void> {
    const ids = this.pending;
    const lots = this.pendingLots;
    this.pending = [];
    this.pendingLots = [];
    try {
      await Promise.all([markDispatched(this.db, ids), deleteLots(this.db, lots)]);
    } catch (err) {
      // Not fatal: the sweep republishes these later, and consumers ignore the duplicate.
      this.log.warn(
        { err: (err as Error).message, count: ids.length, lots: lots.length },
        'could not record confirmed publishes',
      );
    }
  }

  /**
   * Takes commands of committed jobs whose publish was not confirmed (RabbitMQ down or failing over)
   * and publishes them again every RETRY_SOON_MS while RabbitMQ is reachable, so a fax that fell due
   * during a broker fault leaves as soon as the broker is back instead of after the sweep's grace.
   * Kept in memory only: a process that dies forgets them, and the sweep republishes them then.
   */
  retrySoon(cmds: Command[]): void {
    if (this.stopped) return;
    for (const c of cmds) if (this.retry.size < RETRY_SOON_MAX) this.retry.set(`${c.job_id}:${c.type}`, c);
    this.retryTimer ??= setTimeout(() => (this.retrying = this.retryNow()), RETRY_SOON_MS);
  }

  private async retryNow(): Promise<void> {
    if (this.broker.isConnected && this.retry.size > 0) {
      const batch = [...this.retry.entries()].slice(0, 500);
      try {
        await this.publishMany(batch.map(([, c]) => c));
        for (const [k] of batch) this.retry.delete(k);
        this.log.info({ count: batch.length }, 'republished commands whose publish had failed');
      } catch (err) {
        this.log.debug({ err: (err as Error).message, count: batch.length }, 'republish failed; tried again');
      }
    }
    this.retryTimer = undefined;
    if (this.retry.size > 0 && !this.stopped)
      this.retryTimer = setTimeout(() => (this.retrying = this.retryNow()), RETRY_SOON_MS);
  }

  /** Republishes commands of jobs accepted more than `graceSeconds` ago and never confirmed. */
  async sweep(graceSeconds = SWEEP_GRACE_SECONDS): Promise<number> {
    if (!this.broker.isConnected) return 0;
    const rows = await findUndispatched(this.db, graceSeconds, 500);
    let n = 0;
    for (const r of rows) {
      try {
        await this.publish({
          type: r.kind,
          job_id: r.id,
          account_id: r.account_id,
          ...(r.request_id ? { request_id: r.request_id } : {}),
          trace: r.trace_context,
        });
        n++;
      } catch (err) {
        this.log.warn(
          { err: (err as Error).message, jobId: r.id, requestId: r.request_id },
          'sweep republish failed',
        );
        break;
      }
    }
    // Intake lots left behind: their jobs that are still accepted get their commands again, and the
    // lot is forgotten once those are confirmed (a failed publish leaves it for the next sweep).
    for (const lot of await findStaleLots(this.db, graceSeconds, 100)) {
      try {
        await this.publishMany(
          lot.jobs.map((r) => ({
            type: r.kind,
            job_id: r.id,
            account_id: r.account_id,
            ...(r.request_id ? { request_id: r.request_id } : {}),
            trace: r.trace_context,
          })),
          { mark: [], lots: [lot.id] },
        );
        if (lot.jobs.length === 0) await deleteLots(this.db, [lot.id]);
        n += lot.jobs.length;
      } catch (err) {
        this.log.warn({ err: (err as Error).message, lot: lot.id }, 'sweep republish of a lot failed');
        break;
      }
    }
    if (n > 0) this.log.info({ count: n }, 'republished unconfirmed commands');
    return n;
  }

  /**
   * Republishes now the commands of up to `max` of an account's parked lots that are not due yet
   * (a send worker with room for the account's work again: issue 33, work-conserving parking);
   * resolves with the number of lots claimed. A lot is forgotten once RabbitMQ confirmed its
   * command; a failed publish leaves it to the sweep.
   */
  async unpark(accountId: string, max: number): Promise<number> {
    if (max <= 0 || !this.broker.isConnected) return 0;
    const lots = await claimParkedLots(this.db, accountId, max);
    const cmds = lots.flatMap((lot) =>
      lot.jobs.map((r) => ({
        type: r.kind,
        job_id: r.id,
        account_id: r.account_id,
        ...(r.request_id ? { request_id: r.request_id } : {}),
      })),
    );
    if (cmds.length > 0) await this.publishMany(cmds, { mark: [], lots: lots.map((l) => l.id) });
    else
      await deleteLots(
        this.db,
        lots.map((l) => l.id),
      );
    return lots.length;
  }

  startSweeping(everySeconds: number): void {
    const tick = () => {
      this.sweep()
        .catch((err: unknown) => this.log.warn({ err: (err as Error).message }, 'sweep failed'))
        .finally(() => {
          if (this.sweepTimer) this.sweepTimer = setTimeout(tick, everySeconds * 1000);
        });
    };
    this.sweepTimer = setTimeout(tick, everySeconds * 1000);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    if (this.sweepTimer) clearTimeout(this.sweepTimer);
    this.sweepTimer = undefined;
    // A retry still waiting for its confirms: its confirmed commands are recorded below.
    await this.retrying;
    if (this.flushTimer) {
      clearTimeout(this.flushTimer);
      this.flushTimer = undefined;
      this.flushing = this.flush();
    }
    await this.flushing;
  }
}
