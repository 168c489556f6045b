// The SIP user agent core: places calls (INVITE with digest auth, CANCEL on abort, ACK, dialogs),
// accepts calls (the answering side hands each INVITE to a callback), answers BYE and re-INVITE in
// dialogs, and keeps a registration fresh. It knows nothing of faxes: SDP bodies are strings here.
import { createHash, randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { Dialog, type DialogHost } from './dialog.ts';
import { authorize, type DigestVerdict, DigestVerifier, parseChallenge, supported } from './digest.ts';
import {
  type Header,
  header,
  headerValues,
  makeResponse,
  parseCSeq,
  parseNameAddr,
  parseUri,
  parseVia,
  serialize,
  type SipRequest,
  type SipResponse,
} from './message.ts';
import {
  type ClientFailure,
  type ClientTransaction,
  newBranch,
  type ServerTransaction,
  type Timers,
  TransactionLayer,
} from './transaction.ts';
import { type Peer, Transport, type TransportName } from './transport.ts';

export type { Peer, TransportName } from './transport.ts';
export type { Timers } from './transaction.ts';
export { Dialog } from './dialog.ts';

export interface Credentials {
  username: string;
  password: string;
}

/** Digest authentication demanded of inbound INVITEs (401 WWW-Authenticate). */
export interface InboundAuth extends Credentials {
  realm: string;
  /** Offered in this order, and the only ones accepted; default MD5, SHA-256. */
  algorithms?: ('MD5' | 'SHA-256')[];
  /** Fixed in tests. */
  now?: () => number;
  nonceTtlMs?: number;
}

export interface Log {
  debug: (obj: object, msg: string) => void;
  warn: (obj: object, msg: string) => void;
}

export interface UaOptions {
  host: string;
  port: number;
  /** Address written in Via and Contact (and by callers in SDP); default: see localAddress(). */
  publicAddress?: string;
  timers?: Partial<Timers>;
  credentials?: Credentials;
  /**
   * Credentials inbound INVITEs must carry. Each IncomingCall then says what its INVITE carried
   * (`auth`); the handler decides (reject, or challenge() with 401), the user agent does not.
   */
  inboundAuth?: InboundAuth;
  /** New calls (INVITE outside a dialog). Without a handler every call is refused with 480. */
  onInvite?: (call: IncomingCall) => void;
  /** Incoming calls (dialogs and pending INVITEs) kept at once; past it 503. */
  maxCalls?: number;
  /** See UserAgent.screenInvite (may also be set after start). */
  screenInvite?: InviteScreen;
  /** See UserAgent.trustSource (may also be set after start). */
  trustSource?: (address: string) => boolean;
  userAgent?: string;
  log?: Log;
}

/** The first non-internal IPv4 address, else 127.0.0.1 (when nothing better is configured). */
export function localAddress(listenHost: string): string {
  if (listenHost !== '0.0.0.0' && listenHost !== '::') return listenHost;
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}

/** Where to send requests for a SIP URI: its host, port (5060) and transport parameter (udp). */
export function hopOf(uri: string): Peer {
  const u = parseUri(uri);
  const t = u.params.get('transport')?.toLowerCase() ?? 'udp';
  if (t !== 'udp' && t !== 'tcp') throw new Error(`unsupported SIP transport "${t}" (udp or tcp)`);
  return { transport: t, address: u.host.replace(/^\[|\]$/g, ''), port: u.port ?? 5060 };
}

const hex = (n: number) => randomBytes(n).toString('hex');

export interface InviteOptions {
  requestUri: string;
  /** Where the INVITE goes (the trunk); default: the Request-URI's host. */
  via?: Peer;
  /** The user part of From (the caller id) and an optional display name. */
  fromUser: string;
  fromDisplay?: string;
  /** Host of the From URI; default: the Request-URI's host (what trunks expect). */
  fromHost?: string;
  sdp: string;
  /** Aborting sends CANCEL (or gives up locally when nothing answered yet). */
  signal?: AbortSignal;
  onProvisional?: (status: number) => void;
}

/**
 * Refuses a new INVITE from what the packet alone says (its source address, its credentials), before
 * the user agent keeps anything for it: the refusal is answered statelessly. Undefined: go on.
 */
export type InviteScreen = (c: {
  source: string;
  auth: DigestVerdict | undefined;
}) => { status: number; reason?: string } | undefined;

/** Methods counted by name in UserAgent.counters().inDialogRefused; any other is 'other'. */
const countedMethods = new Set(['INVITE', 'ACK', 'BYE', 'CANCEL', 'UPDATE', 'INFO', 'OPTIONS', 'PRACK']);

/** An IPv4-mapped IPv6 address as its IPv4 form, so both spellings compare equal. */
const plainAddress = (a: string) => a.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/i, '$1').toLowerCase();

export type InviteResult =
  | { ok: true; status: number; dialog: Dialog; answer: string; callId: string }
  | { ok: false; status: number; reason: string; callId: string; cancelled: boolean };

