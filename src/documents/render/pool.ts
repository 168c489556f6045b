// A pool of render processes (child.ts), so that PDFium never runs in a service process's heap.
// Each process is started with a V8 heap cap, its resident memory is watched from /proc while it
// renders, and each page has a time limit: past either, the process is killed (PDFium cannot be
// interrupted mid-page) and the task fails with a code naming the page. A process that grew large,
// or served `recycleAfterTasks` tasks, is replaced after its task so that its memory returns to the
// system. Waiting tasks are queued per account and served fairly (fair-queue.ts): the account with
// the fewest running tasks goes first, accounts taking turns; one account alone may use every
// process (work-conserving), and while another account waits it is held to all but one. Heavy accounts' tasks run in
// low-priority processes, and the pool keeps a normal one for the other accounts at any size: it
// may start one process beyond `size` for that (see place()). A process that is replaced is killed
// and its exit awaited before its successor starts: the pool never has more than `size + 1`
// processes alive (more than `size` only after some process took heavy work). Idle processes do
// not keep the service process alive. A fax-pages task's pages go to a file in the pool's private
// directory (protocol.ts), which the caller reads or discards.
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { DocumentError } from '../errors.ts';
import {
  HEAVY_TASK_CPU_MS,
  busy,
  cpuMs,
  deprioritize,
  diedOfHeap,
  startCapped,
  type CappedChild,
  idle,
  killChild,
  RecentCpu,
  rssBytes,
} from '../capped-child.ts';
import { FairQueue } from '../fair-queue.ts';
import type {
  ChildReply,
  EncodedPage,
  PageMeta,
  RenderRequest,
  RenderResult,
  RenderTask,
} from './protocol.ts';
import { pidAlive } from '../../pid.ts';

export interface RenderLimits {
  /** Render processes; 0 = one per CPU core. */
  size: number;
  /** Resident memory allowed to one render process (also its V8 heap cap). */
  memoryMb: number;
  /** Tasks a process serves before it is replaced. */
  recycleAfterTasks: number;
  /** CPU time allowed to render and encode one page (wall time: four times this, a backstop). */
  pageTimeoutMs: number;
  /** Render CPU time allowed to one fax, all its pages together (renderFax). */
  faxTimeoutMs: number;
  /** Largest TIFF (the sum of the encoded pages) of one fax (renderFax). */
  maxTiffBytes: number;
}

export const defaultRenderLimits: RenderLimits = {
  size: 1,
  memoryMb: 256,
  recycleAfterTasks: 1000,
  pageTimeoutMs: 5_000,
  faxTimeoutMs: 120_000,
  maxTiffBytes: 64 * 1024 * 1024,
};

export const renderCodes = {
  timeout: 'render_timeout',
  memory: 'render_memory_exceeded',
  failed: 'render_failed',
  tooLarge: 'fax_image_too_large',
} as const;

export interface RunOptions {
  /** Whose task this is: waiting tasks are served fairly between accounts. */
  accountId?: string;
  /** Aborting stops the task at once: removed from the queue, or its process killed. */
  signal?: AbortSignal;
  /** Time allowed to the whole task (besides the limit per page). */
  timeoutMs?: number;
  /** CPU time allowed per page (default: the pool's pageTimeoutMs). */
  pageTimeoutMs?: number;
  /**
   * Called with each fax page as it arrives and the CPU milliseconds it took; throwing stops the
   * task (its process is killed) and fails it with that error.
   */
  onPage?: (page: PageMeta, ms: number) => void;
}

interface Pending {
  id: number;
  task: RenderTask;
  o: RunOptions;
  account: string;
  pages: PageMeta[];
  /** The file a fax-pages task writes its pages to (removed when the task fails). */
  out: string | null;
  slot: Slot | null;
  resolve: (r: RenderResult) => void;
  reject: (e: Error) => void;
  onAbort: () => void;
}

interface Slot extends CappedChild {
  tasks: number;
  busy: Pending | null;
  cleanup: (() => void) | null;
  /** CPU time of the process when its task began (0: not begun). */
  cpuStart: number;
}

