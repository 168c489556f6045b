// Loopback ports for the telephony peers, from the ranges the SIP tests own: SIP 35500-35999, media
// 32000-32999 (the peers' half 32000-32499: rtpengine's relay ports, the lossy relay, SIPp; faxline's
// own half 32500-32999: RTP_PORTS of our user agents, bound by the engine itself), rtpengine's ng
// control 22222-22299. A port is
// handed out once per test process and only after binding it (UDP, and TCP for SIP) showed it free,
// so two peers of one test never collide and a port held by something else is passed over.
import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';

export const RANGES = {
  sip: [35500, 35999],
  media: [32000, 32499],
  rtp: [32500, 32999],
  ng: [22222, 22299],
} as const;

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
  return !handedOut.has(port) && (await udpFree(port)) && (!tcp || (await tcpFree(port)));
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
    for (let p = start; p < start + count && ok; p++) ok = await free(p, opts.tcp ?? false);
    if (!ok) continue;
    for (let p = start; p < start + count; p++) handedOut.add(p);
    return start;
  }
  throw new Error(`no ${count} free consecutive ${range} ports in ${min}-${max}`);
}

/** One free SIP port (UDP and TCP). */
export const sipPort = (): Promise<number> => portBlock('sip', 1, { tcp: true });

/** Gives ports back once their peer is gone (for long test files). */
export function releasePorts(start: number, count = 1): void {
  for (let p = start; p < start + count; p++) handedOut.delete(p);
}
