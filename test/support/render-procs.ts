// Render processes seen from /proc: which children of this test process run the renderer
// (src/documents/render/child.ts), their memory, and waiting (bounded) for a condition.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { eventually } from './wait.ts';

/** Pids of this process's children whose command line runs the render child. */
export function renderChildren(): number[] {
  return childrenRunning('render/child.ts');
}

/** Pids of the children of `parent` (default: this process) whose command line contains `script`. */
export function childrenRunning(script: string, parent: number | 'self' = 'self'): number[] {
  const out: number[] = [];
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${parent}/task`);
  } catch {
    return out; // the parent is gone
  }
  for (const tid of tasks) {
    let children: string;
    try {
      children = readFileSync(`/proc/${parent}/task/${tid}/children`, 'latin1');
    } catch {
      continue;
    }
    for (const pid of children.split(' ').filter(Boolean).map(Number)) {
      if (cmdline(pid).includes(script)) out.push(pid);
    }
  }
  return out;
}

export function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'latin1').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

/** CPU time a process has used so far (user + system), in clock ticks; 0 once it is gone. */
export function cpuTicks(pid: number): number {
  try {
    // Fields after the command name (which may hold spaces): state is the 1st, utime the 12th.
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return 0;
  }
}

/** True while the process exists and is not a zombie. */
export function alive(pid: number): boolean {
  if (!existsSync(`/proc/${pid}`)) return false;
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'latin1'));
  } catch {
    return false;
  }
}

/** Resident set size of this process in bytes (from /proc, as the k8s limit sees it). */
export function selfRss(): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'latin1'));
  return Number(m?.[1] ?? 0) * 1024;
}

/** Polls `cond` every 20 ms until it returns a truthy value or `ms` pass; returns the last value. */
export async function waitFor<T>(cond: () => T, ms: number): Promise<T> {
  return eventually(async () => cond(), ms, 20).catch(() => cond());
}