const childUrl = new URL('./child.ts', import.meta.url);
const RSS_POLL_MS = 20;
/** Wall time allowed per page, as a multiple of its CPU time (a process that makes no progress). */
const WALL_FACTOR = 4;
const STARTUP_MS = 30_000;
const MB = 1024 * 1024;
/** Name prefix of a pool's directory of page files in the system's temporary directory. */
const DIR_PREFIX = 'faxline-render-';

/**
 * The pages of a finished fax-pages task, read from its file (off the event loop: one buffer, each
 * page a view of it); the file is removed.
 */
export async function readPages(r: { pages: PageMeta[]; file: string }): Promise<EncodedPage[]> {
  // Pages that came with their sizes (the drawn cover) have no file.
  if (r.pages.length > 0 && r.pages.every((m) => m.data))
    return r.pages.map((m) => ({ data: m.data!, width: m.width, height: m.height }));
  const buf = await readFile(r.file);
  await rm(r.file, { force: true });
  let at = 0;
  const pages = r.pages.map((m) => {
    const page = { data: buf.subarray(at, at + m.size), width: m.width, height: m.height };
    at += m.size;
    return page;
  });
  if (at !== buf.length) throw new Error(`render output ${r.file}: ${buf.length} bytes, ${at} expected`);
  return pages;
}

/** Removes the file of a finished fax-pages task whose pages are not wanted (the fax failed). */
export function discardPages(r: { file: string }): Promise<void> {
  return rm(r.file, { force: true });
}

/**
 * A private directory for page files: `faxline-render-<pid>-…` in the temporary directory. The
 * directories of processes that are gone (a crash, a kill) are removed first.
 */
function pageDirectory(): string {
  const base = tmpdir();
  try {
    for (const name of readdirSync(base)) {
      const pid = new RegExp(`^${DIR_PREFIX}(\\d+)-`).exec(name)?.[1];
      if (!pid || Number(pid) === process.pid || pidAlive(Number(pid))) continue;
      rmSync(join(base, name), { recursive: true, force: true });
    }
  } catch {
    // someone else's directory we may not remove: not ours to clean
  }
  return mkdtempSync(join(base, `${DIR_PREFIX}${process.pid}-`));
}

export class RenderPool {
  readonly limits: RenderLimits;
  readonly size: number;
  private readonly slots = new Set<Slot>();
  /** Waiting tasks per account, and running ones counted per account. */
  private readonly queue: FairQueue<Pending>;
  /** Processes killed whose exit has not been seen yet: they still hold memory. */
  private dying = 0;
  /** Of those, the ones that were at low priority (kept for heavy accounts). */
  private dyingNiced = 0;
  private nextId = 1;
  private closed = false;
  private readonly recent = new RecentCpu();
  /** Where fax-pages tasks write their pages (made at the first such task). */
  private dir: string | null = null;

  /** A number is the size with default limits (tests and benches). */
  constructor(o: number | Partial<RenderLimits> = {}) {
    this.limits = { ...defaultRenderLimits, ...(typeof o === 'number' ? { size: o } : o) };
    this.size = this.limits.size > 0 ? this.limits.size : availableParallelism();
    // Work-conserving: one account alone may use every process (its share is `size - 1` while
    // another account waits); another account's first task is not stuck behind a heavy account's
    // long one because of the render reserve (place()), not because a process is kept idle.
    this.queue = new FairQueue(this.size, this.size - 1, this.size);
  }

  /** Runs a task in the next free render process. */
  run(task: RenderTask, o: RunOptions = {}): Promise<RenderResult> {
    if (this.closed) return Promise.reject(new Error('render pool is closed'));
    if (o.signal?.aborted) return Promise.reject(o.signal.reason as Error);
    return new Promise((resolve, reject) => {
      const p: Pending = {
        id: this.nextId++,
        task,
        o,
        account: o.accountId ?? '',
        pages: [],
        out: null,
        slot: null,
        resolve,
        reject,
        onAbort: () => {
          const reason = (o.signal?.reason as Error | undefined) ?? new Error('render aborted');
          if (p.slot) return this.fail(p.slot, p, reason);
          if (this.queue.remove(p.account, p)) reject(reason);
        },
      };
      o.signal?.addEventListener('abort', p.onAbort, { once: true });
      this.queue.push(p.account, p);
      this.pump();
    });
  }

