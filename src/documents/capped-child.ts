// What the PDF check sandbox (check.ts) and the render pool (render/pool.ts) share about their
// child processes: starting one with a V8 heap cap and no environment, reading its resident memory
// from /proc, letting an idle one not hold the event loop open, and killing one for good.
import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setPriority } from 'node:os';

/**
 * CPU time after which a child's task is treated as heavy: its process is moved to a low CPU
 * priority (HEAVY_NICE) for the rest of the task and kept for heavy accounts afterwards (an
 * unprivileged process cannot raise a priority again). Legitimate work stays far below it (a page renders in 10-50 ms, a normal
 * PDF checks in tens of ms), so on a busy machine the light tasks of every account keep the CPU
 * while heavy (hostile) ones take what is left.
 */
export const HEAVY_TASK_CPU_MS = 1_000;
/**
 * The nice value of a child running a heavy task: 10, not 19. Beside faxline's own light work (nice
 * 0) it gets about a tenth of the CPU, so light tasks keep it; but the host may run other nice-0
 * work too, and there nice 19 (a weight of 15 against 1,024) starved a heavy account's legitimate
 * work: a new render process of an account that had just rendered 200 covers did not finish its
 * start-up within 30 s beside three CPU-bound processes, and its fax was retried (test/broadcast.test.ts).
 * At nice 10 (a weight of 110) it gets about 7 times as much.
 */
export const HEAVY_NICE = 10;
/** Half-life of an account's recent CPU time (RecentCpu). */
const RECENT_HALF_LIFE_MS = 10_000;

/**
 * CPU time each account's tasks used recently, decaying with a 10 s half-life. An account past
 * HEAVY_TASK_CPU_MS is heavy: its next tasks go to low-priority (HEAVY_NICE) processes from their
 * start, which the pools keep for such accounts, so that a stream of tasks each under a second cannot
 * hold the CPU at normal priority, and no process is started anew for every heavy task.
 */
export class RecentCpu {
  private readonly used = new Map<string, { ms: number; at: number }>();

  private now(account: string, at: number): number {
    const e = this.used.get(account);
    return e ? e.ms * 2 ** (-(at - e.at) / RECENT_HALF_LIFE_MS) : 0;
  }

  add(account: string, ms: number, at = performance.now()): void {
    if (!(ms > 0)) return;
    if (this.used.size >= 10_000 && !this.used.has(account)) this.used.clear();
    // A task past the line counts as at least twice the line, so its account stays heavy for at
    // least one half-life however the task ended. On a busy machine the wall-clock limit can end a
    // low-priority task just past the line; counted as it was, the account would be light again
    // within a second and its next task, waiting for the killed process to exit, would start at the
    // normal priority (CI of stop 39, test/fair-share.test.ts).
    const counted = ms > HEAVY_TASK_CPU_MS ? Math.max(ms, 2 * HEAVY_TASK_CPU_MS) : ms;
    this.used.set(account, { ms: this.now(account, at) + counted, at });
  }

  heavy(account: string, at = performance.now()): boolean {
    return this.now(account, at) > HEAVY_TASK_CPU_MS;
  }
}

/** Lowers a child's CPU priority to HEAVY_NICE; false where that is not possible. */
export function deprioritize(p: ChildProcess): boolean {
  if (!p.pid) return false;
  try {
    setPriority(p.pid, HEAVY_NICE);
    return true;
  } catch {
    return false;
  }
}

/**
 * Starts `module` as a child process with IPC ('advanced' serialization, so typed arrays cross as
 * bytes), a V8 old-space cap of `heapMb`, stderr piped (kept by the caller for crash reasons) and an
 * empty environment: the child needs nothing from ours and gets no secrets.
 */
export function forkCapped(module: URL, heapMb: number): ChildProcess {
  return fork(module, [], {
    execArgv: [`--max-old-space-size=${heapMb}`, '--max-semi-space-size=16'],
    serialization: 'advanced',
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    env: {},
  });
}

/** A started capped child and what its pool needs to know of it. */
export interface CappedChild {
  proc: ChildProcess;
  /** Resolves when the child says it is ready; rejects when it exits before that. */
  ready: Promise<void>;
  started: boolean;
  /** Resident set size once ready: the base against which a task's growth is judged. */
  baseRss: number;
  /** The last 2,000 characters of its stderr (the reason of a crash). */
  stderr: string;
  /** Running at low CPU priority: kept for heavy accounts' tasks (RecentCpu). */
  niced: boolean;
}

/**
 * Forks `module` capped (forkCapped) and tracks its start-up: `ready` settles on the child's
 * `{ ready: true }` message or on its exit; `onExit` runs when it exits, whenever that is. `what`
 * names the child in the error of a failed start.
 */
export function startCapped(module: URL, heapMb: number, what: string, onExit: () => void): CappedChild {
  const proc = forkCapped(module, heapMb);
  const child: CappedChild = {
    proc,
    ready: Promise.resolve(),
    started: false,
    baseRss: 0,
    stderr: '',
    niced: false,
  };
  proc.stderr?.on('data', (c: Buffer) => {
    child.stderr = (child.stderr + c.toString('utf8')).slice(-2000);
  });
  child.ready = new Promise<void>((resolve, reject) => {
    const onMsg = (m: unknown) => {
      if ((m as { ready?: boolean })?.ready) {
        proc.off('message', onMsg);
        child.started = true;
        child.baseRss = rssBytes(proc.pid);
        resolve();
      }
    };
    proc.on('message', onMsg);
    proc.once('exit', () => reject(new Error(`${what} exited while starting: ${child.stderr}`)));
  });
  child.ready.catch(() => undefined);
  proc.once('exit', onExit);
  proc.on('error', () => undefined);
  return child;
}

/** Resident set size of a process from /proc (Linux); 0 where that is not available. */
export function rssBytes(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/**
 * CPU time (user + system) a process has used, in milliseconds, from /proc (Linux counts it in
 * ticks of 10 ms); null where that is not available.
 */
export function cpuMs(pid: number | undefined): number | null {
  if (!pid) return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    // Fields after the command name (which may hold spaces): state is [0], utime [11], stime [12].
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return null;
  }
}

/** An idle child (and its IPC channel) does not keep this process alive. */
export function idle(p: ChildProcess): void {
  p.unref();
  (p.channel as { unref?: () => void } | undefined)?.unref?.();
}

/** A busy child keeps this process alive until its answer arrives. */
export function busy(p: ChildProcess): void {
  p.ref();
  (p.channel as { ref?: () => void } | undefined)?.ref?.();
}

/** SIGKILLs a child and resolves once its exit is seen (at once if it is already gone). */
export function killChild(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  busy(p); // keep the event loop alive until the exit is seen
  return new Promise((resolve) => {
    p.once('exit', () => resolve());
    p.kill('SIGKILL');
  });
}

/** True when a child's stderr shows V8 gave up on its heap cap. */
export function diedOfHeap(stderr: string): boolean {
  return /heap limit|out of memory|allocation failed/i.test(stderr);
}
