// A background loop that polls: it runs one pass, goes again at once while passes find work, and
// otherwise sleeps until the next poll (longer after failures) or until stop() wakes it. Used by the
// event relay and the webhook deliverer, which poll PostgreSQL tables the same way.
//
// Idle cost: a loop whose last pass found nothing may first ask `probe` (one cheap statement through
// a partial index) whether there is anything to do, and skip the pass (often a transaction of several
// statements) when there is not. An idle service then costs one statement per loop and poll.

export interface PollLoopOptions {
  /** One pass; resolves with how much work it did. Errors are reported and the loop goes on. */
  pass: () => Promise<number>;
  /** Whether a pass that did `n` units of work is followed at once by the next. */
  again: (n: number) => boolean;
  /** How long to sleep after a pass that is not followed at once (`failures` in a row so far). */
  waitMs: (failures: number) => number;
  onError: (err: Error, failures: number) => void;
  /**
   * Asked before a pass when the previous pass did no work: false skips the pass (as if it found
   * nothing). A probe that throws counts as a failed pass.
   */
  probe?: () => Promise<boolean>;
}

export class PollLoop {
  private readonly o: PollLoopOptions;
  private running = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(o: PollLoopOptions) {
    this.o = o;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    let failures = 0;
    let idle = false;
    while (this.running) {
      let n = 0;
      try {
        n = idle && this.o.probe && !(await this.o.probe()) ? 0 : await this.o.pass();
        idle = n === 0;
        failures = 0;
      } catch (err) {
        idle = false;
        failures++;
        this.o.onError(err as Error, failures);
      }
      if (!this.running) break;
      if (failures === 0 && this.o.again(n)) continue;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, this.o.waitMs(failures));
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = undefined;
    }
  }

  /** Ends the loop: a sleeping loop wakes at once; a pass in progress is awaited. */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
  }
}
