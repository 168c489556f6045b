// Peak resident memory of a set of processes and of all their descendants, read from /proc (Linux).
// Each root is a service process with a role (api, send1, ...); its descendants (the PDF check's
// sandbox children, render children, anything they start) are found by walking the parent links of
// every /proc/<pid>/stat, since /proc/<pid>/task/*/children is not available on every kernel.
// A child is named by the script it runs (`sandbox/child` for src/documents/sandbox/child.ts) or,
// without one, by its executable.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';

export interface RssPeaks {
  /** Per role (`api`, `api>sandbox/child`, ...): highest RSS of any one process of that kind, MiB. */
  perKind: Record<string, { peakMb: number; pids: number; maxAtOnce: number }>;
  /** Per root role: highest sum over the root and all its descendants at one sample, MiB. */
  perPod: Record<string, { peakMb: number; atS: number }>;
  samples: number;
}

interface ProcStat {
  ppid: number;
  rssBytes: number;
  start: string; // start time in clock ticks: with the pid, identifies a process across samples
}

const PAGE = (() => {
  try {
    return Number(execFileSync('getconf', ['PAGESIZE']).toString().trim()) || 4096;
  } catch {
    return 4096;
  }
})();

function readStat(pid: number): ProcStat | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'latin1');
    // The command name (field 2) is in parentheses and may hold spaces: fields follow the last ')'.
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    // f[0] is field 3 (state); ppid is field 4, starttime field 22, rss (pages) field 24.
    return { ppid: Number(f[1]), start: f[19]!, rssBytes: Number(f[21]) * PAGE };
  } catch {
    return null; // gone between the listing and the read
  }
}

function kindOf(pid: number): string {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    const script = argv.slice(1).find((a) => /\.(?:ts|js|mjs|cjs)$/.test(a));
    if (script) {
      const parts = script.replace(/\.(?:ts|js|mjs|cjs)$/, '').split('/');
      return parts.slice(-2).join('/');
    }
    return basename(argv[0] ?? `pid-${pid}`);
  } catch {
    return `pid-${pid}`;
  }
}

export class RssSampler {
  private readonly roots = new Map<number, string>();
  private readonly kinds = new Map<string, string>(); // `${pid}:${start}` -> kind of a descendant
  private readonly perKind = new Map<string, { peak: number; pids: Set<string>; maxAtOnce: number }>();
  private readonly perPod = new Map<string, { peak: number; atS: number }>();
  private readonly t0 = Date.now();
  private timer: NodeJS.Timeout | null = null;
  private count = 0;
  /** Highest RSS of any single process at the last sample, and its role. */
  last = { maxMb: 0, role: '', pid: 0, podMb: {} as Record<string, number> };

  addRoot(pid: number, role: string): void {
    this.roots.set(pid, role);
  }

  start(everyMs: number, onSample?: (s: RssSampler) => void): void {
    this.timer = setInterval(() => {
      this.sample();
      onSample?.(this);
    }, everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  sample(): void {
    const stats = new Map<number, ProcStat>();
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      const st = readStat(Number(name));
      if (st) stats.set(Number(name), st);
    }
    const children = new Map<number, number[]>();
    for (const [pid, st] of stats) {
      const list = children.get(st.ppid);
      if (list) list.push(pid);
      else children.set(st.ppid, [pid]);
    }
    const atOnce = new Map<string, number>();
    const t = (Date.now() - this.t0) / 1000;
    let maxMb = 0;
    let maxRole = '';
    let maxPid = 0;
    const podMb: Record<string, number> = {};
    for (const [rootPid, role] of this.roots) {
      const rootStat = stats.get(rootPid);
      if (!rootStat) continue; // exited
      let pod = 0;
      // Breadth-first over the descendants; bounded by the number of processes on the machine.
      const queue: [number, string][] = [[rootPid, role]];
      for (let i = 0; i < queue.length && i < stats.size; i++) {
        const [pid, kind] = queue[i]!;
        const st = stats.get(pid)!;
        pod += st.rssBytes;
        const mbNow = st.rssBytes / 1048576;
        if (mbNow > maxMb) {
          maxMb = mbNow;
          maxRole = kind;
          maxPid = pid;
        }
        const k = this.perKind.get(kind) ?? { peak: 0, pids: new Set<string>(), maxAtOnce: 0 };
        k.peak = Math.max(k.peak, mbNow);
        k.pids.add(`${pid}:${st.start}`);
        this.perKind.set(kind, k);
        atOnce.set(kind, (atOnce.get(kind) ?? 0) + 1);
        for (const c of children.get(pid) ?? []) {
          const key = `${c}:${stats.get(c)!.start}`;
          let ck = this.kinds.get(key);
          if (!ck) {
            ck = `${role}>${kindOf(c)}`;
            this.kinds.set(key, ck);
          }
          queue.push([c, ck]);
        }
      }
      const podNow = pod / 1048576;
      podMb[role] = podNow;
      const p = this.perPod.get(role) ?? { peak: 0, atS: 0 };
      if (podNow > p.peak) {
        p.peak = podNow;
        p.atS = t;
      }
      this.perPod.set(role, p);
    }
    for (const [kind, n] of atOnce) {
      const k = this.perKind.get(kind)!;
      k.maxAtOnce = Math.max(k.maxAtOnce, n);
    }
    this.count++;
    this.last = { maxMb, role: maxRole, pid: maxPid, podMb };
  }

  peaks(): RssPeaks {
    const r1 = (x: number) => Math.round(x * 10) / 10;
    return {
      perKind: Object.fromEntries(
        [...this.perKind].map(([k, v]) => [
          k,
          { peakMb: r1(v.peak), pids: v.pids.size, maxAtOnce: v.maxAtOnce },
        ]),
      ),
      perPod: Object.fromEntries(
        [...this.perPod].map(([k, v]) => [k, { peakMb: r1(v.peak), atS: r1(v.atS) }]),
      ),
      samples: this.count,
    };
  }
}