  /** Process ids of the running render processes. */
  pids(): number[] {
    return [...this.slots].flatMap((s) => (s.proc.pid ? [s.proc.pid] : []));
  }

  /** Kills every render process; queued and running tasks are rejected. */
  async close(): Promise<void> {
    this.closed = true;
    const err = new Error('render pool is closed');
    for (const p of this.queue.drain()) this.settle(p, err);
    const all = [...this.slots];
    for (const s of all) if (s.busy) this.fail(s, s.busy, err);
    this.slots.clear();
    await Promise.all(all.map((s) => killChild(s.proc)));
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }

  private pump(): void {
    while (this.queue.waiting > 0 && !this.closed) {
      const next = this.queue.take((account) => this.place(this.recent.heavy(account)) !== null);
      if (!next) return; // every waiting account is at its share, or waits for a process
      const heavy = this.recent.heavy(next.item.account);
      const choice = this.place(heavy)!;
      const slot = choice === 'spawn' ? this.spawn() : choice;
      if (heavy && !slot.niced) slot.niced = deprioritize(slot.proc);
      this.start(slot, next.item);
    }
  }

  /**
   * Where a task of a heavy (`heavy`) or light account would start now: a free process, a new one
   * ('spawn'), or nowhere (null: it waits). A heavy account's task goes to a low-priority process,
   * another's to a normal one; a new process is started rather than giving a light task a
   * low-priority one, where there is room. The render reserve (issue 27, finding 3): the pool may
   * start one process beyond its size so that a light account always has a normal process, even
   * when every other one runs (or is kept for) heavy work; and with a size of 1, so that a heavy
   * account's task runs in a low-priority process of its own beside the normal one rather than
   * taking it. So at most `size + 1` processes are ever alive (dying ones counted).
   */
  private place(heavy: boolean): Slot | 'spawn' | null {
    const all = [...this.slots];
    const free = all.filter((s) => !s.busy);
    const own = free.find((s) => s.niced === heavy);
    if (own) return own;
    const alive = this.slots.size + this.dying;
    if (alive < this.size) return 'spawn';
    const normal = all.filter((s) => !s.niced).length;
    const niced = all.length - normal;
    const extra = alive < this.size + 1;
    // A process of the same kind that is dying is waited for: its successor starts once its exit
    // is seen, as within the size.
    if (!heavy) {
      // No normal process at all: every one runs heavy work, or is kept for it.
      if (extra && normal === 0 && this.dying === this.dyingNiced) return 'spawn';
      return free[0] ?? null; // an idle low-priority process rather than waiting
    }
    // A heavy account takes a normal process (lowering it for good) only when another normal one
    // stays: otherwise it waits for room to start a low-priority one (a killed process exiting), and
    // a light account's next task does not wait for a process to start because the last normal one
    // was taken from it. With one process, the room is the one beyond the size.
    if (this.size === 1 && extra && niced === 0 && this.dyingNiced === 0) return 'spawn';
    return normal >= 2 ? (free[0] ?? null) : null;
  }

  private spawn(): Slot {
    const slot: Slot = Object.assign(
      startCapped(childUrl, this.limits.memoryMb, 'render process', () => this.slots.delete(slot)),
      { tasks: 0, busy: null, cleanup: null, cpuStart: 0 },
    );
    this.slots.add(slot);
    return slot;
  }

