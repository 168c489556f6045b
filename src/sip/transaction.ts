// RFC 3261 section 17 transactions: INVITE and non-INVITE, client and server, matched by the top
// Via's branch (z9hG4bK...). Over UDP they retransmit (Timers A/E for requests, G for final
// responses to INVITE) and absorb the peer's retransmissions; over TCP only the timeouts run.
// A 2xx to INVITE is the user agent core's: the server side retransmits it here until the core
// reports the ACK (which has a branch of its own), as RFC 6026 settled.
import { randomBytes } from 'node:crypto';
import {
  type Header,
  header,
  headerValues,
  makeResponse,
  parseCSeq,
  parseVia,
  type SipMessage,
  type SipRequest,
  type SipResponse,
} from './message.ts';
import type { Peer, Transport } from './transport.ts';

export interface Timers {
  /** RTT estimate: first retransmission interval (RFC 3261: 500 ms). */
  t1: number;
  /** Cap of the non-INVITE and response retransmission interval (4 s). */
  t2: number;
  /** How long the network keeps a message (5 s). */
  t4: number;
}

export const defaultTimers: Timers = { t1: 500, t2: 4000, t4: 5000 };

export function newBranch(): string {
  return `z9hG4bK${randomBytes(10).toString('hex')}`;
}

export type ClientFailure = { status: 408 | 503; reason: string };

interface ClientCallbacks {
  onResponse: (res: SipResponse) => void;
  /**
   * Timer B/F fired (408), the transport could not send (503), or the layer closed before a final
   * response (503). Called once, instead of a final.
   */
  onFailure: (f: ClientFailure) => void;
}

export class ClientTransaction {
  readonly request: SipRequest;
  readonly peer: Peer;
  readonly branch: string;
  private state: 'calling' | 'proceeding' | 'completed' | 'terminated' = 'calling';
  private retransmit: NodeJS.Timeout | undefined;
  private timeout: NodeJS.Timeout | undefined;
  private interval: number;
  private ack: SipRequest | undefined;
  private readonly layer: TransactionLayer;
  private readonly cb: ClientCallbacks;

  constructor(layer: TransactionLayer, req: SipRequest, peer: Peer, cb: ClientCallbacks) {
    this.layer = layer;
    this.request = req;
    this.peer = peer;
    this.cb = cb;
    this.branch = parseVia(header(req, 'Via') ?? '').params.get('branch') ?? '';
    this.interval = layer.timers.t1;
  }

  get isInvite(): boolean {
    return this.request.method === 'INVITE';
  }

  /** True once a provisional response came (CANCEL may be sent from then on). */
  get provisional(): boolean {
    return this.state === 'proceeding';
  }

  get done(): boolean {
    return this.state === 'completed' || this.state === 'terminated';
  }

  start(): void {
    this.send(this.request);
    const t = this.layer.timers;
    if (this.peer.transport === 'udp') this.armRetransmit();
    this.timeout = setTimeout(
      () => this.fail({ status: 408, reason: 'Request Timeout (no answer)' }),
      64 * t.t1,
    );
  }

  private armRetransmit(): void {
    this.retransmit = setTimeout(() => {
      if (this.state !== 'calling' && !(this.state === 'proceeding' && !this.isInvite)) return;
      this.send(this.request);
      this.interval = this.isInvite ? this.interval * 2 : Math.min(this.interval * 2, this.layer.timers.t2);
      this.armRetransmit();
    }, this.interval);
  }

  private send(m: SipRequest): void {
    this.layer.transport.send(m, this.peer).catch((err: unknown) => {
      this.fail({ status: 503, reason: `transport: ${(err as Error).message}` });
    });
  }

  private fail(f: ClientFailure): void {
    if (this.state === 'completed' || this.state === 'terminated') return;
    this.terminate();
    this.cb.onFailure(f);
  }

  /** A response whose branch and method matched this transaction. */
  receive(res: SipResponse): void {
    if (this.state === 'terminated') return;
    if (res.status < 200) {
      if (this.state === 'calling') {
        this.state = 'proceeding';
        if (!this.isInvite) {
          // Timer E keeps going at T2 while the non-INVITE request is proceeding.
          clearTimeout(this.retransmit);
          this.interval = this.layer.timers.t2;
          if (this.peer.transport === 'udp') this.armRetransmit();
        } else clearTimeout(this.retransmit);
      }
      if (this.state === 'proceeding') this.cb.onResponse(res);
      return;
    }
    if (this.state === 'completed') {
      // A retransmitted final response: answer it again with the same ACK (INVITE) or absorb it.
      if (this.ack) this.send(this.ack);
      return;
    }
    clearTimeout(this.retransmit);
    clearTimeout(this.timeout);
    if (this.isInvite && res.status >= 300) this.ack = this.layer.ackFor(this.request, res);
    if (this.ack) this.send(this.ack);
    if (this.isInvite && res.status < 300) {
      // The core ACKs a 2xx itself (it is a request of the dialog, with a branch of its own).
      this.terminate();
    } else {
      this.state = 'completed';
      const linger =
        this.peer.transport === 'udp'
          ? this.isInvite
            ? 64 * this.layer.timers.t1
            : this.layer.timers.t4
          : 0;
      this.timeout = setTimeout(() => this.terminate(), linger);
    }
    this.cb.onResponse(res);
  }