export class IncomingCall {
  readonly request: SipRequest;
  readonly callId: string;
  readonly fromUri: string;
  readonly toUri: string;
  /** The caller's SDP offer ('' when the INVITE had none). */
  readonly offer: string;
  /** The Request-URI of the INVITE. */
  readonly requestUri: string;
  /** The address the INVITE came from (the packet's peer, not a header): for allow-lists. */
  readonly source: string;
  /** Aborted when the caller CANCELs before we answer. */
  readonly cancelled: AbortSignal;
  /** The check of the INVITE's credentials; undefined when the user agent demands none. */
  readonly auth: DigestVerdict | undefined;
  private readonly verifier: DigestVerifier | undefined;
  private readonly ctl = new AbortController();
  private readonly st: ServerTransaction;
  private readonly ua: UserAgent;
  private readonly localTag = hex(6);
  private decided = false;

  constructor(
    ua: UserAgent,
    req: SipRequest,
    st: ServerTransaction,
    verifier?: DigestVerifier,
    verdict?: DigestVerdict,
  ) {
    this.ua = ua;
    this.verifier = verifier;
    this.request = req;
    this.st = st;
    this.callId = header(req, 'Call-ID') ?? '';
    this.fromUri = parseNameAddr(header(req, 'From') ?? '').uri;
    this.toUri = parseNameAddr(header(req, 'To') ?? '').uri;
    this.offer = req.body.toString('utf8');
    this.requestUri = req.uri;
    this.source = st.peer.address;
    this.cancelled = this.ctl.signal;
    // Checked once, when the INVITE was screened (UserAgent.screen); checked here when it was not.
    this.auth = verdict ?? (verifier ? checkCredentials(verifier, req) : undefined);
    st.onCancel = () => {
      if (this.decided) return;
      this.decided = true;
      st.respond(makeResponse(req, 487, { toTag: this.localTag }));
      this.ctl.abort();
    };
  }

  /** 180 Ringing. */
  ring(): void {
    if (!this.decided) this.st.respond(makeResponse(this.request, 180, { toTag: this.localTag }));
  }

  reject(status: number, reason?: string, headers: Header[] = []): void {
    if (this.decided) return;
    this.decided = true;
    this.st.respond(
      makeResponse(this.request, status, { toTag: this.localTag, headers, ...(reason ? { reason } : {}) }),
    );
  }

  /** 401 with fresh WWW-Authenticate challenges (stale=true when the INVITE's nonce had expired). */
  challenge(): void {
    if (!this.verifier) return this.reject(401);
    const stale = this.auth?.ok === false && this.auth.kind === 'stale';
    this.reject(
      401,
      'Unauthorized',
      this.verifier.challenges(stale).map((value) => ({ name: 'WWW-Authenticate', value })),
    );
  }

  /** Answers 200 with our SDP; the dialog starts now (an ACK that never comes ends it with BYE). */
  accept(sdp: string): Dialog | undefined {
    if (this.decided) return undefined;
    this.decided = true;
    return this.ua.acceptIncoming(this.request, this.st, this.localTag, sdp);
  }
}

function checkCredentials(verifier: DigestVerifier, req: SipRequest): DigestVerdict {
  return verifier.verify({
    method: req.method,
    uri: req.uri,
    // Whole field values: a Digest value has commas of its own (headerValues would split it).
    authorization: req.headers.filter((h) => h.name.toLowerCase() === 'authorization').map((h) => h.value),
    callId: header(req, 'Call-ID') ?? '',
    cseq: header(req, 'CSeq') ?? '',
  });
}

export class UserAgent implements DialogHost {
  readonly transport: Transport;
  readonly layer: TransactionLayer;
  private readonly o: UaOptions;
  private readonly dialogs = new Map<string, Dialog>();
  private readonly pendingIncoming = new Set<string>();
  private readonly verifier: DigestVerifier | undefined;
  /**
   * BYEs still in their transaction. A far end that died never answers, so ours is retransmitted
   * until Timer F (64·T1, 32 s); nobody needs to wait for that, but close() does, briefly.
   */
  private readonly hangups = new Set<Promise<unknown>>();
  /** Our INVITEs still waiting for their final response, by Call-ID and our tag. */
  private readonly calling = new Set<string>();
  readonly address: string;
  private closed = false;
  /** New calls (INVITE outside a dialog); may be set after start. Without one: 480. */
  onInvite: ((call: IncomingCall) => void) | undefined;
  /**
   * Refusals of new INVITEs decided from the packet alone (SIP_INBOUND_ALLOW, credentials): answered
   * statelessly, so a spoofed source gets one short response and nothing is kept (docs/sip.md).
   */
  screenInvite: InviteScreen | undefined;
  /**
   * Addresses whose in-dialog requests every dialog accepts, besides the dialog's own far end
   * (SIP_INBOUND_ALLOW). Any other address is refused 403 and its request not applied.
   */
  trustSource: ((address: string) => boolean) | undefined;
  /** Verdicts of INVITEs checked while screened, handed to their IncomingCall. */
  private readonly verdicts = new WeakMap<SipRequest, DigestVerdict>();
  /** In-dialog requests refused for their source, by method, since start. */
  private readonly refusedInDialog = new Map<string, number>();
  private lastRefusalLog = 0;
  private refusalsNotLogged = 0;

