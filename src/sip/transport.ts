// SIP transports: one UDP socket and one TCP listener on the same address and port (SIP_LISTEN).
// UDP carries one message per datagram; TCP is framed by Content-Length. Connections we open to a
// peer and connections a peer opened to us are both reused to reach that peer.
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { parseMessage, serialize, SipParseError, type SipMessage, StreamFramer } from './message.ts';

export type TransportName = 'udp' | 'tcp';

export interface Peer {
  transport: TransportName;
  address: string;
  port: number;
}

export interface TransportOptions {
  host: string;
  port: number;
  /** Simultaneous TCP connections kept (in and out); past it new incoming ones are refused. */
  maxConnections?: number;
  /** A TCP connection with no message for this long is closed (ms). */
  idleMs?: number;
  onMessage: (m: SipMessage, from: Peer) => void;
  /** A message refused by the parser (logged by the caller; never answered). */
  onError?: (err: Error, from: Peer) => void;
}

const key = (address: string, port: number) => `${address}|${port}`;

export class Transport {
  private udp: UdpSocket | undefined;
  private tcp: Server | undefined;
  private readonly conns = new Map<string, Socket>();
  private readonly o: TransportOptions;
  private boundPort = 0;

  constructor(o: TransportOptions) {
    this.o = o;
  }

  /** The bound port (useful with port 0). */
  get port(): number {
    return this.boundPort;
  }

  async listen(): Promise<void> {
    const family = isIP(this.o.host) === 6 ? 'udp6' : 'udp4';
    const udp = createSocket({ type: family, reuseAddr: false });
    await new Promise<void>((resolve, reject) => {
      udp.once('error', reject);
      udp.bind(this.o.port, this.o.host, () => {
        udp.off('error', reject);
        resolve();
      });
    });
    this.boundPort = udp.address().port;
    udp.on('message', (buf, rinfo) => this.onDatagram(buf, rinfo.address, rinfo.port));
    udp.on('error', () => {}); // ICMP errors surface as send failures; the transaction layer times out
    this.udp = udp;
    const tcp = createServer((s) => this.adopt(s));
    tcp.maxConnections = this.o.maxConnections ?? 1024;
    await new Promise<void>((resolve, reject) => {
      tcp.once('error', reject);
      tcp.listen(this.boundPort, this.o.host, () => {
        tcp.off('error', reject);
        resolve();
      });
    });
    this.tcp = tcp;
  }

  private onDatagram(buf: Buffer, address: string, port: number): void {
    if (buf.length <= 4 && buf.toString('latin1').trim() === '') return; // CRLF keep-alive
    const from: Peer = { transport: 'udp', address, port };
    let m: SipMessage;
    try {
      m = parseMessage(buf);
    } catch (err) {
      if (err instanceof SipParseError) this.o.onError?.(err, from);
      return;
    }
    this.o.onMessage(m, from);
  }

  private adopt(s: Socket): void {
    const address = s.remoteAddress ?? '';
    const port = s.remotePort ?? 0;
    const k = key(address, port);
    this.conns.get(k)?.destroy();
    this.conns.set(k, s);
    const framer = new StreamFramer();
    const from: Peer = { transport: 'tcp', address, port };
    s.setTimeout(this.o.idleMs ?? 10 * 60_000, () => s.destroy());
    s.on('data', (chunk: Buffer) => {
      let ms: SipMessage[];
      try {
        ms = framer.push(chunk);
      } catch (err) {
        this.o.onError?.(err as Error, from);
        s.destroy();
        return;
      }
      for (const m of ms) this.o.onMessage(m, from);
    });
    s.on('error', () => {});
    s.on('close', () => {
      if (this.conns.get(k) === s) this.conns.delete(k);
    });
  }

  /** Sends a message to a peer (host names are resolved, first address). */
  async send(m: SipMessage, to: Peer): Promise<void> {
    const bytes = serialize(m);
    const address = isIP(to.address) ? to.address : (await lookup(to.address)).address;
    if (to.transport === 'udp') {
      const udp = this.udp;
      if (!udp) throw new Error('SIP transport is closed');
      await new Promise<void>((resolve, reject) =>
        udp.send(bytes, to.port, address, (err) => (err ? reject(err) : resolve())),
      );
      return;
    }
    let s = this.conns.get(key(address, to.port));
    if (!s || s.destroyed) s = await this.open(address, to.port);
    await new Promise<void>((resolve, reject) =>
      (s as Socket).write(bytes, (err) => (err ? reject(err) : resolve())),
    );
  }

  private async open(address: string, port: number): Promise<Socket> {
    if (this.conns.size >= (this.o.maxConnections ?? 1024)) throw new Error('too many SIP TCP connections');
    const s = connect({ host: address, port });
    await new Promise<void>((resolve, reject) => {
      s.once('connect', resolve);
      s.once('error', reject);
    });
    s.removeAllListeners('error');
    this.adopt(s);
    return s;
  }

  async close(): Promise<void> {
    for (const s of this.conns.values()) s.destroy();
    this.conns.clear();
    const udp = this.udp;
    this.udp = undefined;
    if (udp) await new Promise<void>((r) => udp.close(() => r()));
    const tcp = this.tcp;
    this.tcp = undefined;
    if (tcp) await new Promise<void>((r) => tcp.close(() => r()));
  }
}