  terminate(): void {
    this.state = 'terminated';
    clearTimeout(this.retransmit);
    clearTimeout(this.timeout);
    this.layer.forgetClient(this);
  }

  /** Ends it on close: one still waiting for its final response hears a 503, so no caller waits on. */
  abandon(reason: string): void {
    if (this.done) this.terminate();
    else this.fail({ status: 503, reason });
  }
}

export class ServerTransaction {
  readonly request: SipRequest;
  readonly peer: Peer;
  readonly key: string;
  private last: SipResponse | undefined;
  private state: 'proceeding' | 'completed' | 'confirmed' | 'accepted' | 'terminated' = 'proceeding';
  private retransmit: NodeJS.Timeout | undefined;
  private timeout: NodeJS.Timeout | undefined;
  private readonly layer: TransactionLayer;
  /** Called when a CANCEL matched this INVITE transaction (before its final response). */
  onCancel: (() => void) | undefined;
  /** Called when a 2xx was retransmitted for 64·T1 without an ACK (the core should hang up). */
  onNoAck: (() => void) | undefined;
  /** Called when the ACK of the 2xx arrived. */
  onAck: ((ack: SipRequest) => void) | undefined;

  constructor(layer: TransactionLayer, req: SipRequest, peer: Peer, key: string) {
    this.layer = layer;
    this.request = req;
    this.peer = peer;
    this.key = key;
  }

  get isInvite(): boolean {
    return this.request.method === 'INVITE';
  }

  /** True until a final response has been sent. */
  get pending(): boolean {
    return this.state === 'proceeding';
  }

  respond(res: SipResponse): void {
    if (this.state !== 'proceeding') return; // one final response per transaction
    this.last = res;
    this.send(res);
    if (res.status < 200) return;
    const t = this.layer.timers;
    const udp = this.peer.transport === 'udp';
    if (this.isInvite) {
      this.state = res.status < 300 ? 'accepted' : 'completed';
      if (res.status < 300) this.layer.awaitAck(this);
      let interval = t.t1;
      const again = () => {
        this.retransmit = setTimeout(() => {
          if (this.state !== 'completed' && this.state !== 'accepted') return;
          if (this.last) this.send(this.last);
          interval = Math.min(interval * 2, t.t2);
          again();
        }, interval);
      };
      // Timer G (non-2xx, UDP) and the 2xx retransmission (UDP; over TCP a 2xx is sent once).
      if (udp) again();
      this.timeout = setTimeout(() => {
        const noAck = this.state === 'accepted';
        this.terminate();
        if (noAck) this.onNoAck?.();
      }, 64 * t.t1); // Timer H, and Timer L for the 2xx
    } else {
      this.state = 'completed';
      this.timeout = setTimeout(() => this.terminate(), udp ? 64 * t.t1 : 0); // Timer J
    }
  }

  private send(res: SipResponse): void {
    this.layer.sendResponse(res, this.request, this.peer).catch(() => {
      // A response that cannot be sent: the peer retransmits or times out.
    });
  }

  /** The request came again (UDP retransmission): answer with the last response. */
  retransmitted(): void {
    if (this.last) this.send(this.last);
  }

  /** ACK matching this transaction: same branch (non-2xx) or same dialog and CSeq (2xx). */
  acked(ack: SipRequest): void {
    if (this.state === 'completed') {
      this.state = 'confirmed';
      clearTimeout(this.retransmit);
      clearTimeout(this.timeout);
      this.timeout = setTimeout(
        () => this.terminate(),
        this.peer.transport === 'udp' ? this.layer.timers.t4 : 0,
      );
    } else if (this.state === 'accepted') {
      this.onAck?.(ack);
      this.terminate();
    }
  }

  terminate(): void {
    this.state = 'terminated';
    clearTimeout(this.retransmit);
    clearTimeout(this.timeout);
    this.layer.forgetServer(this);
  }
}