  private constructor(o: UaOptions) {
    this.o = o;
    this.onInvite = o.onInvite;
    this.screenInvite = o.screenInvite;
    this.trustSource = o.trustSource;
    this.verifier = o.inboundAuth ? new DigestVerifier(o.inboundAuth) : undefined;
    this.address = o.publicAddress ?? localAddress(o.host);
    this.transport = new Transport({
      host: o.host,
      port: o.port,
      onMessage: (m, from) => this.layer.receive(m, from),
      onError: (err, from) => this.o.log?.debug({ err: err.message, from }, 'SIP message refused'),
    });
    this.layer = new TransactionLayer({
      transport: this.transport,
      ...(o.timers ? { timers: o.timers } : {}),
      onRequest: (req, st) => this.onRequest(req, st),
      onAck: () => {},
      onStrayResponse: (res, from) => this.onStrayResponse(res, from),
      screen: (req, from) => this.screen(req, from),
      ackAllowed: (ack, from, st) => {
        const ok = this.trusts(from.address, [st.peer.address]);
        if (!ok) this.refusedFrom(ack, from);
        return ok;
      },
    });
  }

  static async start(o: UaOptions): Promise<UserAgent> {
    const ua = new UserAgent(o);
    await ua.transport.listen();
    return ua;
  }

  get port(): number {
    return this.transport.port;
  }

  /**
   * What the Prometheus metrics read (src/transmission/sip/sip-metrics.ts): in-dialog requests refused
   * for their source by method, responses sent without a transaction, server transactions held now.
   */
  counters(): {
    inDialogRefused: Record<string, number>;
    statelessResponses: number;
    serverTransactions: number;
  } {
    return {
      inDialogRefused: Object.fromEntries(this.refusedInDialog),
      statelessResponses: this.layer.statelessResponses,
      serverTransactions: this.layer.serverTransactions,
    };
  }

  /** Calls in progress: dialogs and incoming INVITEs not yet answered. */
  get calls(): number {
    return this.dialogs.size + this.pendingIncoming.size;
  }

  contact(transport: TransportName): string {
    const host = this.address.includes(':') ? `[${this.address}]` : this.address;
    return `<sip:faxline@${host}:${this.port}${transport === 'tcp' ? ';transport=tcp' : ''}>`;
  }

  private via(transport: TransportName, branch = newBranch()): Header {
    const host = this.address.includes(':') ? `[${this.address}]` : this.address;
    return {
      name: 'Via',
      value: `SIP/2.0/${transport.toUpperCase()} ${host}:${this.port};branch=${branch};rport`,
    };
  }

  private common(): Header[] {
    return [
      { name: 'Max-Forwards', value: '70' },
      { name: 'User-Agent', value: this.o.userAgent ?? 'faxline' },
    ];
  }

  /**
   * Sends a request, answering up to two digest challenges (401/407) with the credentials. `make`
   * builds the request for a CSeq and the auth headers; it is called again for each resend.
   */
  private async withAuth(
    make: (auth: Header[]) => SipRequest,
    peer: Peer,
    hooks: { onTx?: (tx: ClientTransaction) => void; onProvisional?: (res: SipResponse) => void } = {},
  ): Promise<SipResponse | ClientFailure> {
    let auth: Header[] = [];
    for (let round = 0; ; round++) {
      const req = make(auth);
      const res = await new Promise<SipResponse | ClientFailure>((resolve) => {
        const tx = this.layer.request(req, peer, {
          onResponse: (r) => {
            if (r.status < 200) hooks.onProvisional?.(r);
            else resolve(r);
          },
          onFailure: (f) => resolve(f),
        });
        hooks.onTx?.(tx);
      });
      if (!('kind' in res) || (res.status !== 401 && res.status !== 407)) return res;
      const creds = this.o.credentials;
      if (!creds || round >= 2) return res;
      const field = res.status === 401 ? 'WWW-Authenticate' : 'Proxy-Authenticate';
      const values = res.headers
        .filter((h) => h.name.toLowerCase() === field.toLowerCase())
        .map((h) => h.value);
      const challenges = values.flatMap((v) => {
        try {
          return [parseChallenge(v)];
        } catch {
          return [];
        }
      });
      // Prefer SHA-256 when offered (RFC 8760), else the first supported one.
      const c =
        challenges.find((x) => supported(x) && x.algorithm.startsWith('SHA-256')) ??
        challenges.find(supported);
      if (!c) return res;
      if (round > 0 && !c.stale && auth.length > 0) return res; // the same credentials were refused
      const a = authorize({
        challenge: c,
        method: req.method,
        uri: req.uri,
        username: creds.username,
        password: creds.password,
        nc: 1,
      });
      auth = [{ name: res.status === 401 ? 'Authorization' : 'Proxy-Authorization', value: a.value }];
    }
  }

