// Fair sharing of a few slots (processes, preparation places) between accounts. Waiting work is
// queued per account; a free slot goes to the waiting account with the fewest running items,
// accounts taking turns. Work-conserving (issue 33): an account is held to its share
// (`perAccount`) only while another account waits below its own share; otherwise a free slot is
// never left idle while work waits, and one account alone may hold up to `most` slots. `most`
// defaults to `size - 1` when there is more than one slot (the reserve: another account's first
// item finds a slot free instead of waiting behind a long task); the render pool, which keeps a
// reserve process of its own, lets one account hold every slot. The render pool, the PDF check
// sandbox and the send worker's preparation all use it.

export class FairQueue<T> {
  readonly size: number;
  /** Most items one account may have running at once while another account waits below its share. */
  readonly perAccount: number;
  /** Most items one account may have running at once when no other account waits below its share. */
  readonly most: number;
  /** Waiting items per account, in the order accounts take turns. */
  private readonly queues = new Map<string, T[]>();
  private readonly running = new Map<string, number>();

  constructor(size: number, perAccount?: number, most?: number) {
    this.size = Math.max(1, size);
    this.most = Math.max(1, Math.min(most ?? this.size - 1, this.size));
    this.perAccount = Math.min(Math.max(1, Math.min(perAccount ?? this.size - 1, this.size)), this.most);
  }

  push(account: string, item: T): void {
    const q = this.queues.get(account);
    if (q) q.push(item);
    else this.queues.set(account, [item]);
  }

  /** Takes a waiting item out of the queue (aborted); false when it was not waiting. */
  remove(account: string, item: T): boolean {
    const q = this.queues.get(account);
    const i = q?.indexOf(item) ?? -1;
    if (i < 0) return false;
    q!.splice(i, 1);
    if (q!.length === 0) this.queues.delete(account);
    return true;
  }

  /**
   * The next item to start (counted as running from now), or null when nothing may start: no item
   * waits, or every waiting account is at its `most` (or refused by `may`, which the caller uses
   * when the free slot does not suit every account). An account below its share goes first; when
   * none is, the free slot goes to the waiting account with the fewest running that is below its
   * `most` (work-conserving). The caller checks that a slot is free.
   */
  take(may?: (account: string) => boolean): { account: string; item: T } | null {
    let best: string | null = null;
    let fewest = Infinity;
    for (const limit of [this.perAccount, this.most]) {
      for (const account of this.queues.keys()) {
        const n = this.running.get(account) ?? 0;
        if (n < limit && n < fewest && (!may || may(account))) [best, fewest] = [account, n];
      }
      if (best !== null || limit === this.most) break;
    }
    if (best === null) return null;
    const q = this.queues.get(best)!;
    const item = q.shift()!;
    this.queues.delete(best); // to the back of the turn order
    if (q.length > 0) this.queues.set(best, q);
    this.running.set(best, fewest + 1);
    return { account: best, item };
  }

  /** An item of `account` taken earlier has ended. */
  done(account: string): void {
    const n = (this.running.get(account) ?? 1) - 1;
    if (n > 0) this.running.set(account, n);
    else this.running.delete(account);
  }

  /** Items of `account` waiting (not running). */
  waitingOf(account: string): number {
    return this.queues.get(account)?.length ?? 0;
  }

  get waiting(): number {
    let n = 0;
    for (const q of this.queues.values()) n += q.length;
    return n;
  }

  get runningTotal(): number {
    let n = 0;
    for (const v of this.running.values()) n += v;
    return n;
  }

  /** Removes and returns every waiting item (on close). */
  drain(): T[] {
    const all = [...this.queues.values()].flat();
    this.queues.clear();
    return all;
  }
}

/**
 * A counting semaphore of `size` permits shared fairly between accounts (the FairQueue rules):
 * `acquire` resolves with a release function once the account may run.
 */
export class FairGate {
  private readonly q: FairQueue<() => void>;

  constructor(size: number, perAccount?: number, most?: number) {
    this.q = new FairQueue(size, perAccount, most);
  }

  get size(): number {
    return this.q.size;
  }

  waitingOf(account: string): number {
    return this.q.waitingOf(account);
  }

  acquire(account: string, signal?: AbortSignal): Promise<() => void> {
    signal?.throwIfAborted();
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        if (this.q.remove(account, wake)) reject(signal!.reason as Error);
      };
      const wake = () => {
        signal?.removeEventListener('abort', onAbort);
        let released = false;
        resolve(() => {
          if (released) return;
          released = true;
          this.q.done(account);
          this.pump();
        });
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.q.push(account, wake);
      this.pump();
    });
  }

  private pump(): void {
    while (this.q.runningTotal < this.q.size) {
      const next = this.q.take();
      if (!next) return;
      next.item();
    }
  }
}