  private start(slot: Slot, p: Pending): void {
    slot.busy = p;
    p.slot = slot;
    const { proc } = slot;
    busy(proc);
    const pageMs = p.o.pageTimeoutMs ?? this.limits.pageTimeoutMs;
    const cap = this.limits.memoryMb * MB;
    /** Index (from 0) of the page being rendered, for messages. */
    const pageIndex = () => (p.task.kind === 'page-image' ? p.task.page : p.task.first + p.pages.length);
    /** CPU time of the process (or, where /proc is missing, wall time) when the page began. */
    const clock = () => cpuMs(proc.pid) ?? performance.now();
    let pageStart = 0;
    let taskStart = 0;
    let pageTimer: NodeJS.Timeout | undefined;
    let taskTimer: NodeJS.Timeout | undefined;
    // Until the process is up, a generous start-up limit (our problem: a plain, retried error).
    const startTimer = setTimeout(
      () => this.fail(slot, p, new Error('render process did not start in time')),
      STARTUP_MS,
    );
    const pageTimeout = () =>
      this.fail(
        slot,
        p,
        new DocumentError(
          renderCodes.timeout,
          `page ${pageIndex() + 1} took longer than ${pageMs / 1000} s to render (the page is too complex)`,
        ),
      );
    const armPage = () => {
      pageStart = clock();
      taskStart ||= pageStart;
      slot.cpuStart ||= taskStart;
      clearTimeout(pageTimer);
      pageTimer = setTimeout(pageTimeout, pageMs * WALL_FACTOR);
    };
    // The watchdog: resident memory against the cap, CPU time of the page against its budget.
    const poll = setInterval(() => {
      if (rssBytes(proc.pid) > cap) return this.fail(slot, p, this.memoryError(pageIndex()));
      const now = pageStart ? clock() : 0;
      if (pageStart && now - pageStart > pageMs) return pageTimeout();
      // A heavy task runs on at a low CPU priority, so light tasks keep the CPU.
      // The process is no longer a normal one: a light account's task waiting for one may now get
      // a process of its own (place()), or, when none waits, the reserve is started idle so that
      // the next one does not wait for a process to start.
      if (taskStart && !slot.niced && now - taskStart > HEAVY_TASK_CPU_MS) {
        slot.niced = deprioritize(proc);
        if (slot.niced) {
          this.pump();
          this.spare();
        }
      }
    }, RSS_POLL_MS);
    const onMessage = (m: ChildReply | { ready: true }) => {
      if (!('id' in m) || m.id !== p.id || slot.busy !== p) return;
      if ('page' in m) {
        const spent = clock() - pageStart;
        p.pages.push(m.page);
        try {
          p.o.onPage?.(m.page, spent);
        } catch (err) {
          return this.fail(slot, p, err as Error);
        }
        return armPage();
      }
      if (m.ok)
        return this.done(
          slot,
          p,
          m.result.kind === 'fax-pages' ? { ...m.result, pages: p.pages, file: p.out ?? '' } : m.result,
        );
      if (m.io) {
        // A directory removed under us (a cleaner of old files in /tmp) is made anew for the next
        // task; the fax is retried (a plain error), not failed for its document.
        if (this.dir && !existsSync(this.dir)) this.dir = null;
        return this.done(slot, p, new Error(`render output could not be written: ${m.message}`));
      }
      if (m.code === renderCodes.memory) return this.fail(slot, p, this.memoryError(pageIndex()));
      if (m.code) return this.done(slot, p, new DocumentError(m.code, m.message));
      // Anything else is a crash inside PDFium (a WebAssembly trap): the instance may be damaged,
      // so the process is replaced; the same bytes would crash again, so the job fails for good.
      this.fail(
        slot,
        p,
        new DocumentError(renderCodes.failed, `the document cannot be rendered (${m.message})`),
      );
    };
    const onExit = () => {
      if (slot.busy !== p) return;
      if (!slot.started) return this.fail(slot, p, new Error(`render process did not start: ${slot.stderr}`));
      this.fail(
        slot,
        p,
        diedOfHeap(slot.stderr)
          ? this.memoryError(pageIndex())
          : new DocumentError(
              renderCodes.failed,
              `page ${pageIndex() + 1}: the renderer stopped unexpectedly (the page is pathological)`,
            ),
      );
    };
    slot.cleanup = () => {
      clearTimeout(startTimer);
      clearTimeout(pageTimer);
      clearTimeout(taskTimer);
      clearInterval(poll);
      proc.off('message', onMessage);
      proc.off('exit', onExit);
    };
    proc.on('message', onMessage);
    proc.once('exit', onExit);
    slot.ready.then(
      () => {
        if (slot.busy !== p) return;
        clearTimeout(startTimer);
        armPage();
        const whole = p.o.timeoutMs;
        if (whole !== undefined)
          taskTimer = setTimeout(
            () =>
              this.fail(
                slot,
                p,
                new DocumentError(renderCodes.timeout, `rendering took longer than ${whole / 1000} s`),
              ),
            whole,
          );
        if (p.task.kind === 'fax-pages') {
          this.dir ??= pageDirectory();
          p.out = join(this.dir, `${p.id}.g4`);
        }
        const req: RenderRequest = { id: p.id, task: p.task, ...(p.out ? { out: p.out } : {}) };
        proc.send(req, (err) => {
          if (err && slot.busy === p) this.fail(slot, p, err);
        });
      },
      (err: unknown) => this.fail(slot, p, new Error(`render process failed to start: ${String(err)}`)),
    );
  }