  /** Places a call: resolves at the final response (or cancel or timeout). */
  async invite(o: InviteOptions): Promise<InviteResult> {
    const peer = o.via ?? hopOf(o.requestUri);
    const callId = `${hex(12)}@faxline`;
    const localTag = hex(6);
    const ru = parseUri(o.requestUri);
    const fromHost = o.fromHost ?? ru.host;
    const display = o.fromDisplay ? `"${o.fromDisplay.replace(/["\\\r\n]/g, '')}" ` : '';
    const localUri = `${display}<sip:${o.fromUser}@${fromHost}>`;
    const remoteUri = `<${o.requestUri.split(';')[0]}>`;
    let seq = 1 + Math.floor(Math.random() * 1000);
    let current: ClientTransaction | undefined;
    let lastInvite: SipRequest | undefined;
    let cancelWanted = false;
    let cancelSent = false;
    let gaveUp: ((r: ClientFailure) => void) | undefined;
    const sendCancel = () => {
      if (cancelSent || !current || !lastInvite) return;
      cancelSent = true;
      const inv = lastInvite;
      const cancel: SipRequest = {
        kind: 'request',
        method: 'CANCEL',
        uri: inv.uri,
        headers: [
          { name: 'Via', value: headerValues(inv, 'Via')[0] ?? '' },
          ...inv.headers.filter((h) => h.name === 'Route'),
          ...this.common(),
          { name: 'From', value: header(inv, 'From') ?? '' },
          { name: 'To', value: header(inv, 'To') ?? '' },
          { name: 'Call-ID', value: callId },
          { name: 'CSeq', value: `${parseCSeq(header(inv, 'CSeq') ?? '').seq} CANCEL` },
        ],
        body: Buffer.alloc(0),
      };
      this.layer.request(cancel, peer, { onResponse: () => {}, onFailure: () => {} });
    };
    const onAbort = () => {
      cancelWanted = true;
      if (current?.provisional) sendCancel();
      else if (current && !current.done) {
        // Nothing answered yet: RFC 3261 9.1 says not to CANCEL; give up locally instead. A late
        // 2xx then finds no dialog and is ACKed and hung up (onStrayResponse).
        current.terminate();
        gaveUp?.({ status: 408, reason: 'cancelled before any answer' });
      }
    };
    if (o.signal?.aborted)
      return { ok: false, status: 487, reason: 'cancelled before sending', callId, cancelled: true };
    o.signal?.addEventListener('abort', onAbort, { once: true });
    const calling = `${callId}|${localTag}`;
    this.calling.add(calling);
    try {
      const res = await Promise.race([
        new Promise<ClientFailure>((r) => {
          gaveUp = r;
        }),
        this.withAuth(
          (auth) => {
            seq++;
            lastInvite = {
              kind: 'request',
              method: 'INVITE',
              uri: o.requestUri,
              headers: [
                this.via(peer.transport),
                ...this.common(),
                { name: 'From', value: `${localUri};tag=${localTag}` },
                { name: 'To', value: remoteUri },
                { name: 'Call-ID', value: callId },
                { name: 'CSeq', value: `${seq} INVITE` },
                { name: 'Contact', value: this.contact(peer.transport) },
                { name: 'Allow', value: 'INVITE, ACK, CANCEL, BYE, OPTIONS' },
                ...auth,
                { name: 'Content-Type', value: 'application/sdp' },
              ],
              body: Buffer.from(o.sdp, 'utf8'),
            };
            return lastInvite;
          },
          peer,
          {
            onTx: (tx) => {
              current = tx;
            },
            onProvisional: (r) => {
              o.onProvisional?.(r.status);
              if (cancelWanted) sendCancel();
            },
          },
        ),
      ]);
      if (!('kind' in res)) {
        return {
          ok: false,
          status: cancelWanted ? 487 : res.status,
          reason: res.reason,
          callId,
          cancelled: cancelWanted,
        };
      }
      if (res.status >= 300) {
        return { ok: false, status: res.status, reason: res.reason, callId, cancelled: cancelWanted };
      }
      const toTag = parseNameAddr(header(res, 'To') ?? '').params.get('tag') ?? '';
      const contact = header(res, 'Contact');
      const dialog = new Dialog(
        {
          callId,
          localTag,
          remoteTag: toTag,
          localUri,
          remoteUri,
          localSeq: seq,
          remoteSeq: 0,
          remoteTarget: contact ? parseNameAddr(contact).uri : o.requestUri,
          routeSet: headerValues(res, 'Record-Route').reverse(),
          transport: peer.transport,
          firstHop: peer,
          sources: [this.layer.sourceOf(res)?.address, isIP(peer.address) ? peer.address : undefined].filter(
            (a): a is string => a !== undefined,
          ),
        },
        this,
      );
      this.dialogs.set(dialog.id, dialog);
      this.ackInDialog(dialog, seq);
      dialog.confirm();
      if (cancelWanted) {
        // The answer crossed our CANCEL: the call exists, so it is hung up at once.
        await dialog.bye();
        return { ok: false, status: 487, reason: 'answered after cancel (hung up)', callId, cancelled: true };
      }
      return { ok: true, status: res.status, dialog, answer: res.body.toString('utf8'), callId };
    } finally {
      this.calling.delete(calling);
      o.signal?.removeEventListener('abort', onAbort);
    }
  }

