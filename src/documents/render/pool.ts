// A pool of render worker threads, sized to the cores by default, so rendering never blocks the
// event loop. Tasks queue when every worker is busy. A task that overruns its time limit, or whose
// job is aborted, terminates its worker (PDFium cannot be interrupted mid-page) and a fresh worker
// takes its place. Idle workers do not keep the process alive.
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { DocumentError } from '../errors.ts';
import type { RenderResult, RenderTask, WorkerReply } from './protocol.ts';

interface Pending {
  id: number;
  task: RenderTask;
  timeoutMs: number;
  signal: AbortSignal | undefined;
  resolve: (r: RenderResult) => void;
  reject: (e: Error) => void;
  cleanup?: () => void;
}

interface Slot {
  worker: Worker;
  ready: Promise<void>;
  busy: Pending | null;
}

export class RenderPool {
  readonly size: number;
  private readonly slots: Slot[] = [];
  private readonly queue: Pending[] = [];
  private nextId = 1;
  private closed = false;

  constructor(size = 0) {
    this.size = size > 0 ? size : availableParallelism();
  }

  /** Runs a task on the next free worker. The PDF bytes are copied, never transferred. */
  run(task: RenderTask, o: { timeoutMs: number; signal?: AbortSignal }): Promise<RenderResult> {
    if (this.closed) return Promise.reject(new Error('render pool is closed'));
    if (o.signal?.aborted) return Promise.reject(o.signal.reason as Error);
    return new Promise((resolve, reject) => {
      this.queue.push({ id: this.nextId++, task, timeoutMs: o.timeoutMs, signal: o.signal, resolve, reject });
      this.pump();
    });
  }

  /** Stops every worker; queued and running tasks are rejected. */
  async close(): Promise<void> {
    this.closed = true;
    for (const p of this.queue.splice(0)) p.reject(new Error('render pool is closed'));
    await Promise.all(this.slots.splice(0).map((s) => this.kill(s, new Error('render pool is closed'))));
  }

  private pump(): void {
    while (this.queue.length > 0) {
      let slot = this.slots.find((s) => !s.busy);
      if (!slot && this.slots.length < this.size) slot = this.spawn();
      if (!slot) return;
      this.start(slot, this.queue.shift()!);
    }
  }

  private spawn(): Slot {
    const worker = new Worker(new URL('./worker.ts', import.meta.url));
    const slot: Slot = {
      worker,
      busy: null,
      ready: new Promise((resolve, reject) => {
        const onMessage = (m: unknown) => {
          if ((m as { ready?: boolean }).ready) {
            worker.off('error', reject);
            resolve();
          }
        };
        worker.once('message', onMessage);
        worker.once('error', reject);
      }),
    };
    worker.unref();
    worker.on('error', (err) => this.fail(slot, err));
    worker.on('exit', (code) => this.fail(slot, new Error(`render worker exited with code ${code}`)));
    this.slots.push(slot);
    return slot;
  }

  private start(slot: Slot, p: Pending): void {
    slot.busy = p;
    slot.worker.ref();
    const timer = setTimeout(
      () =>
        this.finish(
          slot,
          p,
          new DocumentError(
            'render_timeout',
            `rendering took longer than ${Math.round(p.timeoutMs / 1000)} s`,
          ),
        ),
      p.timeoutMs,
    );
    const onAbort = () =>
      this.finish(slot, p, (p.signal?.reason as Error | undefined) ?? new Error('render aborted'));
    const cleanup = () => {
      clearTimeout(timer);
      p.signal?.removeEventListener('abort', onAbort);
      slot.worker.off('message', onMessage);
    };
    const onMessage = (m: WorkerReply | { ready: true }) => {
      if (!('id' in m) || m.id !== p.id) return;
      cleanup();
      if (m.ok) this.done(slot, p, m.result);
      else if (m.code) this.done(slot, p, new DocumentError(m.code, m.message));
      // Anything else is a crash inside PDFium (a WebAssembly trap): the instance may be damaged,
      // so the worker is replaced; the same bytes would crash again, so the job fails for good.
      else this.finish(slot, p, new DocumentError('render_failed', `the renderer failed: ${m.message}`));
    };
    p.cleanup = cleanup;
    slot.worker.on('message', onMessage);
    p.signal?.addEventListener('abort', onAbort, { once: true });
    slot.ready.then(
      () => {
        if (slot.busy === p) slot.worker.postMessage({ id: p.id, task: p.task });
      },
      (err: unknown) => this.finish(slot, p, new Error(`render worker failed to start: ${String(err)}`)),
    );
  }

  /** A normal completion: the worker is free again. */
  private done(slot: Slot, p: Pending, r: RenderResult | Error): void {
    slot.busy = null;
    slot.worker.unref();
    if (r instanceof Error) p.reject(r);
    else p.resolve(r);
    this.pump();
  }

  /** An abnormal end of a task: the worker is terminated and replaced on demand. */
  private finish(slot: Slot, p: Pending, err: Error): void {
    if (slot.busy !== p) return;
    p.cleanup?.();
    slot.busy = null;
    const i = this.slots.indexOf(slot);
    if (i >= 0) this.slots.splice(i, 1);
    void this.kill(slot, err);
    p.reject(err);
    this.pump();
  }

  private fail(slot: Slot, err: Error): void {
    const i = this.slots.indexOf(slot);
    if (i >= 0) this.slots.splice(i, 1);
    const p = slot.busy;
    if (p) {
      p.cleanup?.();
      slot.busy = null;
      p.reject(new Error(`render worker failed: ${err.message}`));
    }
    if (!this.closed) this.pump();
  }

  private async kill(slot: Slot, _reason: Error): Promise<void> {
    slot.worker.removeAllListeners('exit');
    slot.worker.removeAllListeners('error');
    slot.worker.on('error', () => undefined);
    await slot.worker.terminate().catch(() => undefined);
  }
}

let shared: RenderPool | null = null;

/** The process-wide pool (sized by RENDER_THREADS through configureRenderPool, else to the cores). */
export function renderPool(): RenderPool {
  shared ??= new RenderPool();
  return shared;
}

/** Sets the size of the process-wide pool; call once at start, before the first render. */
export function configureRenderPool(size: number): RenderPool {
  if (shared && shared.size === (size > 0 ? size : availableParallelism())) return shared;
  const old = shared;
  shared = new RenderPool(size);
  void old?.close();
  return shared;
}