export interface LayerOptions {
  transport: Transport;
  timers?: Partial<Timers>;
  /** A new request (not a retransmission, not an ACK of ours): the core answers through `st`. */
  onRequest: (req: SipRequest, st: ServerTransaction) => void;
  /** An ACK for a 2xx (it has its own branch), or an ACK that matched nothing. */
  onAck: (ack: SipRequest, from: Peer) => void;
  /** A response that matched no client transaction (such as a retransmitted 2xx to INVITE). */
  onStrayResponse: (res: SipResponse, from: Peer) => void;
  /**
   * Screens a new request (not an ACK, not a retransmission of a transaction kept) before any state
   * is kept for it. A response returned here is sent statelessly (RFC 3261 8.2.7, 16.11): no 100
   * Trying, no retransmission timer, no transaction; a retransmitted request is screened again and
   * gets the same answer. Undefined: the request gets its transaction (and 100 Trying for INVITE).
   */
  screen?: (req: SipRequest, from: Peer) => SipResponse | undefined;
  /**
   * Whether an ACK from `from` may end the INVITE transaction `st` (the one its 2xx or final went
   * out on); default: only from the address the INVITE came from. A refused ACK is dropped.
   */
  ackAllowed?: (ack: SipRequest, from: Peer, st: ServerTransaction) => boolean;
}

function serverKey(req: SipRequest): string | undefined {
  const topVia = headerValues(req, 'Via')[0];
  if (!topVia) return undefined;
  const via = parseVia(topVia);
  const method = req.method === 'ACK' ? 'INVITE' : req.method;
  const branch = via.params.get('branch') ?? '';
  const sentBy = `${via.host}:${via.port ?? 5060}`;
  if (branch.startsWith('z9hG4bK')) return `${branch}|${sentBy}|${method}`;
  // RFC 2543 peers: no usable branch, match by dialog identifiers instead.
  const cseq = parseCSeq(header(req, 'CSeq') ?? '');
  return `${header(req, 'Call-ID')}|${cseq.seq}|${method}|${header(req, 'From')}|${topVia}`;
}

export class TransactionLayer {
  readonly transport: Transport;
  readonly timers: Timers;
  private readonly o: LayerOptions;
  private readonly clients = new Map<string, ClientTransaction>();
  private readonly servers = new Map<string, ServerTransaction>();
  /** INVITE server transactions whose 2xx waits for its ACK, by Call-ID and CSeq number. */
  private readonly accepted = new Map<string, ServerTransaction>();
  /** Where each response came from (the dialog a 2xx makes trusts that address). */
  private readonly responseSources = new WeakMap<SipResponse, Peer>();
  private closed = false;
  /** Responses sent without a transaction (LayerOptions.screen), since start. */
  statelessResponses = 0;

  constructor(o: LayerOptions) {
    this.o = o;
    this.transport = o.transport;
    this.timers = { ...defaultTimers, ...o.timers };
  }

  /** Starts a client transaction for `req` (its top Via must carry a fresh branch). */
  request(req: SipRequest, peer: Peer, cb: ClientCallbacks): ClientTransaction {
    const tx = new ClientTransaction(this, req, peer, cb);
    if (this.closed) {
      // After close (a BYE answering a late digest challenge, say): nothing is sent, no timer runs.
      queueMicrotask(() => tx.abandon('the user agent closed'));
      return tx;
    }
    this.clients.set(`${tx.branch}|${req.method}`, tx);
    tx.start();
    return tx;
  }

  /** Server transactions held now (each holds its request and, over UDP, timers until 32 s). */
  get serverTransactions(): number {
    return this.servers.size;
  }

  /** The peer a received response came from (undefined for one built locally). */
  sourceOf(res: SipResponse): Peer | undefined {
    return this.responseSources.get(res);
  }

  forgetClient(tx: ClientTransaction): void {
    const k = `${tx.branch}|${tx.request.method}`;
    if (this.clients.get(k) === tx) this.clients.delete(k);
  }

  forgetServer(st: ServerTransaction): void {
    if (this.servers.get(st.key) === st) this.servers.delete(st.key);
    for (const [k, v] of this.accepted) if (v === st) this.accepted.delete(k);
  }

  awaitAck(st: ServerTransaction): void {
    const cseq = parseCSeq(header(st.request, 'CSeq') ?? '');
    this.accepted.set(`${header(st.request, 'Call-ID')}|${cseq.seq}`, st);
  }

  /** The INVITE server transaction a CANCEL refers to (same branch and sent-by). */
  inviteFor(cancel: SipRequest): ServerTransaction | undefined {
    const k = serverKey(cancel);
    return k ? this.servers.get(k.replace(/\|CANCEL$/, '|INVITE')) : undefined;
  }