  private readonly acks = new Map<string, SipRequest>();

  /** ACK for a 2xx: a request of the dialog with its own branch, sent again for each 2xx retransmission. */
  ackInDialog(d: Dialog, seq: number): void {
    const ack: SipRequest = {
      kind: 'request',
      method: 'ACK',
      uri: d.s.remoteTarget,
      headers: [this.via(d.nextHop().transport), ...this.common(), ...d.requestHeaders('ACK', seq)],
      body: Buffer.alloc(0),
    };
    this.acks.set(`${d.callId}|${seq}`, ack);
    setTimeout(() => this.acks.delete(`${d.callId}|${seq}`), 64 * this.layer.timers.t1).unref();
    this.layer.sendDirect(ack, d.nextHop()).catch(() => {});
  }

  sendInDialog(
    d: Dialog,
    method: string,
    o: { body?: string; contentType?: string },
  ): Promise<SipResponse | ClientFailure> {
    const hop = d.nextHop();
    const sent = this.withAuth((auth) => {
      d.s.localSeq++;
      return {
        kind: 'request',
        method,
        uri: d.s.remoteTarget,
        headers: [
          this.via(hop.transport),
          ...this.common(),
          ...d.requestHeaders(method, d.s.localSeq),
          ...(method === 'INVITE' ? [{ name: 'Contact', value: this.contact(hop.transport) }] : []),
          ...auth,
          ...(o.contentType ? [{ name: 'Content-Type', value: o.contentType }] : []),
        ],
        body: Buffer.from(o.body ?? '', 'utf8'),
      };
    }, hop);
    if (method === 'BYE') {
      this.hangups.add(sent);
      const gone = () => this.hangups.delete(sent);
      sent.then(gone, gone);
    }
    return sent;
  }

  forget(d: Dialog): void {
    this.dialogs.delete(d.id);
  }

  private onStrayResponse(res: SipResponse, from: Peer): void {
    if (res.status < 200 || res.status >= 300) return;
    const cseq = parseCSeq(header(res, 'CSeq') ?? '');
    if (cseq.method !== 'INVITE') return;
    const callId = header(res, 'Call-ID') ?? '';
    const ack = this.acks.get(`${callId}|${cseq.seq}`);
    if (ack) {
      this.layer.sendDirect(ack, from).catch(() => {});
      return;
    }
    // A 2xx for a call we gave up on (or a fork we do not keep): ACK it, then hang it up.
    const fromTag = parseNameAddr(header(res, 'From') ?? '').params.get('tag') ?? '';
    const to = header(res, 'To') ?? '';
    const toTag = parseNameAddr(to).params.get('tag') ?? '';
    const contact = header(res, 'Contact');
    const d = new Dialog(
      {
        callId,
        localTag: fromTag,
        remoteTag: toTag,
        localUri: (header(res, 'From') ?? '').replace(/;tag=[^;]*/, ''),
        remoteUri: to.replace(/;tag=[^;]*/, ''),
        localSeq: cseq.seq,
        remoteSeq: 0,
        remoteTarget: contact ? parseNameAddr(contact).uri : `sip:${from.address}:${from.port}`,
        routeSet: headerValues(res, 'Record-Route').reverse(),
        transport: from.transport,
        firstHop: from,
        sources: [from.address],
      },
      this,
    );
    this.ackInDialog(d, cseq.seq);
    d.bye().catch(() => {});
  }

  private respond(st: ServerTransaction, status: number, headers: Header[] = [], body?: Buffer): void {
    st.respond(makeResponse(st.request, status, { headers, ...(body ? { body } : {}) }));
  }

  /**
   * A response sent without a transaction (LayerOptions.screen): nothing but the fields RFC 3261
   * 8.2.6.2 copies and a To tag derived from the request (RFC 3261 8.2.7: a retransmission gets the
   * same tag), so it is never much larger than what came in.
   */
  private stateless(
    req: SipRequest,
    status: number,
    o: { reason?: string; headers?: Header[] } = {},
  ): SipResponse {
    const fromTag = parseNameAddr(header(req, 'From') ?? '').params.get('tag') ?? '';
    const branch = parseVia(headerValues(req, 'Via')[0] ?? '').params.get('branch') ?? '';
    const toTag = createHash('sha256')
      .update(`${header(req, 'Call-ID') ?? ''}|${fromTag}|${branch}`)
      .digest('hex')
      .slice(0, 10);
    return makeResponse(req, status, {
      toTag,
      ...(o.headers ? { headers: o.headers } : {}),
      ...(o.reason ? { reason: o.reason.slice(0, 40) } : {}),
    });
  }

