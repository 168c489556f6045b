// Batched acceptance for the AMQP intake: jobs checked one by one (the HTTP intake's own rules) are
// committed many per PostgreSQL transaction, then their internal commands are published with
// confirms. A command id seen before (in this batch or earlier) yields the fax it already made.
//
// A batch holds many senders' commands, so one command must not fail the others. The common path
// is one transaction with one multi-row insert. If that fails for any reason but an unreachable
// database, the batch is written again in one transaction with a savepoint around each command:
// the commands PostgreSQL refuses are rolled back to their savepoint and fail alone (a refusal of
// their own values, SQLSTATE class 22/23, is permanent: 422/409, answered and dead-lettered by the
// intake), the rest are committed. An unreachable database fails the whole batch as transient.
import { type AuditEvent, recordAuditMany } from '../audit/record.ts';
import { isDbUnavailable } from '../db/errors.ts';
import type { Pool, PoolClient } from '../db/pool.ts';
import { withTx } from '../db/pool.ts';
import { refusalFor } from '../intake/data-errors.ts';
import type { Scheduler } from '../scheduler/scheduler.ts';
import type { CommandPublisher } from '../jobs/command-publisher.ts';
import { insertJobs, type NewDocument, type NewJob } from '../jobs/repo.ts';

interface Plan {
  result: Map<string, string>;
  /** Commands refused on their own (by key), with the error each is answered with. */
  failed: Map<string, unknown>;
  toPublish: Pick<NewJob, 'id' | 'accountId' | 'kind' | 'requestId' | 'traceContext'>[];
  key: (j: NewJob) => string;
}

interface Item {
  job: NewJob;
  docs: NewDocument[];
  /** The command's audit event, written in the transaction that inserts its job (not for a repeat). */
  audit: AuditEvent | undefined;
  resolve: (jobId: string) => void;
  reject: (err: unknown) => void;
}

export interface BatcherDeps {
  db: Pool;
  publisher: CommandPublisher;
  scheduler: Scheduler;
  maxBatch: number;
  lingerMs: number;
  /** Batch transactions in flight at once (default 2). */
  maxConcurrent?: number;
  onBatch?: (size: number) => void;
}

/** Commands written under their own savepoints in one transaction, when a batch failed (below 64). */
const SAVEPOINTS_PER_TX = 50;

export class JobBatcher {
  private readonly d: BatcherDeps;
  private items: Item[] = [];
  private timer: NodeJS.Timeout | undefined;
  private committing = 0;

  constructor(d: BatcherDeps) {
    this.d = d;
  }

