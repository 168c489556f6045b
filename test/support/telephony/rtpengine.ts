// rtpengine as the media relay of a test, in user space (no kernel module: --table=-1), on loopback
// with its own block of relay ports and its own ng control port, and a small ng client: each command
// is `<cookie> <bencoded dictionary>` over UDP, answered with the same cookie. Its T.38 gateway
// (SpanDSP's, with rtpengine's own UDPTL) turns an audio leg into T.38 with the offer flag
// `"T.38": ["force"]`, and a T.38 leg into audio with `["decode"]`.
import { randomBytes } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { bdecode, bencode, type BValue } from './bencode.ts';
import { peerDir, startDaemon, type Daemon } from './daemon.ts';
import { portBlock } from './ports.ts';
import { requireTool } from './tools.ts';

export type NgReply = { result: string; [key: string]: BValue };

export interface NgClient {
  /** Sends one command (`{command: 'offer', ...}`) and resolves with the reply dictionary. */
  command(c: { command: string; [key: string]: BValue }, timeoutMs?: number): Promise<NgReply>;
  close(): void;
}

/** An ng client on a fresh UDP socket; retries a command twice (UDP) before giving up. */
export function ngClient(port: number, host = '127.0.0.1'): NgClient {
  const sock: Socket = createSocket('udp4');
  sock.unref();
  const pending = new Map<string, (r: NgReply | Error) => void>();
  sock.on('message', (msg) => {
    const space = msg.indexOf(0x20);
    if (space < 0) return;
    const cookie = msg.toString('latin1', 0, space);
    const done = pending.get(cookie);
    if (!done) return;
    pending.delete(cookie);
    try {
      const v = bdecode(msg.subarray(space + 1));
      if (typeof v !== 'object' || Array.isArray(v) || typeof v.result !== 'string')
        throw new Error('no result in the dictionary');
      done(v as NgReply);
    } catch (err) {
      done(new Error(`rtpengine ng: a bad reply (${(err as Error).message}): ${msg.toString()}`));
    }
  });
  return {
    command(c, timeoutMs = 2_000) {
      const cookie = randomBytes(6).toString('hex');
      const packet = Buffer.concat([Buffer.from(`${cookie} `), bencode(c)]);
      return new Promise<NgReply>((resolve, reject) => {
        let tries = 0;
        const send = () => {
          if (++tries > 3) {
            pending.delete(cookie);
            reject(new Error(`rtpengine ng ${c.command}: no reply from ${host}:${port} after 3 tries`));
            return;
          }
          sock.send(packet, port, host);
          timer = setTimeout(send, timeoutMs);
        };
        let timer: NodeJS.Timeout | undefined;
        pending.set(cookie, (r) => {
          clearTimeout(timer);
          if (r instanceof Error) reject(r);
          else resolve(r);
        });
        send();
      });
    },
    close: () => sock.close(),
  };
}

export interface Rtpengine {
  ngPort: number;
  /** Its relay ports: [min, max]. */
  ports: [number, number];
  daemon: Daemon;
  ng: NgClient;
  stop(): Promise<void>;
}

/** Starts rtpengine with `portCount` relay ports (even-aligned) and waits for its ng `pong`. */
export async function startRtpengine(o: { portCount?: number } = {}): Promise<Rtpengine> {
  const bin = requireTool('rtpengine');
  const count = o.portCount ?? 100;
  const ngPort = await portBlock('ng');
  const min = await portBlock('media', count, { align: 2 });
  const dir = peerDir('rtpengine');
  const daemon = startDaemon({
    name: 'rtpengine',
    cmd: bin,
    dir,
    args: [
      '--config-file=none',
      '--table=-1',
      '--foreground',
      '--log-stderr',
      '--interface=127.0.0.1',
      `--listen-ng=127.0.0.1:${ngPort}`,
      `--port-min=${min}`,
      `--port-max=${min + count - 1}`,
      '--num-threads=2',
      // Its media threads (pollers, send and codec timers, the T.38 gateway's) at real-time
      // priority, as a media relay runs in production and as faxline's own media threads do: at
      // the normal priority beside CPU-bound work (CI runs the test files beside this suite) a
      // T.38 -> rtpengine -> G.711 call failed with "DCN after sending a page" / "T2 expired" (CI
      // of 2026-12-07). Without CAP_SYS_NICE rtpengine logs that it may not and runs as before.
      '--scheduling=fifo',
      '--priority=10',
      '--delete-delay=0',
      '--log-level=6',
    ],
  });
  const ng = ngClient(ngPort);
  try {
    // Bounded: 50 pings, 200 ms apart, or its exit.
    let ok = false;
    for (let i = 0; i < 50 && !ok; i++) {
      if (daemon.child.exitCode !== null) break;
      ok = await ng.command({ command: 'ping' }, 200).then(
        (r) => r.result === 'pong',
        () => false,
      );
    }
    if (!ok) throw new Error(`rtpengine did not answer ping on ng port ${ngPort}:\n${daemon.tail()}`);
  } catch (err) {
    ng.close();
    await daemon.stop();
    throw err;
  }
  return {
    ngPort,
    ports: [min, min + count - 1],
    daemon,
    ng,
    stop: async () => {
      ng.close();
      await daemon.stop();
    },
  };
}
