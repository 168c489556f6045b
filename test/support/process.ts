// Runs a faxline entry point as a real OS process, and reads its JSON log lines.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { SCALE } from './wait.ts';
import { withTestKek } from './kek.ts';

export interface Proc {
  child: ChildProcess;
  lines: string[];
  /**
   * Resolves with the first log line matching `re`, within `timeoutMs` (60 s unless given: the
   * machine sets the pace of a start-up; times FAXLINE_TEST_WAIT_SCALE, as every wait).
   */
  waitFor(re: RegExp, timeoutMs?: number): Promise<string>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** `nodeFlags` go before the entry (e.g. `--heapsnapshot-signal=SIGUSR2`), `args` after it. */
export function startProcess(
  entry: string,
  env: Record<string, string>,
  nodeFlags: string[] = [],
  args: string[] = [],
): Proc {
  const child = spawn(process.execPath, [...nodeFlags, entry, ...args], {
    // Encryption on with the database's test key, as startService does (support/kek.ts).
    env: withTestKek({ ...process.env, ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const waiters: { re: RegExp; resolve: (l: string) => void }[] = [];
  const onLine = (l: string) => {
    lines.push(l);
    for (const w of [...waiters]) {
      if (w.re.test(l)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(l);
      }
    }
  };
  createInterface({ input: child.stdout! }).on('line', onLine);
  createInterface({ input: child.stderr! }).on('line', onLine);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    lines,
    exited,
    waitFor: (re, timeoutMs = 60_000) => {
      timeoutMs *= SCALE;
      const hit = lines.find((l) => re.test(l));
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const t = setTimeout(
          () =>
            reject(
              new Error(
                `no log line matching ${re} within ${timeoutMs} ms; last: ${lines.slice(-5).join('\n')}`,
              ),
            ),
          timeoutMs,
        );
        waiters.push({
          re,
          resolve: (l) => {
            clearTimeout(t);
            resolve(l);
          },
        });
      });
    },
  };
}
