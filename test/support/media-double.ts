// A stand-in for the native fax media engine in the SIP signalling tests (test/sip-ua.test.ts),
// until src/transmission/sip/media-engine.ts lands: it binds a real UDP port on loopback, records
// every call the SIP line makes on it, and ends a running session with a failed `done` when the
// line stops it. No T.30 happens here: only where a test asks (`endsOkAfterMs`, the engine finishing
// on its own while the far end hangs up) does it report a finished exchange, to test the line's
// reading of that race, never a fax.
import { createSocket, type Socket } from 'node:dgram';
import type {
  MediaEngine,
  MediaEvent,
  MediaResult,
  MediaSession,
  MediaStartOptions,
  RemoteMedia,
  T38Params,
} from '../../src/transmission/sip/media.ts';

export interface RecordedSession {
  port: number;
  started: MediaStartOptions | undefined;
  switchedToT38: { remote: RemoteMedia; t38: T38Params } | undefined;
  updates: RemoteMedia[];
  stopped: boolean;
  closed: boolean;
}

class DoubleSession implements MediaSession {
  readonly port: number;
  readonly rec: RecordedSession;
  private readonly sock: Socket;
  private onEvent: ((e: MediaEvent) => void) | undefined;
  private t0 = 0;
  private ended = false;
  private readonly endsOkAfterMs: number | undefined;
  private readonly sendsUdptlForMs: number;
  private readonly connects: boolean;
  private switchedAt = 0;
  /** Datagrams that reached the port: the line's media-inactivity watch reads them as RTP. */
  private received = 0;

  constructor(
    sock: Socket,
    rec: RecordedSession,
    endsOkAfterMs: number | undefined,
    sendsUdptlForMs = 0,
    connects = false,
  ) {
    this.sock = sock;
    this.connects = connects;
    this.sendsUdptlForMs = sendsUdptlForMs;
    sock.on('message', () => this.received++);
    this.port = rec.port;
    this.rec = rec;
    this.endsOkAfterMs = endsOkAfterMs;
  }

  start(o: MediaStartOptions, onEvent: (e: MediaEvent) => void): void {
    if (this.rec.started) throw new Error('start() called twice');
    this.rec.started = o;
    this.onEvent = onEvent;
    this.t0 = Date.now();
    if (this.endsOkAfterMs !== undefined) setTimeout(() => this.finish(true), this.endsOkAfterMs);
    if (this.connects)
      setImmediate(() => onEvent({ type: 'connected', bitRate: 14400, ecm: true, remoteIdent: 'DOUBLE' }));
  }

  switchToT38(remote: RemoteMedia, t38: T38Params): void {
    this.rec.switchedToT38 = { remote, t38 };
    this.switchedAt = Date.now();
  }

  updateRemote(remote: RemoteMedia): void {
    this.rec.updates.push(remote);
  }

  stop(): void {
    this.rec.stopped = true;
    this.finish(false);
  }

  private finish(ok: boolean): void {
    if (!this.onEvent || this.ended) return;
    this.ended = true;
    const result: MediaResult = {
      ok,
      code: ok ? 0 : 7, // T30_ERR_OPER_INT_FAIL: stopped from outside
      text: ok ? 'OK' : 'stopped',
      pages: ok ? 2 : 0,
      bitRate: 0,
      ecm: false,
      remoteIdent: '',
      xResolution: 0,
      yResolution: 0,
      encoding: 0,
      transport: this.rec.switchedToT38 ? 't38' : (this.rec.started?.transport ?? 'audio'),
      durationMs: Date.now() - this.t0,
    };
    const cb = this.onEvent;
    setImmediate(() => cb({ type: 'done', result }));
  }

  stats() {
    return {
      rtpSent: 0,
      rtpReceived: this.received,
      // As if a page went out over T.38 for sendsUdptlForMs after the switch (one packet per 20 ms).
      udptlSent: this.switchedAt
        ? Math.floor(Math.min(Date.now() - this.switchedAt, this.sendsUdptlForMs) / 20)
        : 0,
      udptlReceived: 0,
      lost: 0,
      recovered: 0,
      sendJitterP99Us: 0,
    };
  }

  close(): void {
    if (this.rec.closed) return;
    this.rec.closed = true;
    this.sock.close();
  }
}

export class MediaDouble implements MediaEngine {
  readonly sessions: RecordedSession[] = [];
  private readonly endsOkAfterMs: number | undefined;
  private readonly sendsUdptlForMs: number;
  private readonly connects: boolean;

  /**
   * sendsUdptlForMs: after a switch to T.38, the session reports UDPTL sent for that long;
   * connects: the session reports T.30 trained ('connected') as soon as it starts.
   */
  constructor(o: { endsOkAfterMs?: number; sendsUdptlForMs?: number; connects?: boolean } = {}) {
    this.endsOkAfterMs = o.endsOkAfterMs;
    this.sendsUdptlForMs = o.sendsUdptlForMs ?? 0;
    this.connects = o.connects ?? false;
  }

  open(o: { address: string; portMin: number; portMax: number }): MediaSession {
    const used = new Set(this.sessions.filter((s) => !s.closed).map((s) => s.port));
    let port = o.portMin + (o.portMin % 2);
    while (used.has(port) && port <= o.portMax) port += 2;
    if (port > o.portMax) throw new Error('no free media port');
    const sock = createSocket('udp4');
    sock.bind(port, o.address === '0.0.0.0' ? '127.0.0.1' : o.address);
    sock.on('error', () => {});
    const rec: RecordedSession = {
      port,
      started: undefined,
      switchedToT38: undefined,
      updates: [],
      stopped: false,
      closed: false,
    };
    this.sessions.push(rec);
    return new DoubleSession(sock, rec, this.endsOkAfterMs, this.sendsUdptlForMs, this.connects);
  }

  active(): number {
    return this.sessions.filter((s) => s.started && !s.closed).length;
  }
}
