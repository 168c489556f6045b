// A lossy UDP relay between two media endpoints, A and B, for the packet-loss tests: it holds two
// sockets, `forA` (the address A is told B is at) and `forB` (the address B is told A is at). A
// datagram arriving on forA goes to B from forB, one arriving on forB goes to A from forA, so each
// side sees its peer at a consistent address. A seeded generator drops `lossRate` of the datagrams
// in each direction (the same seed drops the same packets), and counts what it forwarded and dropped.
// With `holdUp` it also stalls: it holds some datagrams back and lets them go late, in a burst.
import { execFile, spawn } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
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

export interface LossyRelayProcess extends LossyRelay {
  /** Whether the relay's process got real-time priority (SCHED_FIFO 10, as the media threads). */
  realtime: boolean;
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
   * A path that stalls without losing anything (a busy host, a congested uplink): in each direction,
   * of every `every` datagrams the last `hold` are held and go on, in order, with the next one. On
   * audio (one packet every 20 ms) the first held packet comes `hold` x 20 ms late. Counted in
   * packets, not timed, so a late timer of this relay's own does not lengthen a hold.
   */
  holdUp?: { every: number; hold: number };
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
  const wire = (from: Socket, to: Socket, dest: Endpoint, c: RelayCounts, random: () => number) => {
    let seen = 0;
    const held: Buffer[] = [];
    from.on('message', (msg) => {
      // One draw per datagram, droppable or not, so the drop pattern depends on the seed alone.
      const r = random();
      if (r < o.lossRate && (o.droppable?.(msg) ?? true)) {
        c.dropped++;
        return;
      }
      c.forwarded++;
      const h = o.holdUp;
      // The last `hold` of each `every` (not the first: a buffer that starts on a held packet would
      // play everything that much later, and no later hold would show).
      if (h && seen++ % h.every >= h.every - h.hold) {
        if (held.length === 0) counts.holds++;
        counts.held++;
        held.push(msg);
        return;
      }
      for (const m of held.splice(0)) to.send(m, dest.port, dest.address);
      to.send(msg, dest.port, dest.address);
    });
  };
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
      await Promise.all([forA, forB].map((s) => new Promise<void>((r) => s.close(() => r()))));
    },
  };
}

/**
 * The same relay in a process of its own, raised to real-time priority (SCHED_FIFO 10, the
 * priority of faxline's media threads) where the test may do so (CAP_SYS_NICE; else it runs at the
 * normal priority and `realtime` says so). For paths whose timing is the test: in the test's own
 * process the relay shares an event loop with the test's work (tiffcmp, SIP, other calls' callbacks),
 * and under load it added delays of its own on top of `holdUp`'s (CI_LOAD=2, 2026-12-07: a G.711
 * page broken off by one packet that came after its turn). `counts` are filled in by close().
 */
export async function startLossyRelayProcess(
  o: Omit<LossyRelayOptions, 'droppable'>,
): Promise<LossyRelayProcess> {
  const ports = o.ports ?? [await portBlock('media'), await portBlock('media')];
  const child = spawn(
    process.execPath,
    [fileURLToPath(new URL('./lossy-relay-child.ts', import.meta.url)), JSON.stringify({ ...o, ports })],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
  const exited = new Promise<string>((resolve) =>
    child.once('exit', (code, signal) => resolve(`exited (${signal ?? code})`)),
  );
  const message = <T>(pick: (m: unknown) => T | undefined): Promise<T> =>
    new Promise((resolve, reject) => {
      const on = (m: unknown) => {
        const v = pick(m);
        if (v === undefined) return;
        child.off('message', on);
        resolve(v);
      };
      child.on('message', on);
      void exited.then((how) => reject(new Error(`the lossy relay process ${how} before it answered`)));
    });
  await message((m) => ((m as { ready?: boolean }).ready ? true : undefined));
  const realtime = await promisify(execFile)('chrt', ['-a', '-f', '-p', '10', String(child.pid)]).then(
    () => true,
    () => false,
  );
  const counts = {
    aToB: { forwarded: 0, dropped: 0 },
    bToA: { forwarded: 0, dropped: 0 },
    held: 0,
    holds: 0,
  };
  let closing: Promise<void> | undefined;
  return {
    forA: ports[0],
    forB: ports[1],
    counts,
    realtime,
    close: () =>
      (closing ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error('the lossy relay process died');
        const final = message((m) => (m as { counts?: LossyRelay['counts'] }).counts);
        child.send({ close: true });
        const kill = setTimeout(() => child.kill('SIGKILL'), 10_000);
        try {
          Object.assign(counts, await final);
        } finally {
          clearTimeout(kill);
        }
      })()),
  };
}
