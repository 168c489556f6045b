// CPU seconds per test file, for the file-times reporter (test/support/file-times.ts): each test
// process (loaded through bounds.ts) writes, as it exits, the CPU time it used and the CPU time of
// the children it started and reaped (services, render and sandbox children, Kamailio, SIPp...,
// with their own reaped children), into the directory FAXLINE_TEST_CPU_DIR, which the reporter sets
// in the runner as it loads (the runner starts the test processes later, with its environment),
// reads after the run and removes. Without the reporter, nothing is written. On a shared machine, wall times say
// little; CPU seconds say what a file costs, and their sum over cores is the least a run can take.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/** Called by the reporter as it loads, in the runner: where the test processes leave their CPU times. */
export function announceCpuDir(): string {
  const dir = join(tmpdir(), `faxline-test-cpu-${process.pid}`);
  process.env.FAXLINE_TEST_CPU_DIR = dir;
  return dir;
}

/** Linux's clock tick for /proc/<pid>/stat times (USER_HZ: 100 on every Linux build Node runs on). */
const USER_HZ = 100;

/** CPU seconds of this process's reaped children (and theirs), from /proc; 0 where there is no /proc. */
function childrenCpuSeconds(): number {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    // Fields after the command name (which may hold spaces) in parentheses: the 14th and 15th of
    // these are cutime and cstime (fields 16 and 17 of proc(5)).
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[13]) + Number(rest[14])) / USER_HZ;
  } catch {
    return 0;
  }
}

/** Called once, as a test process exits: records its file's CPU seconds for the reporter. */
export function recordCpuAtExit(): void {
  const file = process.argv[1];
  const dir = process.env.FAXLINE_TEST_CPU_DIR;
  if (!file || !dir) return;
  process.on('exit', () => {
    try {
      const own = process.cpuUsage();
      const record = {
        file: resolve(file),
        own: (own.user + own.system) / 1e6,
        children: childrenCpuSeconds(),
      };
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, `${process.pid}.json`), JSON.stringify(record));
    } catch {
      // Accounting only: never the reason a test file fails.
    }
  });
}

export interface FileCpu {
  own: number;
  children: number;
}

/** Reads (and removes) what the test processes of this runner recorded: CPU seconds by file. */
export function collectCpu(dir: string): Map<string, FileCpu> {
  const byFile = new Map<string, FileCpu>();
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return byFile;
  }
  for (const name of names) {
    try {
      const r = JSON.parse(readFileSync(join(dir, name), 'utf8')) as { file: string } & FileCpu;
      const prev = byFile.get(r.file) ?? { own: 0, children: 0 };
      byFile.set(r.file, { own: prev.own + r.own, children: prev.children + r.children });
    } catch {
      // A record half written by a process killed as it exited: that file shows no CPU time.
    }
  }
  rmSync(dir, { recursive: true, force: true });
  return byFile;
}
