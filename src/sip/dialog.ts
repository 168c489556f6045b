// A SIP dialog (RFC 3261 section 12): the state one call keeps between its INVITE and its BYE, on
// either side. Requests inside it carry the dialog's Call-ID and tags, a CSeq one higher each time,
// the route set learnt from Record-Route and go to the remote target learnt from Contact.
import {
  type Header,
  header,
  parseNameAddr,
  parseUri,
  type SipRequest,
  type SipResponse,
} from './message.ts';
import type { ClientFailure } from './transaction.ts';
import type { Peer, TransportName } from './transport.ts';

/** What the core offers a dialog: sending a request through it, with digest auth, and forgetting it. */
export interface DialogHost {
  sendInDialog(
    d: Dialog,
    method: string,
    o: { body?: string; contentType?: string },
  ): Promise<SipResponse | ClientFailure>;
  ackInDialog(d: Dialog, seq: number): void;
  forget(d: Dialog): void;
}

export type ReinviteDecision = { status: 200; sdp: string } | { status: number; sdp?: undefined };

export type EndReason = 'local_bye' | 'remote_bye' | 'no_ack' | 'closed';

export interface DialogState {
  callId: string;
  localTag: string;
  remoteTag: string;
  /** From (UAC) or To (UAS) as we present ourselves, without the tag. */
  localUri: string;
  remoteUri: string;
  localSeq: number;
  remoteSeq: number;
  remoteTarget: string;
  /** Route header values in the order requests carry them. */
  routeSet: string[];
  transport: TransportName;
  /** Where the dialog's first request went (fallback when the target has no usable host). */
  firstHop: Peer;
  /**
   * Addresses the far end's requests in this dialog may come from (the INVITE's source, the 2xx's
   * source, our first hop): any other is refused 403 (UserAgent, docs/sip.md).
   */
  sources: string[];
}

export class Dialog {
  readonly s: DialogState;
  private readonly host: DialogHost;
  private ended = false;
  private endWaiters: ((r: EndReason) => void)[] = [];
  private endReason: EndReason | undefined;
  /** Our 2xx to the INVITE that made the dialog has its ACK (at once for a dialog we started). */
  private confirmedNow = false;
  private confirmWaiters: ((ok: boolean) => void)[] = [];
  /** Set while a re-INVITE of ours is outstanding (a crossing one from the far end gets 491). */
  reinviting = false;
  /** Decides an incoming re-INVITE (offer SDP in, our answer out). Without one: 488. */
  onReinvite: ((offer: string) => Promise<ReinviteDecision> | ReinviteDecision) | undefined;

  constructor(s: DialogState, host: DialogHost) {
    this.s = s;
    this.host = host;
  }

  get id(): string {
    return `${this.s.callId}|${this.s.localTag}|${this.s.remoteTag}`;
  }

  get callId(): string {
    return this.s.callId;
  }

  get active(): boolean {
    return !this.ended;
  }

  /** Resolves when the dialog ends, with why. */
  waitEnd(): Promise<EndReason> {
    if (this.endReason) return Promise.resolve(this.endReason);
    return new Promise((r) => this.endWaiters.push(r));
  }

  /** The next hop of a request in this dialog (RFC 3261 12.2.1.1, loose routing). */
  nextHop(): Peer {
    const target = this.s.routeSet[0] ? parseNameAddr(this.s.routeSet[0]).uri : this.s.remoteTarget;
    try {
      const u = parseUri(target);
      const t = u.params.get('transport')?.toLowerCase();
      return {
        transport: t === 'tcp' || t === 'udp' ? t : this.s.transport,
        address: u.host.replace(/^\[|\]$/g, ''),
        port: u.port ?? 5060,
      };
    } catch {
      return this.s.firstHop;
    }
  }

  /** Headers every request of the dialog carries (RFC 3261 12.2.1.1). */
  requestHeaders(method: string, seq: number): Header[] {
    return [
      ...this.s.routeSet.map((value) => ({ name: 'Route', value })),
      { name: 'From', value: `${this.s.localUri};tag=${this.s.localTag}` },
      { name: 'To', value: `${this.s.remoteUri};tag=${this.s.remoteTag}` },
      { name: 'Call-ID', value: this.s.callId },
      { name: 'CSeq', value: `${seq} ${method}` },
    ];
  }

  /** Hangs up (BYE). Resolves once the far end answered or the transaction timed out. */
  async bye(): Promise<void> {
    if (this.ended) return;
    this.end('local_bye');
    await this.host.sendInDialog(this, 'BYE', {});
  }

  /**
   * The INVITE transaction that made the dialog is over: the ACK of our 2xx arrived (UAS), or we
   * sent the ACK (UAC). Until then a re-INVITE must wait (RFC 3261 14.1: no new INVITE while one
   * is in progress in either direction); the first one could overtake our 200, and the caller, not
   * knowing the dialog yet, would refuse it with 481.
   */
  confirm(): void {
    if (this.confirmedNow) return;
    this.confirmedNow = true;
    for (const w of this.confirmWaiters.splice(0)) w(true);
  }

  /** Resolves true once confirmed, false if the dialog ended first (no ACK ends it: bounded). */
  confirmed(): Promise<boolean> {
    if (this.confirmedNow) return Promise.resolve(true);
    if (this.ended) return Promise.resolve(false);
    return new Promise((r) => this.confirmWaiters.push(r));
  }

  /**
   * Sends a re-INVITE with `sdp` (once the dialog is confirmed); resolves with the final status and
   * the answer SDP on 2xx.
   */
  async reinvite(sdp: string): Promise<{ status: number; sdp: string | undefined }> {
    if (this.ended || !(await this.confirmed()) || this.ended) return { status: 481, sdp: undefined };
    this.reinviting = true;
    try {
      const res = await this.host.sendInDialog(this, 'INVITE', { body: sdp, contentType: 'application/sdp' });
      if ('kind' in res && res.status >= 200 && res.status < 300) {
        this.updateTarget(res);
        this.host.ackInDialog(this, Number.parseInt(header(res, 'CSeq') ?? '0', 10));
        return { status: res.status, sdp: res.body.toString('utf8') };
      }
      if ('kind' in res && (res.status === 481 || res.status === 408)) this.end('remote_bye');
      return { status: res.status, sdp: undefined };
    } finally {
      this.reinviting = false;
    }
  }

  /** A target refresh (re-INVITE and its 2xx) may move the remote target. */
  updateTarget(m: SipRequest | SipResponse): void {
    const contact = header(m, 'Contact');
    if (!contact) return;
    try {
      this.s.remoteTarget = parseNameAddr(contact).uri;
    } catch {
      // keep the old target
    }
  }

  /** Marks the dialog ended and tells the waiters; idempotent. */
  end(reason: EndReason): void {
    if (this.ended) return;
    this.ended = true;
    this.endReason = reason;
    this.host.forget(this);
    for (const w of this.endWaiters.splice(0)) w(reason);
    for (const w of this.confirmWaiters.splice(0)) w(false);
  }
}