  /** Sends without a transaction (ACK for 2xx, stateless answers). */
  async sendDirect(m: SipMessage, peer: Peer): Promise<void> {
    await this.transport.send(m, peer);
  }

  /** Responses go back where the request came from (RFC 3581 rport), or to Via's received/sent-by. */
  async sendResponse(res: SipResponse, req: SipRequest, from: Peer): Promise<void> {
    if (from.transport === 'tcp') return this.transport.send(res, from);
    const via = parseVia(headerValues(req, 'Via')[0] ?? '');
    if (via.params.has('rport') || via.params.has('received')) return this.transport.send(res, from);
    return this.transport.send(res, {
      transport: 'udp',
      address: via.host.replace(/^\[|\]$/g, ''),
      port: via.port ?? 5060,
    });
  }

  ackFor(inv: SipRequest, res: SipResponse): SipRequest {
    const headers: Header[] = [
      { name: 'Via', value: headerValues(inv, 'Via')[0] ?? '' },
      ...inv.headers.filter((h) => h.name === 'Route'),
      { name: 'Max-Forwards', value: '70' },
      { name: 'From', value: header(inv, 'From') ?? '' },
      { name: 'To', value: header(res, 'To') ?? '' },
      { name: 'Call-ID', value: header(inv, 'Call-ID') ?? '' },
      { name: 'CSeq', value: `${parseCSeq(header(inv, 'CSeq') ?? '').seq} ACK` },
    ];
    return { kind: 'request', method: 'ACK', uri: inv.uri, headers, body: Buffer.alloc(0) };
  }

  /** Entry point for every parsed message from the transport. */
  receive(m: SipMessage, from: Peer): void {
    try {
      if (m.kind === 'response') this.receiveResponse(m, from);
      else this.receiveRequest(m, from);
    } catch {
      // A message whose Via or CSeq cannot be read has nowhere to be answered: dropped.
    }
  }

  private receiveResponse(res: SipResponse, from: Peer): void {
    const top = headerValues(res, 'Via')[0];
    if (!top) return;
    const branch = parseVia(top).params.get('branch') ?? '';
    const method = parseCSeq(header(res, 'CSeq') ?? '').method;
    const tx = this.clients.get(`${branch}|${method}`);
    this.responseSources.set(res, from);
    if (tx) tx.receive(res);
    else this.o.onStrayResponse(res, from);
  }

  private receiveRequest(req: SipRequest, from: Peer): void {
    // RFC 3581: say where the request really came from, so the answer finds its way back.
    const vias = req.headers.filter((h) => h.name === 'Via');
    const first = vias[0];
    if (first && from.transport === 'udp') {
      const parts = first.value.split(',');
      const via = parseVia(parts[0] as string);
      let v = parts[0] as string;
      if (via.params.has('rport')) v = v.replace(/;rport(?=;|$)/i, `;rport=${from.port}`);
      if (via.host !== from.address || via.params.has('rport')) {
        if (!via.params.has('received')) v = `${v};received=${from.address}`;
      }
      parts[0] = v;
      first.value = parts.join(',');
    }
    const key = serverKey(req);
    if (!key) return;
    const existing = this.servers.get(key);
    if (req.method === 'ACK') {
      const allowed = (st: ServerTransaction) =>
        this.o.ackAllowed ? this.o.ackAllowed(req, from, st) : from.address === st.peer.address;
      if (existing?.isInvite && !existing.pending) {
        if (allowed(existing)) existing.acked(req);
        return;
      }
      const cseq = parseCSeq(header(req, 'CSeq') ?? '');
      const st = this.accepted.get(`${header(req, 'Call-ID')}|${cseq.seq}`);
      if (st && !allowed(st)) return;
      if (st) st.acked(req);
      this.o.onAck(req, from);
      return;
    }
    if (existing) {
      existing.retransmitted();
      return;
    }
    const stateless = this.o.screen?.(req, from);
    if (stateless) {
      this.statelessResponses++;
      this.sendResponse(stateless, req, from).catch(() => {});
      return;
    }
    const st = new ServerTransaction(this, req, from, key);
    this.servers.set(key, st);
    if (req.method === 'INVITE') st.respond(makeResponse(req, 100));
    this.o.onRequest(req, st);
  }

  /** Stops every timer (on close); requests still unanswered end with a 503. */
  close(): void {
    this.closed = true;
    for (const tx of [...this.clients.values()]) tx.abandon('the user agent closed');
    for (const st of [...this.servers.values()]) st.terminate();
  }
}
