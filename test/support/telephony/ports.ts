// Loopback ports for the telephony peers, from ranges the SIP tests own: SIP 21000-21499, rtpengine's
// ng control 22222-22299, faxline's own RTP/UDPTL ports 23000-23999 (RTP_PORTS of our user agents,
// bound by the engine itself), and the peers' media 32000-32499 (rtpengine's relay ports, the lossy
// relay, SIPp). All lie below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999
// by default): a port there can be taken at any moment by a client connection of another test (to
// PostgreSQL, RabbitMQ, the API) or by a server a cluster test binds to a kernel-chosen port, and a
// SIP listener then failed with EADDRINUSE (CI of 2026-12-07, on 37168). The private RabbitMQ nodes
// keep out of these ranges (test/support/private-rabbit.ts).
//
// A port is handed out only after claiming it machine-wide (a file named after it in
// $TMPDIR/faxline-test-ports, holding the claiming process's pid, created exclusively) and binding it
// (UDP, and TCP for SIP) showed it free: test files and the SIP suite run at once, each in its own
// processes, and a probe alone cannot stop two of them from choosing the same free port before
// either binds it. A claim ends with its process (the files are removed at exit; one left by a
// killed process is taken over once its pid is gone).
import { createSocket } from 'node:dgram';
import { mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pidAlive } from '../../../src/pid.ts';

export const RANGES = {
  sip: [21000, 21499],
  media: [32000, 32499],
  rtp: [23000, 23999],
  ng: [22222, 22299],
} as const;

const claimDir = join(tmpdir(), 'faxline-test-ports');
const claimed = new Set<number>();
process.once('exit', () => {
  for (const port of claimed) unclaim(port);
});

/** Claims `port` for this process, machine-wide: false when another living process holds it. */
function claim(port: number): boolean {
  mkdirSync(claimDir, { recursive: true });
  const file = join(claimDir, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' });
      claimed.add(port);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let holder: number;
    try {
      holder = Number(readFileSync(file, 'utf8'));
    } catch {
      continue; // removed meanwhile: try again
    }
    // A claim being written is empty for a moment (NaN): treated as held.
    if (!Number.isInteger(holder) || holder <= 0 || pidAlive(holder)) return false;
    try {
      unlinkSync(file); // its process is gone
    } catch {
      // another process took it over first
    }
  }
  return false;
}

function unclaim(port: number): void {
  claimed.delete(port);
  try {
    unlinkSync(join(claimDir, String(port)));
  } catch {
    // already gone
  }
}

const handedOut = new Set<number>();

function udpFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    s.once('error', () => resolve(false));
    s.bind(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

function tcpFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

async function free(port: number, tcp: boolean): Promise<boolean> {
  if (handedOut.has(port) || !claim(port)) return false;
  if ((await udpFree(port)) && (!tcp || (await tcpFree(port)))) return true;
  unclaim(port);
  return false;
}

/**
 * `count` consecutive free ports starting at a multiple of `align` in `range` (a random start, so
 * parallel test processes of other worktrees seldom try the same ones). TCP too when `tcp`.
 */
export async function portBlock(
  range: keyof typeof RANGES,
  count = 1,
  opts: { align?: number; tcp?: boolean } = {},
): Promise<number> {
  const [min, max] = RANGES[range];
  const align = opts.align ?? 1;
  const starts: number[] = [];
  for (let p = Math.ceil(min / align) * align; p + count - 1 <= max; p += align) starts.push(p);
  // Bounded: each candidate start is tried once, in a random order.
  for (let i = starts.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [starts[i], starts[j]] = [starts[j]!, starts[i]!];
  }
  for (const start of starts) {
    let ok = true;
    let p = start;
    for (; p < start + count && ok; p++) ok = await free(p, opts.tcp ?? false);
    if (!ok) {
      // The ports of this block claimed before the one that was not free go back.
      for (let q = start; q < p - 1; q++) unclaim(q);
      continue;
    }
    for (let p = start; p < start + count; p++) handedOut.add(p);
    return start;
  }
  throw new Error(`no ${count} free consecutive ${range} ports in ${min}-${max}`);
}

/** One free SIP port (UDP and TCP). */
export const sipPort = (): Promise<number> => portBlock('sip', 1, { tcp: true });

/** Gives ports back once their peer is gone (for long test files). */
export function releasePorts(start: number, count = 1): void {
  for (let p = start; p < start + count; p++) {
    handedOut.delete(p);
    unclaim(p);
  }
}