  /**
   * 401 without a transaction: the challenges (MD5, SHA-256, as configured) that fit in the size of
   * the INVITE, at least the first, so the answer is about as large as the request and never a
   * multiple of it.
   */
  private statelessChallenge(req: SipRequest, verdict: DigestVerdict | undefined): SipResponse {
    const verifier = this.verifier;
    if (!verifier) return this.stateless(req, 401);
    const stale = verdict?.ok === false && verdict.kind === 'stale';
    const all = verifier.challenges(stale).map((value) => ({ name: 'WWW-Authenticate', value }));
    const size = serialize(req).length;
    let res = this.stateless(req, 401, { headers: all.slice(0, 1) });
    for (let n = 2; n <= all.length; n++) {
      const more = this.stateless(req, 401, { headers: all.slice(0, n) });
      if (serialize(more).length > size) break;
      res = more;
    }
    return res;
  }

  /** True when `address` is one of `own` (the dialog's far end) or trusted by trustSource. */
  private trusts(address: string, own: string[]): boolean {
    const a = plainAddress(address);
    if (own.some((o) => plainAddress(o) === a)) return true;
    return this.trustSource?.(a) ?? false;
  }

  /**
   * Where a dialog's far end may send from: the address its first message came from (the INVITE we
   * answered, the 2xx to ours), the hop we sent to and, with no route set, its remote target's host
   * (the far end reaching us directly); besides those, trustSource (SIP_INBOUND_ALLOW).
   */
  private trustedFor(d: Dialog, address: string): boolean {
    const own = [...d.s.sources];
    if (d.s.routeSet.length === 0) {
      try {
        const host = parseUri(d.s.remoteTarget).host.replace(/^\[|\]$/g, '');
        if (isIP(host)) own.push(host);
      } catch {
        // no usable target: its own sources only
      }
    }
    return this.trusts(address, own);
  }

  /** Counts and logs (content-free, at most one line per 10 s) a request refused for its source. */
  private refusedFrom(req: SipRequest, from: Peer): void {
    const method = countedMethods.has(req.method) ? req.method : 'other';
    this.refusedInDialog.set(method, (this.refusedInDialog.get(method) ?? 0) + 1);
    const now = Date.now();
    if (now - this.lastRefusalLog < 10_000) {
      this.refusalsNotLogged++;
      return;
    }
    this.o.log?.warn(
      { method, source: from.address, port: from.port, notLogged: this.refusalsNotLogged },
      "in-dialog SIP request from an address that is not the call's refused (403)",
    );
    this.lastRefusalLog = now;
    this.refusalsNotLogged = 0;
  }

  private dialogOf(req: SipRequest, toTag: string): Dialog | undefined {
    const fromTag = parseNameAddr(header(req, 'From') ?? '').params.get('tag') ?? '';
    return this.dialogs.get(`${header(req, 'Call-ID')}|${toTag}|${fromTag}`);
  }

  /**
   * Every new request passes here before any state is kept for it (LayerOptions.screen): what can
   * be refused, or answered without a transaction, is answered statelessly. A request in a dialog
   * from an address that is not the dialog's far end (nor on trustSource) is refused 403 and not
   * applied; a new INVITE refused by screenInvite gets no 100 Trying and no retransmission.
   */
  private screen(req: SipRequest, from: Peer): SipResponse | undefined {
    if (this.closed) return this.stateless(req, 503);
    const allow = [{ name: 'Allow', value: 'INVITE, ACK, CANCEL, BYE, OPTIONS' }];
    if (req.method === 'CANCEL') {
      const inv = this.layer.inviteFor(req);
      if (!inv) return this.stateless(req, 481);
      if (!this.trusts(from.address, [inv.peer.address])) {
        this.refusedFrom(req, from);
        return this.stateless(req, 403);
      }
      return undefined;
    }
    const toTag = parseNameAddr(header(req, 'To') ?? '').params.get('tag');
    if (toTag) {
      const d = this.dialogOf(req, toTag);
      if (!d) {
        // A re-INVITE that overtook the 200 of our own INVITE (UDP keeps no order, nor does a proxy
        // with several workers): the dialog is about to exist. 491 asks the far end to try again
        // shortly (RFC 3261 14.1); 481 would end its side of the call.
        if (req.method === 'INVITE' && this.calling.has(`${header(req, 'Call-ID')}|${toTag}`))
          return this.stateless(req, 491);
        return this.stateless(req, 481);
      }
      if (!this.trustedFor(d, from.address)) {
        this.refusedFrom(req, from);
        return this.stateless(req, 403);
      }
      return undefined;
    }
    switch (req.method) {
      case 'INVITE':
        break;
      // Outside a dialog nothing else changes anything: answered without keeping a transaction.
      case 'OPTIONS':
        return this.stateless(req, 200, { headers: allow });
      case 'BYE':
        return this.stateless(req, 481);
      default:
        return this.stateless(req, 405, { headers: allow });
    }
    if (!this.onInvite) return this.stateless(req, 480);
    if (this.calls >= (this.o.maxCalls ?? 1000))
      return this.stateless(req, 503, { headers: [{ name: 'Retry-After', value: '30' }] });
    const ct = header(req, 'Content-Type');
    if (req.body.length > 0 && ct && !/^application\/sdp\b/i.test(ct)) return this.stateless(req, 415);
    const verdict = this.verifier ? checkCredentials(this.verifier, req) : undefined;
    const refusal = this.screenInvite?.({ source: plainAddress(from.address), auth: verdict });
    if (refusal) {
      if (refusal.status === 401) return this.statelessChallenge(req, verdict);
      return this.stateless(req, refusal.status, refusal.reason ? { reason: refusal.reason } : {});
    }
    if (verdict) this.verdicts.set(req, verdict);
    return undefined;
  }

