// Group commit for intake. One PostgreSQL commit per request caps intake near the rate at which the
// server can flush its WAL; committing the requests that arrive together in one transaction shares
// that flush, and writing their rows with one multi-row statement per table shares the round trips.
// A request's promise resolves only after the COMMIT of the transaction that holds its rows
// succeeded, so "accepted" still means "durable". At low load a request runs alone at once (no
// waiting for a batch to fill); batches form only while earlier ones are committing.
//
// Each request has two parts: `prepare` (reads and checks; may refuse with an ApiError, which
// refuses that request only) and the write it returns, which `flush` performs for all prepared
// requests of one account together. Every statement runs with that account set for the
// transaction (set_config(..., true)), so row-level security applies throughout. If anything else
// fails, the batch is rolled back and its requests are retried one by one, so one bad request
// cannot fail the others; the one that still fails alone because PostgreSQL refused its own values
// (SQLSTATE class 22 or 23, see data-errors.ts) is refused with 422 or 409.
//
// The pool must be pipelined (pg `pipeline: true`): BEGIN goes out with the batch's first read,
// and the COMMIT right behind the last write, so a batch costs two round trips, not four. A
// statement that fails aborts the transaction, and the COMMIT queued behind it then answers
// ROLLBACK, which fails the batch like any other error.
import type { Pool, PoolClient } from '../db/pool.ts';
import { ApiError } from '../domain/envelope.ts';
import { beginFor, switchAccount } from '../db/tenant-db.ts';
import { refusalFor } from './data-errors.ts';

/** Per-batch memo for reads that every request of an account would repeat (e.g. its Fax Default). */
export type BatchMemo = Map<string, Promise<unknown>>;

export type Prepare<W, T> = (c: PoolClient, memo: BatchMemo) => Promise<{ write: W; value: T }>;
/**
 * Writes every prepared request of one account. `commit`, when given, must be called once after the
 * flush has sent its last statement (it sends COMMIT right behind it; the flush awaits it); it is
 * null when other accounts of the batch follow.
 */
export type Flush<W> = (
  c: PoolClient,
  accountId: string,
  writes: W[],
  commit: (() => Promise<void>) | null,
) => Promise<void>;

interface Item<W> {
  accountId: string;
  prepare: Prepare<W, unknown>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
  /** Run alone after a batch failed around it. */
  alone?: boolean;
}

export interface GroupCommitOptions {
  /** Most requests per transaction. */
  maxBatch: number;
  /** Transactions in flight at once (each holds one pooled connection). */
  concurrency: number;
}

export class GroupCommit<W> {
  private readonly queue: Item<W>[] = [];
  private active = 0;
  private readonly pool: Pool;
  private readonly o: GroupCommitOptions;
  private readonly flush: Flush<W>;
  /** Committed batches and requests (for the benchmark's report). */
  readonly stats = { batches: 0, items: 0, maxSize: 0 };

  constructor(pool: Pool, o: GroupCommitOptions, flush: Flush<W>) {
    this.pool = pool;
    this.o = o;
    this.flush = flush;
  }

  /** Prepares and writes one request in a transaction scoped to `accountId`, shared with others. */
  run<T>(accountId: string, prepare: Prepare<W, T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ accountId, prepare, resolve: resolve as (v: unknown) => void, reject });
      this.kick();
    });
  }

  private kick(): void {
    while (this.active < this.o.concurrency && this.queue.length > 0) {
      const batch = this.queue[0]!.alone ? this.queue.splice(0, 1) : this.takeBatch();
      this.active++;
      void this.runBatch(batch).finally(() => {
        this.active--;
        this.kick();
      });
    }
  }

  private takeBatch(): Item<W>[] {
    const out: Item<W>[] = [];
    for (let i = 0; i < this.queue.length && out.length < this.o.maxBatch;) {
      const it = this.queue[i]!;
      if (it.alone) {
        i++;
        continue;
      }
      out.push(it);
      this.queue.splice(i, 1);
    }
    return out;
  }

  private async runBatch(batch: Item<W>[]): Promise<void> {
    const groups = new Map<string, Item<W>[]>();
    for (const it of batch) {
      const g = groups.get(it.accountId);
      if (g) g.push(it);
      else groups.set(it.accountId, [it]);
    }
    let c: PoolClient;
    try {
      c = await this.pool.connect();
    } catch (err) {
      for (const it of batch) it.reject(err);
      return;
    }
    const done: { it: Item<W>; value: unknown }[] = [];
    const refused: { it: Item<W>; err: unknown }[] = [];
    let failure: unknown;
    let failedItem: Item<W> | undefined;
    let committed = false;
    const commit = async (): Promise<void> => {
      if (committed) throw new Error('group commit: COMMIT sent twice');
      committed = true;
      const r = await c.query('COMMIT');
      // COMMIT of a transaction that a failed statement aborted answers ROLLBACK, not an error.
      if (r.command !== 'COMMIT') throw new Error('group commit: the transaction was rolled back');
    };
    try {
      const accounts = [...groups.keys()];
      for (const [n, accountId] of accounts.entries()) {
        const items = groups.get(accountId)!;
        // Not awaited here: it travels with the first read of the batch (pipelined connection).
        const opened = n === 0 ? c.query(beginFor(accountId)) : switchAccount(c, accountId);
        opened.catch(() => undefined); // awaited below; a failure also fails the reads behind it
        const memo: BatchMemo = new Map();
        const writes: W[] = [];
        for (const it of items) {
          try {
            const p = await it.prepare(c, memo);
            writes.push(p.write);
            done.push({ it, value: p.value });
          } catch (err) {
            // A refusal is decided by reads only, so the transaction is still good for the others.
            if (err instanceof ApiError && batch.length > 1) refused.push({ it, err });
            else {
              failedItem = it;
              throw err;
            }
          }
        }
        await opened;
        const last = n === accounts.length - 1;
        if (writes.length > 0) await this.flush(c, accountId, writes, last ? commit : null);
      }
      if (!committed) await commit();
    } catch (err) {
      failure = err;
      await c.query('ROLLBACK').catch(() => undefined);
    } finally {
      c.release();
    }
    if (failure !== undefined) {
      // A request alone whose own values PostgreSQL refused (SQLSTATE class 22/23) gets a 4xx
      // refusal naming that, not a 500; an unreachable database stays a 503.
      if (batch.length === 1) {
        batch[0]!.reject(refusalFor(failure));
        return;
      }
      // Retry each request on its own; the one that failed in `prepare` gets its error now.
      const again = batch.filter((it) => it !== failedItem);
      failedItem?.reject(refusalFor(failure));
      for (const it of again) it.alone = true;
      this.queue.unshift(...again);
      return;
    }
    this.stats.batches++;
    this.stats.items += done.length;
    this.stats.maxSize = Math.max(this.stats.maxSize, batch.length);
    for (const d of done) d.it.resolve(d.value);
    for (const r of refused) r.it.reject(r.err);
  }
}
