// SIPp (Debian's sip-tester) as a scripted SIP peer of a test: one scenario file from
// test/fixtures/sipp/, on a private loopback port, for a bounded number of calls and a bounded time.
// `startSipp` returns at once (a UAS waiting for calls, or a UAC placing them); `finished` resolves
// with its exit status (0: every call followed the scenario) and the unexpected messages it logged.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { peerDir, startDaemon, type Daemon } from './daemon.ts';
import { portBlock, sipPort } from './ports.ts';
import { requireTool } from './tools.ts';

export const SIPP_SCENARIOS = new URL('../../fixtures/sipp/', import.meta.url).pathname;

export interface SippOptions {
  /** Scenario file name in test/fixtures/sipp/ (this helper's are `proxy-*.xml`). */
  scenario: string;
  /** `host:port` to send to (a UAC's first request); omitted for a UAS. */
  remote?: string;
  /** Calls to place or answer before exiting (-m). */
  calls?: number;
  /** Simultaneous calls (-l) for a UAC. */
  limit?: number;
  /** Request-URI user (-s), e.g. the dialled number. */
  service?: string;
  /** Digest credentials for [authentication] (-au/-ap). */
  auth?: { username: string; password: string };
  /** Scenario variables (-key name value), used in the XML as [name]. */
  keys?: Record<string, string>;
  /** The whole run's limit in seconds (-timeout, an error when reached). */
  timeoutSeconds?: number;
  transport?: 'udp' | 'tcp';
}

export interface Sipp {
  port: number;
  /** Its media port (-mp), written into its SDP as [media_port]. */
  mediaPort: number;
  daemon: Daemon;
  /** Exit status and the unexpected messages (its error log), once it exits. */
  finished: Promise<{ code: number | null; errors: string }>;
  stop(): Promise<void>;
}

export async function startSipp(o: SippOptions): Promise<Sipp> {
  const bin = requireTool('sipp');
  const scenario = join(SIPP_SCENARIOS, o.scenario);
  if (!existsSync(scenario)) throw new Error(`sipp: no scenario ${scenario}`);
  const port = await sipPort();
  // SIPp binds its audio port (-mp), the next one, and the one after it for video (mp + 2): a port
  // of that block handed to another test made SIPp exit at start ("Unable to bind video RTP socket",
  // exit 254; CI of 2026-12-07, when only two ports were claimed).
  const mediaPort = await portBlock('media', 4, { align: 4 });
  const dir = peerDir('sipp');
  const errorFile = join(dir, 'errors.log');
  const args = [
    '-sf',
    scenario,
    '-i',
    '127.0.0.1',
    '-p',
    String(port),
    '-mp',
    String(mediaPort),
    '-m',
    String(o.calls ?? 1),
    '-nostdin',
    '-timeout',
    `${o.timeoutSeconds ?? 60}s`,
    '-timeout_error',
    '-trace_err',
    '-error_file',
    errorFile,
    '-t',
    o.transport === 'tcp' ? 't1' : 'u1',
    ...(o.limit ? ['-l', String(o.limit)] : []),
    ...(o.service ? ['-s', o.service] : []),
    ...(o.auth ? ['-au', o.auth.username, '-ap', o.auth.password] : []),
    ...Object.entries(o.keys ?? {}).flatMap(([k, v]) => ['-key', k, v]),
    ...(o.remote ? [o.remote] : []),
  ];
  const daemon = startDaemon({ name: `sipp ${o.scenario}`, cmd: bin, dir, args });
  const finished = daemon.exited.then(({ code }) => ({
    code,
    errors: existsSync(errorFile) ? readFileSync(errorFile, 'utf8') : '',
  }));
  // A UAS is ready once its socket is bound; SIPp prints nothing useful until then: probe the port.
  try {
    await waitBound(port, o.transport === 'tcp', daemon);
  } catch (err) {
    await daemon.stop();
    // SIPp says why it stopped in its error log, not on the screen the daemon's tail shows.
    const errors = existsSync(errorFile) ? readFileSync(errorFile, 'utf8').trim() : '';
    if (errors && err instanceof Error) err.message += `\nits error log:\n${errors}`;
    throw err;
  }
  return { port, mediaPort, daemon, finished, stop: () => daemon.stop() };
}

/**
 * Whether a socket is bound to `port` (UDP) or listens on it (TCP), read from the kernel's tables
 * (/proc/net/udp, tcp and their IPv6 twins). Not by binding the port to see whether that fails: such
 * a probe holds the port for a moment, and SIPp starting in that moment failed with "Unable to bind
 * main socket, errno = 98" (CI of 2026-12-07, loaded).
 */
function taken(port: number, tcp: boolean): boolean {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  for (const table of tcp ? ['tcp', 'tcp6'] : ['udp', 'udp6']) {
    let text: string;
    try {
      text = readFileSync(`/proc/net/${table}`, 'latin1');
    } catch {
      continue; // no IPv6 on this machine
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      // local_address is field 1 (ADDR:PORT in hex), the state field 3 (0A: listening, for TCP).
      if (f[1]?.endsWith(hex) && (!tcp || f[3] === '0A')) return true;
    }
  }
  return false;
}

/**
 * Waits (bounded: 5 s) until something holds `port`, i.e. SIPp has bound it. A SIPp that has already
 * exited 0 bound it and finished its calls, all successful: a caller with one short call can be done
 * between two probes (CI of 2026-12-07 under CI_LOAD=2: "did not bind" with exit 0 and 1 successful
 * call); its result is in `finished`, as for any other run.
 */
async function waitBound(port: number, tcp: boolean, daemon: Daemon): Promise<void> {
  for (let i = 0; i < 50; i++) {
    if (daemon.child.exitCode === 0) return;
    if (daemon.child.exitCode !== null) break;
    if (taken(port, tcp)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  const { code } = await Promise.race([daemon.exited, Promise.resolve({ code: 'running' })]);
  throw new Error(`sipp did not bind ${port} (exit ${code}):\n${daemon.tail()}`);
}