  private memoryError(index: number): DocumentError {
    return new DocumentError(
      renderCodes.memory,
      `page ${index + 1}: rendering needed more than ${this.limits.memoryMb} MB of memory (the page is pathological)`,
    );
  }

  /** Ends the task on `slot`; returns false when it had already ended. */
  private release(slot: Slot, p: Pending): boolean {
    if (slot.busy !== p) return false;
    if (slot.cpuStart)
      this.recent.add(p.account, (cpuMs(slot.proc.pid) ?? performance.now()) - slot.cpuStart);
    slot.cpuStart = 0;
    slot.cleanup?.();
    slot.cleanup = null;
    slot.busy = null;
    p.slot = null;
    this.queue.done(p.account);
    return true;
  }

  /** A normal end (a result, or the document's own error): the process serves on unless recycled. */
  private done(slot: Slot, p: Pending, r: RenderResult | Error): void {
    if (!this.release(slot, p)) return;
    slot.tasks++;
    // A process that grew half-way from its start-up size to the cap, or served its share of
    // tasks, is replaced: PDFium's WebAssembly memory never shrinks.
    const cap = this.limits.memoryMb * MB;
    const grown = rssBytes(slot.proc.pid) > slot.baseRss + (cap - slot.baseRss) / 2;
    // A low-priority process is kept, for the next task of a heavy account.
    if (grown || slot.tasks >= this.limits.recycleAfterTasks) this.drop(slot);
    else idle(slot.proc);
    this.settle(p, r);
    this.pump();
  }

  /** An abnormal end (limit, abort, crash): the process is killed and replaced on demand. */
  private fail(slot: Slot, p: Pending, err: Error): void {
    if (!this.release(slot, p)) return;
    this.drop(slot, p.out);
    this.settle(p, err);
    this.pump();
  }

  private settle(p: Pending, r: RenderResult | Error): void {
    p.o.signal?.removeEventListener('abort', p.onAbort);
    if (r instanceof Error && p.out) void rm(p.out, { force: true });
    if (r instanceof Error) p.reject(r);
    else p.resolve(r);
  }

  /**
   * Kills a process; its successor may start once its exit is seen (its memory is free). `file`, the
   * output of the task it was killed in, is removed again then (the process may have made it after
   * the task's end removed it).
   */
  private drop(slot: Slot, file: string | null = null): void {
    if (!this.slots.delete(slot)) return;
    this.dying++;
    if (slot.niced) this.dyingNiced++;
    void killChild(slot.proc).then(() => {
      if (file) void rm(file, { force: true });
      this.dying--;
      if (slot.niced) this.dyingNiced--;
      this.pump();
      if (!slot.niced) this.spare();
    });
  }

  /**
   * A normal process that was replaced (recycled, grown, crashed) or lowered for a heavy task gets
   * its successor at once, idle, when no other normal process is free: a light account's next page
   * then does not wait for a process to start (Node, PDFium's WebAssembly, a warm-up page: a few
   * hundred ms on a busy machine). Only where a light task could start one (place()): never more processes than
   * the pool's size, or one more where no other normal process is alive (the render reserve).
   */
  private spare(): void {
    if (this.closed) return; // called after pump(): what still waits cannot start now
    if ([...this.slots].some((s) => !s.niced && !s.busy)) return;
    if (this.place(false) === 'spawn') idle(this.spawn().proc);
  }
}