  private onRequest(req: SipRequest, st: ServerTransaction): void {
    // What reaches here passed screen(): a CANCEL of a pending INVITE from its caller, a request in
    // a dialog from its far end, or a new INVITE to hand to onInvite.
    if (this.closed) return this.respond(st, 503);
    if (req.method === 'CANCEL') {
      const inv = this.layer.inviteFor(req);
      if (!inv) return this.respond(st, 481);
      this.respond(st, 200);
      if (inv.pending) inv.onCancel?.();
      return;
    }
    const toTag = parseNameAddr(header(req, 'To') ?? '').params.get('tag');
    if (toTag) return this.inDialog(req, st, toTag);
    if (req.method === 'INVITE') return this.newCall(req, st);
    this.respond(st, 405, [{ name: 'Allow', value: 'INVITE, ACK, CANCEL, BYE, OPTIONS' }]);
  }

  private newCall(req: SipRequest, st: ServerTransaction): void {
    const handler = this.onInvite;
    if (!handler) return this.respond(st, 480);
    let call: IncomingCall;
    try {
      call = new IncomingCall(this, req, st, this.verifier, this.verdicts.get(req));
    } catch {
      return this.respond(st, 400);
    }
    const k = `${call.callId}|${header(req, 'CSeq')}`;
    this.pendingIncoming.add(k);
    const done = () => this.pendingIncoming.delete(k);
    call.cancelled.addEventListener('abort', done, { once: true });
    const origRespond = st.respond.bind(st);
    st.respond = (res) => {
      if (res.status >= 200) done();
      origRespond(res);
    };
    try {
      handler(call);
    } catch {
      call.reject(500);
    }
  }

  acceptIncoming(req: SipRequest, st: ServerTransaction, localTag: string, sdp: string): Dialog {
    const from = parseNameAddr(header(req, 'From') ?? '');
    const to = header(req, 'To') ?? '';
    const contact = header(req, 'Contact');
    const d = new Dialog(
      {
        callId: header(req, 'Call-ID') ?? '',
        localTag,
        remoteTag: from.params.get('tag') ?? '',
        localUri: to,
        remoteUri: (header(req, 'From') ?? '').replace(/;\s*tag=[^;]*/i, ''),
        localSeq: Math.floor(Math.random() * 1000),
        remoteSeq: parseCSeq(header(req, 'CSeq') ?? '').seq,
        remoteTarget: contact ? parseNameAddr(contact).uri : from.uri,
        routeSet: headerValues(req, 'Record-Route'),
        transport: st.peer.transport,
        firstHop: st.peer,
        sources: [st.peer.address],
      },
      this,
    );
    this.dialogs.set(d.id, d);
    st.onAck = () => d.confirm();
    st.onNoAck = () => {
      d.bye().catch(() => {});
      d.end('no_ack');
    };
    st.respond(
      makeResponse(req, 200, {
        toTag: localTag,
        headers: [
          ...req.headers.filter((h) => h.name === 'Record-Route'),
          { name: 'Contact', value: this.contact(st.peer.transport) },
          { name: 'Content-Type', value: 'application/sdp' },
        ],
        body: Buffer.from(sdp, 'utf8'),
      }),
    );
    return d;
  }