  /**
   * Resolves with the job id once the job is committed and its command confirmed by RabbitMQ (or,
   * for a repeated command id, with the earlier job's id). Rejects with a 422/409 ApiError when
   * PostgreSQL refused this command's own values, and with the cause on transient failure.
   */
  add(job: NewJob, docs: NewDocument[], audit?: AuditEvent): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      this.items.push({ job, docs, audit, resolve, reject });
      if (this.items.length >= this.d.maxBatch) this.flushNow();
      else this.timer ??= setTimeout(() => this.flushNow(), this.d.lingerMs);
    });
  }

  /** Group commit: while the maximum of transactions is in flight, arrivals gather into the next batch. */
  private flushNow(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.items.length === 0 || this.committing >= (this.d.maxConcurrent ?? 2)) return;
    const batch = this.items.splice(0, this.d.maxBatch);
    this.committing++;
    this.d.onBatch?.(batch.length);
    const committed = this.commit(batch).finally(() => {
      // The slot is free once the transaction is done; publishing overlaps the next commit.
      this.committing--;
      if (this.items.length > 0) this.flushNow();
    });
    void committed
      .then((plan) => {
        // Refused commands are answered now; the others once their commands are confirmed.
        for (const i of batch) {
          const k = plan.key(i.job);
          if (plan.failed.has(k)) i.reject(plan.failed.get(k));
        }
        return this.publish(
          batch.filter((i) => !plan.failed.has(plan.key(i.job))),
          plan,
        );
      })
      .catch((err: unknown) => {
        for (const i of batch) i.reject(err);
      });
  }

  private async commit(batch: Item[]): Promise<Plan> {
    // One representative per (account, request id): the same command twice in a batch is one job.
    const key = (j: NewJob) => `${j.accountId} ${j.requestId ?? j.id}`;
    const reps = new Map<string, Item>();
    for (const i of batch) if (!reps.has(key(i.job))) reps.set(key(i.job), i);
    const unique = [...reps.values()];

    let inserted: Set<string>;
    const failed = new Map<string, unknown>();
    try {
      inserted = await withTx(this.d.db, (c) => this.write(c, unique));
    } catch (err) {
      if (isDbUnavailable(err)) throw err; // transient for the whole batch: every delivery retried
      // One savepoint per command, in transactions of at most SAVEPOINTS_PER_TX: past 64
      // subtransactions a backend overflows PostgreSQL's subtransaction cache, which slows the
      // snapshots of every session on the server, and one account can make a batch fail at will.
      inserted = new Set<string>();
      for (let at = 0; at < unique.length; at += SAVEPOINTS_PER_TX) {
        const chunk = unique.slice(at, at + SAVEPOINTS_PER_TX);
        const ids = await withTx(this.d.db, async (c) => {
          const ids = new Set<string>();
          for (const item of chunk) {
            await c.query('SAVEPOINT faxline_command');
            try {
              for (const id of await this.write(c, [item])) ids.add(id);
              await c.query('RELEASE SAVEPOINT faxline_command');
            } catch (own) {
              if (isDbUnavailable(own)) throw own;
              await c.query('ROLLBACK TO SAVEPOINT faxline_command');
              failed.set(key(item.job), refusalFor(own));
            }
          }
          return ids;
        });
        for (const id of ids) inserted.add(id);
      }
    }

    // Repeated command ids: the job made earlier, re-dispatched if its command was never confirmed.
    const result = new Map<string, string>();
    const toPublish: Pick<NewJob, 'id' | 'accountId' | 'kind' | 'requestId' | 'traceContext'>[] = [];
    const repeated = unique
      .filter((i) => !inserted.has(i.job.id) && !failed.has(key(i.job)))
      .map((i) => i.job);
    if (repeated.length > 0) {
      const r = await this.d.db.query<{
        id: string;
        account_id: string;
        request_id: string;
        kind: 'send' | 'forward';
        state: string;
        dispatched_at: Date | null;
        trace_context: string | null;
      }>(
        `SELECT j.id, j.account_id, j.request_id, j.kind, j.state, j.dispatched_at, j.trace_context
           FROM fax_jobs j
           JOIN unnest($1::uuid[], $2::text[]) AS x(account_id, request_id)
             ON j.account_id = x.account_id AND j.request_id = x.request_id`,
        [repeated.map((j) => j.accountId), repeated.map((j) => j.requestId)],
      );
      for (const row of r.rows) {
        result.set(`${row.account_id} ${row.request_id}`, row.id);
        if (row.state === 'accepted' && row.dispatched_at === null)
          toPublish.push({
            id: row.id,
            accountId: row.account_id,
            kind: row.kind,
            requestId: row.request_id,
            traceContext: row.trace_context,
          });
      }
    }
    for (const { job } of unique) {
      if (!inserted.has(job.id)) continue;
      result.set(key(job), job.id);
      if (job.state === 'accepted') toPublish.push(job);
    }
    return { result, failed, toPublish, key };
  }

  /**
   * Inserts the jobs (a repeated command id inserts nothing), their audit events (one statement for
   * the batch, in its transaction: a job is never committed without its event) and schedules the
   * scheduled ones.
   */
  private async write(c: PoolClient, items: Item[]): Promise<Set<string>> {
    const ids = await insertJobs(c, items);
    await recordAuditMany(
      c,
      items.flatMap((i) => (i.audit && ids.has(i.job.id) ? [i.audit] : [])),
    );
    await this.d.scheduler.scheduleMany(
      c,
      items.flatMap(({ job }) =>
        ids.has(job.id) && job.state === 'scheduled' && job.scheduledAt
          ? [
              {
                jobId: job.id,
                accountId: job.accountId,
                at: job.scheduledAt,
                trace: job.traceContext ?? null,
              },
            ]
          : [],
      ),
    );
    return ids;
  }

  private async publish(batch: Item[], { result, toPublish, key }: Plan): Promise<void> {
    // Every command confirmed before anyone hears "accepted". If one fails, the whole batch is
    // retried: its jobs are found as repeats and re-dispatched (workers fence on state, so a command
    // published twice still makes one fax).
    await this.d.publisher.publishMany(
      toPublish.map((j) => ({
        type: j.kind,
        job_id: j.id,
        account_id: j.accountId,
        ...(j.requestId ? { request_id: j.requestId } : {}),
        trace: j.traceContext ?? null,
      })),
    );
    for (const i of batch) {
      const id = result.get(key(i.job));
      if (id) i.resolve(id);
      else i.reject(new Error('job of a repeated command not found'));
    }
  }

  /** Commits what is waiting (on shutdown). */
  flush(): void {
    this.flushNow();
  }
}
