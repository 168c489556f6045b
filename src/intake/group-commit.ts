// Group commit for intake. One PostgreSQL commit per request caps intake near the rate at which the
// server can flush its WAL; committing the requests that arrive together in one transaction shares
// that flush. A request's promise resolves only after the COMMIT of the transaction that holds its
// rows succeeded, so "accepted" still means "durable". At low load a request runs alone at once
// (no waiting for a batch to fill); batches form only while earlier ones are committing.
//
// Each item runs inside the batch's transaction with its own account set (set_config(..., true)),
// so row-level security applies to every item. If an item fails in a way that may have aborted the
// transaction, the batch is rolled back, that item gets its error, and the others are run again.
// Rule for items: refuse (throw ApiError) before writing anything.
import type { Pool, PoolClient } from '../db/pool.ts';
import { ApiError } from '../api/envelope.ts';
import { beginFor, switchAccount } from '../api/tenant-db.ts';

interface Item {
  accountId: string;
  fn: (c: PoolClient) => Promise<unknown>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
  /** Run alone after a batch failed around it. */
  alone?: boolean;
}

export interface GroupCommitOptions {
  /** Most items per transaction. */
  maxBatch: number;
  /** Transactions in flight at once (each holds one pooled connection). */
  concurrency: number;
}

export class GroupCommit {
  private readonly queue: Item[] = [];
  private active = 0;
  private readonly pool: Pool;
  private readonly o: GroupCommitOptions;
  /** Sizes of committed batches (for the benchmark's report). */
  readonly stats = { batches: 0, items: 0, maxSize: 0 };

  constructor(pool: Pool, o: GroupCommitOptions) {
    this.pool = pool;
    this.o = o;
  }

  /** Runs `fn` in a transaction scoped to `accountId`, shared with concurrent callers. */
  run<T>(accountId: string, fn: (c: PoolClient) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ accountId, fn, resolve: resolve as (v: unknown) => void, reject });
      this.kick();
    });
  }

  private kick(): void {
    while (this.active < this.o.concurrency && this.queue.length > 0) {
      const first = this.queue[0]!;
      const batch = first.alone ? this.queue.splice(0, 1) : this.takeBatch();
      this.active++;
      void this.runBatch(batch).finally(() => {
        this.active--;
        this.kick();
      });
    }
  }

  private takeBatch(): Item[] {
    const out: Item[] = [];
    for (let i = 0; i < this.queue.length && out.length < this.o.maxBatch;) {
      const it = this.queue[i]!;
      if (it.alone) {
        i++;
        continue;
      }
      out.push(it);
      this.queue.splice(i, 1);
    }
    // Fewer account switches inside the transaction.
    return out.sort((a, b) => (a.accountId < b.accountId ? -1 : a.accountId > b.accountId ? 1 : 0));
  }

  private async runBatch(batch: Item[]): Promise<void> {
    let c: PoolClient;
    try {
      c = await this.pool.connect();
    } catch (err) {
      for (const it of batch) it.reject(err);
      return;
    }
    const results: { it: Item; value: unknown }[] = [];
    const failed: { it: Item; err: unknown }[] = [];
    let broken: Item | undefined;
    let brokenErr: unknown;
    try {
      await c.query(beginFor(batch[0]!.accountId));
      let current = batch[0]!.accountId;
      for (const it of batch) {
        if (it.accountId !== current) {
          await switchAccount(c, it.accountId);
          current = it.accountId;
        }
        try {
          results.push({ it, value: await it.fn(c) });
        } catch (err) {
          // A refusal (ApiError) is decided before an item writes anything, so the transaction is
          // still good for the others (probed). Anything else may have left partial writes or an
          // aborted transaction: the batch is rolled back and the others run again.
          const usable =
            err instanceof ApiError &&
            (await c.query('SELECT 1').then(
              () => true,
              () => false,
            ));
          if (usable && batch.length > 1) failed.push({ it, err });
          else {
            broken = it;
            brokenErr = err;
            break;
          }
        }
      }
      if (broken) {
        await c.query('ROLLBACK').catch(() => undefined);
        broken.reject(brokenErr);
        const again = batch.filter((it) => it !== broken);
        for (const it of again) it.alone = true;
        this.queue.unshift(...again);
        return;
      }
      await c.query('COMMIT');
    } catch (err) {
      await c.query('ROLLBACK').catch(() => undefined);
      for (const it of batch) it.reject(err);
      return;
    } finally {
      c.release();
    }
    this.stats.batches++;
    this.stats.items += results.length;
    this.stats.maxSize = Math.max(this.stats.maxSize, batch.length);
    for (const r of results) r.it.resolve(r.value);
    for (const f of failed) f.it.reject(f.err);
  }
}