  private inDialog(req: SipRequest, st: ServerTransaction, toTag: string): void {
    const d = this.dialogOf(req, toTag);
    // Screened already; the dialog may have ended since (between screen and here nothing runs, but
    // a request whose dialog is gone is answered as screen() would).
    if (!d) return this.respond(st, 481);
    if (!this.trustedFor(d, st.peer.address)) {
      this.refusedFrom(req, st.peer);
      return this.respond(st, 403);
    }
    const seq = parseCSeq(header(req, 'CSeq') ?? '').seq;
    if (seq <= d.s.remoteSeq) return this.respond(st, 500, [{ name: 'Retry-After', value: '1' }]);
    d.s.remoteSeq = seq;
    switch (req.method) {
      case 'BYE':
        this.respond(st, 200);
        d.end('remote_bye');
        return;
      case 'INVITE':
        return this.reinvited(d, req, st);
      case 'OPTIONS':
      case 'INFO':
        return this.respond(st, 200);
      default:
        return this.respond(st, 405, [{ name: 'Allow', value: 'INVITE, ACK, CANCEL, BYE, OPTIONS' }]);
    }
  }

  private reinvited(d: Dialog, req: SipRequest, st: ServerTransaction): void {
    if (d.reinviting) return this.respond(st, 491);
    const handler = d.onReinvite;
    if (!handler) return this.respond(st, 488);
    Promise.resolve()
      .then(() => handler(req.body.toString('utf8')))
      .then(
        (decision) => {
          if (decision.status >= 200 && decision.status < 300 && decision.sdp !== undefined) {
            d.updateTarget(req);
            st.respond(
              makeResponse(req, 200, {
                headers: [
                  { name: 'Contact', value: this.contact(st.peer.transport) },
                  { name: 'Content-Type', value: 'application/sdp' },
                ],
                body: Buffer.from(decision.sdp, 'utf8'),
              }),
            );
          } else this.respond(st, decision.status >= 300 ? decision.status : 488);
        },
        () => this.respond(st, 500),
      );
  }

  /**
   * Keeps a registration of `aor` at `registrar` fresh (refreshed at 80 % of the granted time,
   * retried every 30 s while refused). Returns stop(), which unregisters.
   */
  register(o: {
    registrar: string;
    user: string;
    expires?: number;
    onState?: (ok: boolean, status: number) => void;
  }): {
    stop: () => Promise<void>;
  } {
    const peer = hopOf(o.registrar);
    const ru = parseUri(o.registrar);
    const registrarUri = `sip:${ru.host}${ru.port ? `:${ru.port}` : ''}`;
    const aor = `<sip:${o.user}@${ru.host}>`;
    const callId = `${hex(12)}@faxline`;
    const tag = hex(6);
    let seq = 0;
    let timer: NodeJS.Timeout | undefined;
    let stopped = false;
    const once = async (expires: number): Promise<void> => {
      const res = await this.withAuth((auth) => {
        seq++;
        return {
          kind: 'request',
          method: 'REGISTER',
          uri: registrarUri,
          headers: [
            this.via(peer.transport),
            ...this.common(),
            { name: 'From', value: `${aor};tag=${tag}` },
            { name: 'To', value: aor },
            { name: 'Call-ID', value: callId },
            { name: 'CSeq', value: `${seq} REGISTER` },
            { name: 'Contact', value: this.contact(peer.transport) },
            { name: 'Expires', value: String(expires) },
            ...auth,
          ],
          body: Buffer.alloc(0),
        };
      }, peer);
      if (expires === 0 || stopped) return;
      const status = 'kind' in res ? res.status : res.status;
      const ok = status >= 200 && status < 300;
      o.onState?.(ok, status);
      let granted = expires;
      if ('kind' in res && ok) {
        const mine = headerValues(res, 'Contact').find((c) => c.includes(`:${this.port}`));
        const e = mine ? parseNameAddr(mine).params.get('expires') : header(res, 'Expires');
        if (e && /^\d+$/.test(e)) granted = Number(e);
      }
      const next = ok ? Math.max(5, Math.floor(granted * 0.8)) : 30;
      timer = setTimeout(() => void once(expires), next * 1000);
    };
    void once(o.expires ?? 600);
    return {
      // Unregisters. A trunk that died never answers, and the REGISTER would be retransmitted until
      // Timer F (32 s): stop() waits 4·T1 at most, as close() does for BYEs; close() then ends the
      // transaction.
      stop: async () => {
        stopped = true;
        clearTimeout(timer);
        let t: NodeJS.Timeout | undefined;
        await Promise.race([
          once(0).catch(() => {}),
          new Promise((r) => (t = setTimeout(r, 4 * this.layer.timers.t1))),
        ]);
        clearTimeout(t);
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Hang up what is still up; a far end that does not answer the BYE (ours now, or one sent
    // earlier and still retransmitted) is not waited for long: after 4·T1 the layer closes, which
    // ends every transaction still open, so each BYE has settled before the socket goes.
    for (const d of [...this.dialogs.values()]) d.bye().catch(() => {});
    const byes = Promise.allSettled([...this.hangups]);
    let t: NodeJS.Timeout | undefined;
    await Promise.race([byes, new Promise((r) => (t = setTimeout(r, 4 * this.layer.timers.t1)))]);
    clearTimeout(t);
    this.layer.close();
    await byes;
    await this.transport.close();
  }
}
