// A peer daemon of a test (Kamailio, rtpengine, SIPp): started in the foreground with its own temp
// directory, its output kept (the last lines go into any error), and stopped with SIGTERM, then
// SIGKILL if it lingers. The temp directory is removed on stop and when the start fails.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export interface Daemon {
  readonly name: string;
  readonly dir: string;
  readonly child: ChildProcess;
  /** Everything it printed (stdout and stderr), line by line. */
  readonly lines: string[];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves with the first line matching `re` (already printed or still to come). */
  waitFor(re: RegExp, timeoutMs?: number): Promise<string>;
  /** The last `n` lines, for error messages. */
  tail(n?: number): string;
  /** SIGTERM, SIGKILL after `graceMs`, then the temp directory goes. Safe to call twice. */
  stop(graceMs?: number): Promise<void>;
}

/** A fresh temp directory for a peer's files, named after it. */
export function peerDir(name: string): string {
  return mkdtempSync(join(tmpdir(), `faxline-${name}-`));
}

export function startDaemon(o: {
  name: string;
  cmd: string;
  args: string[];
  /** Its temp directory (from peerDir), removed by stop(). */
  dir: string;
}): Daemon {
  // Its own process group: stop() reaches every process it forked (Kamailio's workers), and none is
  // left holding our stdout pipe, which would keep the test process from exiting.
  const child = spawn(o.cmd, o.args, { cwd: o.dir, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const lines: string[] = [];
  const waiters = new Set<{ re: RegExp; resolve: (l: string) => void }>();
  const onLine = (l: string) => {
    if (lines.length < 200_000) lines.push(l);
    for (const w of [...waiters]) {
      if (w.re.test(l)) {
        waiters.delete(w);
        w.resolve(l);
      }
    }
  };
  createInterface({ input: child.stdout! }).on('line', onLine);
  createInterface({ input: child.stderr! }).on('line', onLine);
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    void spawnError.then(() => resolve({ code: null, signal: null }));
  });
  const tail = (n = 20) => lines.slice(-n).join('\n');
  let stopping: Promise<void> | undefined;
  const daemon: Daemon = {
    name: o.name,
    dir: o.dir,
    child,
    lines,
    exited,
    tail,
    waitFor(re, timeoutMs = 15_000) {
      const hit = lines.find((l) => re.test(l));
      if (hit !== undefined) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const w = { re, resolve: (l: string) => finish(() => resolve(l)) };
        const finish = (f: () => void) => {
          clearTimeout(timer);
          waiters.delete(w);
          f();
        };
        const timer = setTimeout(
          () =>
            finish(() =>
              reject(new Error(`${o.name}: no line matching ${re} in ${timeoutMs} ms:\n${tail()}`)),
            ),
          timeoutMs,
        );
        waiters.add(w);
        void exited.then(({ code, signal }) =>
          finish(() =>
            reject(new Error(`${o.name} exited (code ${code}, signal ${signal}) before ${re}:\n${tail()}`)),
          ),
        );
      });
    },
    stop(graceMs = 5_000) {
      stopping ??= (async () => {
        const group = (signal: NodeJS.Signals) => {
          try {
            if (child.pid !== undefined) process.kill(-child.pid, signal);
          } catch {
            // the group is gone
          }
        };
        if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
          child.kill('SIGTERM');
          const killer = setTimeout(() => group('SIGKILL'), graceMs);
          await exited;
          clearTimeout(killer);
        }
        group('SIGKILL'); // whatever it forked and left behind
        rmSync(o.dir, { recursive: true, force: true });
      })();
      return stopping;
    },
  };
  return daemon;
}
