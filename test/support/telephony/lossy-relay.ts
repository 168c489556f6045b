// A lossy UDP relay between two media endpoints, A and B, for the packet-loss tests: it holds two
// sockets, `forA` (the address A is told B is at) and `forB` (the address B is told A is at). A
// datagram arriving on forA goes to B from forB, one arriving on forB goes to A from forA, so each
// side sees its peer at a consistent address. A seeded generator drops `lossRate` of the datagrams
// in each direction (the same seed drops the same packets), and counts what it forwarded and dropped.
import { createSocket, type Socket } from 'node:dgram';
import { portBlock } from './ports.ts';

export interface Endpoint {
  address: string;
  port: number;
}

export interface RelayCounts {
  forwarded: number;
  dropped: number;
}

export interface LossyRelay {
  /** Port A must send to (written into the SDP A sees as B's media port). */
  forA: number;
  /** Port B must send to. */
  forB: number;
  /** `held`: datagrams held by `holdUp`, over `holds` hold-ups. */
  counts: { aToB: RelayCounts; bToA: RelayCounts; held: number; holds: number };
  close(): Promise<void>;
}

/** mulberry32: a small, fast 32-bit PRNG; a seed gives a repeatable sequence in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface LossyRelayOptions {
  a: Endpoint;
  b: Endpoint;
  /** Fraction of datagrams dropped in each direction, e.g. 0.02. */
  lossRate: number;
  seed: number;
  /** Ports for forA and forB; by default two free media ports. */
  ports?: [number, number];
  /** Which datagrams may be dropped (e.g. only UDPTL): the others are always forwarded. */
  droppable?: (msg: Buffer) => boolean;
  /**
   * A path that stalls without losing anything (a busy host, a congested uplink): every `everyMs`,
   * each datagram in either direction is held for `holdMs`, then what was held goes on, in order.
   */
  holdUp?: { everyMs: number; holdMs: number };
}

export async function startLossyRelay(o: LossyRelayOptions): Promise<LossyRelay> {
  if (!(o.lossRate >= 0 && o.lossRate < 1)) throw new Error(`lossRate must be in [0, 1): ${o.lossRate}`);
  const [pa, pb] = o.ports ?? [await portBlock('media'), await portBlock('media')];
  const forA = createSocket('udp4');
  const forB = createSocket('udp4');
  const randomAB = seededRandom(o.seed);
  const randomBA = seededRandom(o.seed ^ 0x5bd1e995);
  const counts = {
    aToB: { forwarded: 0, dropped: 0 },
    bToA: { forwarded: 0, dropped: 0 },
    held: 0,
    holds: 0,
  };
  let held: (() => void)[] | null = null;
  const timers: NodeJS.Timeout[] = [];
  if (o.holdUp) {
    const { everyMs, holdMs } = o.holdUp;
    timers.push(
      setInterval(() => {
        held = [];
        counts.holds++;
        timers.push(
          setTimeout(() => {
            const go = held ?? [];
            held = null;
            for (const send of go) send();
          }, holdMs),
        );
      }, everyMs),
    );
  }
  const wire = (from: Socket, to: Socket, dest: Endpoint, c: RelayCounts, random: () => number) =>
    from.on('message', (msg) => {
      // One draw per datagram, droppable or not, so the drop pattern depends on the seed alone.
      const r = random();
      if (r < o.lossRate && (o.droppable?.(msg) ?? true)) {
        c.dropped++;
        return;
      }
      c.forwarded++;
      const send = () => to.send(msg, dest.port, dest.address);
      if (held) {
        counts.held++;
        held.push(send);
      } else send();
    });
  wire(forA, forB, o.b, counts.aToB, randomAB);
  wire(forB, forA, o.a, counts.bToA, randomBA);
  const bind = (s: Socket, port: number) =>
    new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.bind(port, '127.0.0.1', () => {
        s.off('error', reject);
        resolve();
      });
    });
  await bind(forA, pa);
  await bind(forB, pb);
  return {
    forA: pa,
    forB: pb,
    counts,
    close: async () => {
      for (const t of timers) clearTimeout(t);
      await Promise.all([forA, forB].map((s) => new Promise<void>((r) => s.close(() => r()))));
    },
  };
}
