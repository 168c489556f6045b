// The SIP line (BACKEND=sip): one SIP call per transmit() to the trunk, the fax carried by the media
// engine (G.711 audio, or T.38 after a re-INVITE either way), and the call's end mapped to the
// shared failure types. The same user agent also answers calls and receives faxes (SipLine.answer).
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Dialog, IncomingCall, Log, Timers } from '../../sip/ua.ts';
import { hopOf, UserAgent } from '../../sip/ua.ts';
import { isE164 } from '../../domain/e164.ts';
import { parseUri } from '../../sip/message.ts';
import { agreeT38, answerOffer, audioOffer, readSdp, t38Offer, type LocalMedia } from '../../sip/sdp.ts';
import type { CallControl, Outcome, PreparedFax, Progress, TransmissionBackend } from '../backend.ts';
import type { MediaEngine, MediaEvent, MediaResult, MediaSession, MediaStartOptions } from './media.ts';
import { mediaUnavailableMessage } from './media-engine.ts';
import { classifyStatus, classifyT30 } from './outcome.ts';
import { contextFromStored, inSpan, SpanKind, spanAttributes, spanEvent } from '../../trace.ts';
import { pidAlive } from '../../pid.ts';

export type T38Mode = 'prefer' | 'accept' | 'off';

export interface SipLineOptions {
  /** The trunk's SIP URI, e.g. sip:trunk.example.net:5060;transport=udp. */
  trunk: string;
  username?: string;
  password?: string;
  listen: { host: string; port: number };
  publicAddress?: string;
  t38: T38Mode;
  rtpPorts: { min: number; max: number };
  ringTimeoutMs: number;
  /**
   * A call (either way) with no RTP or UDPTL packet from the far end for this long is ended with
   * BYE (SIP_MEDIA_TIMEOUT_S; default 20 s). Fax never suppresses silence: a live far end always sends.
   */
  mediaTimeoutMs?: number;
  /** The longest an answered (receiving) call may last (INBOUND_MAX_CALL_SECONDS; default 1 h). */
  maxReceiveMs?: number;
  /**
   * Receiving: the longest page accepted, in millimetres (INBOUND_MAX_PAGE_MM; default 1000); a
   * longer one ends the call, the pages before it kept. 0: no limit.
   */
  maxPageMm?: number;
  /** Receiving: the most pages one call may bring (INBOUND_MAX_PAGES; default 500). 0: no limit. */
  maxPages?: number;
  /** Receiving with ECM: offer T.6 coding too (INBOUND_T6; default false, see MediaStartOptions.rxT6). */
  inboundT6?: boolean;
  /** Register SIP_USERNAME at the trunk (and keep it fresh). */
  register?: boolean;
  /**
   * Digest credentials inbound INVITEs must carry (SIP_INBOUND_USERNAME, SIP_INBOUND_PASSWORD,
   * SIP_INBOUND_REALM): checked after SIP_INBOUND_ALLOW; none is challenged 401, a wrong one 403.
   */
  inboundAuth?: {
    realm: string;
    username: string;
    password: string;
    algorithms?: ('MD5' | 'SHA-256')[];
    now?: () => number;
  };
  /** The media engine, or a loader of it (the native module is loaded at first use). */
  media: MediaEngine | (() => Promise<MediaEngine | null>);
  timers?: Partial<Timers>;
  log?: Log;
}

/** What the answering side reports for each call it took. */
export interface ReceivedFax {
  callId: string;
  from: string;
  to: string;
  file: string;
  ok: boolean;
  /** Why it ended: the T.30 text, or a SIP/media reason. */
  reason: string;
  pages: number;
  result: MediaResult | undefined;
  remoteBye: boolean;
  /** The line ended the call itself: no media from the far end, or the time limit (INBOUND_MAX_CALL_SECONDS). */
  localEnd?: LocalEnd['kind'];
}

export interface AnswerOptions {
  /**
   * Where to write the fax and what CSI to present, or a SIP status to refuse the call with. May be
   * async (routing reads the numbers table). Once it said where to write, `onResult` is called for
   * the call however it ends (also when it is never answered: no media port, no usable offer, a
   * CANCEL), so what was decided can be released.
   */
  decide: (call: {
    callId: string;
    from: string;
    to: string;
    /** The INVITE's Request-URI and the packet's source address. */
    requestUri: string;
    source: string;
    /** What the INVITE's credentials were found to be; 'off' when none are demanded. */
    auth: InboundAuthState;
  }) =>
    | { file: string; ident: string }
    | { reject: number; reason?: string }
    | Promise<{ file: string; ident: string } | { reject: number; reason?: string }>;
  onResult: (r: ReceivedFax) => void;
  ecm?: boolean;
  /**
   * Refusals decided from the packet alone (the source allow-list, then the credentials), before
   * anything is kept for the INVITE: answered statelessly, with no 100 Trying and no retransmission,
   * so a spoofed source can neither be flooded with answers nor fill memory (docs/sip.md).
   */
  screen?: (call: {
    source: string;
    auth: InboundAuthState;
  }) => { reject: number; reason?: string } | undefined;
  /**
   * Addresses whose in-dialog requests (re-INVITE, BYE, ...) are accepted in every call besides the
   * call's own far end (SIP_INBOUND_ALLOW). Others are refused 403 and not applied.
   */
  trusted?: (address: string) => boolean;
}

/** The check of an inbound INVITE's digest credentials (SipLineOptions.inboundAuth). */
export type InboundAuthState = 'off' | 'ok' | 'missing' | 'stale' | 'failed';

/** The number as the trunk expects it in the Request-URI's user part: E.164 with its '+'. */
export function requestUri(trunk: string, faxNumber: string): string {
  const t = parseUri(trunk);
  const host = t.host.includes(':') && !t.host.startsWith('[') ? `[${t.host}]` : t.host;
  const transport = t.params.get('transport');
  return `sip:${faxNumber}@${host}${t.port ? `:${t.port}` : ''}${transport ? `;transport=${transport}` : ''}`;
}

/** After the far end's BYE, how long the fax engine may take to end on its own before it is stopped. */
const byeGraceMs = 2000;

const defaultMediaTimeoutMs = 20_000;
const defaultMaxReceiveMs = 3_600_000;
const defaultMaxPageMm = 1000;
const defaultMaxPages = 500;

/** Why the line itself ended a call whose far end had not. */
export type LocalEnd = { kind: 'media_timeout'; ms: number } | { kind: 'max_duration'; ms: number };

export function localEndText(e: LocalEnd): string {
  return e.kind === 'media_timeout'
    ? `no media from the far end for ${e.ms / 1000} s`
    : `the call reached its time limit of ${e.ms / 1000} s`;
}

/** Temporary directories of the sending side: faxline-sip-<pid>-XXXXXX, the pid that owns each. */
const tmpPrefix = 'faxline-sip-';
const tmpOwned = /^faxline-sip-(\d+)-[^-]+$/;

/**
 * Removes the temporary directories left by SIP line processes that died without cleaning up
 * (SIGKILL, OOM): only those whose owning pid no longer runs. Returns the names removed.
 */
export async function removeStaleTmp(dir = tmpdir()): Promise<string[]> {
  const removed: string[] = [];
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return removed;
  }
  for (const name of names) {
    const m = tmpOwned.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (pid === process.pid || pidAlive(pid)) continue;
    await rm(join(dir, name), { recursive: true, force: true }).catch(() => {});
    removed.push(name);
  }
  return removed;
}

/** Runs one call's media: the fax engine, re-INVITEs to T.38 and the end of the dialog. */
class CallMedia {
  private readonly session: MediaSession;
  private readonly dialog: Dialog;
  private readonly t38: T38Mode;
  private readonly local: () => LocalMedia;
  transport: 'audio' | 't38';
  remoteBye = false;
  private resolveDone!: (r: MediaResult) => void;
  readonly done: Promise<MediaResult>;
  private progress: Promise<void> = Promise.resolve();
  /** Set when the line ended the call itself: the far end's media stopped, or the time limit. */
  localEnd: LocalEnd | undefined;
  private readonly limits: { mediaTimeoutMs: number; maxMs: number | undefined };

  constructor(
    session: MediaSession,
    dialog: Dialog,
    t38: T38Mode,
    local: () => LocalMedia,
    transport: 'audio' | 't38',
    limits: { mediaTimeoutMs: number; maxMs?: number },
  ) {
    this.limits = { mediaTimeoutMs: limits.mediaTimeoutMs, maxMs: limits.maxMs };
    this.session = session;
    this.dialog = dialog;
    this.t38 = t38;
    this.local = local;
    this.transport = transport;
    this.done = new Promise((r) => (this.resolveDone = r));
    dialog.onReinvite = (offer) => this.reinvited(offer);
    // However the dialog ends (their BYE, no ACK, our BYE, the line closing), the media stops. After
    // their BYE the engine gets a moment first: a receiver hangs up as soon as it has our DCN, while
    // our T.30 is still finishing its last step, and that fax was sent.
    void dialog.waitEnd().then((why) => {
      if (why === 'no_ack') this.remoteBye = true; // the far end never confirmed: the call is gone
      if (why !== 'remote_bye') return session.stop();
      this.remoteBye = true;
      const t = setTimeout(() => session.stop(), byeGraceMs);
      void this.done.finally(() => clearTimeout(t));
    });
  }

  private reinvited(offer: string) {
    const a = answerOffer(offer, this.local(), this.t38 !== 'off');
    if (!a.ok) return { status: 488 as const };
    if (a.transport === 't38') {
      if (this.transport !== 't38') this.session.switchToT38(a.remote, a.t38);
      else this.session.updateRemote(a.remote);
      this.transport = 't38';
    } else if (this.transport === 'audio') this.session.updateRemote(a.remote);
    else return { status: 488 as const }; // back from T.38 to audio: not done mid-fax
    return { status: 200 as const, sdp: a.sdp };
  }

  /** Starts the engine; events become progress reports, awaited in order. */
  start(o: MediaStartOptions, onProgress: (e: MediaEvent) => void | Promise<void>): void {
    this.session.start(o, (e) => {
      this.progress = this.progress.then(() => onProgress(e)).catch(() => {});
      if (e.type === 'done') void this.progress.then(() => this.resolveDone(e.result));
    });
    this.watch();
  }

  private endLocally(e: LocalEnd): void {
    if (this.localEnd || this.remoteBye) return;
    this.localEnd = e;
    this.session.stop();
  }

  /**
   * Watches the far end's media: the session's received counters are read every second (a quarter
   * of the timeout when that is shorter); no new RTP or UDPTL packet for mediaTimeoutMs ends the
   * call. A far end that died without BYE (killed, network gone) is noticed this way. On T.38 a
   * receiving far end is silent while we send a page, so there, UDPTL we sent since the last look
   * counts as activity too (T.30's own response timers end a send to a dead receiver). maxMs, where
   * given, ends the call after that long whatever happens.
   */
  private watch(): void {
    const timeout = this.limits.mediaTimeoutMs;
    const counters = () => {
      try {
        const s = this.session.stats();
        return { received: s.rtpReceived + s.udptlReceived, udptlSent: s.udptlSent };
      } catch {
        return undefined; // the session is already closed
      }
    };
    let last = counters() ?? { received: 0, udptlSent: 0 };
    let lastAt = Date.now();
    const poll = setInterval(
      () => {
        const n = counters();
        if (n === undefined) return;
        const sending = this.transport === 't38' && n.udptlSent !== last.udptlSent;
        if (n.received !== last.received || sending) {
          last = n;
          lastAt = Date.now();
        } else if (Date.now() - lastAt >= timeout) this.endLocally({ kind: 'media_timeout', ms: timeout });
      },
      Math.max(50, Math.min(1000, timeout / 4)),
    );
    const maxMs = this.limits.maxMs;
    const limit =
      maxMs === undefined
        ? undefined
        : setTimeout(() => this.endLocally({ kind: 'max_duration', ms: maxMs }), maxMs);
    void this.done.finally(() => {
      clearInterval(poll);
      clearTimeout(limit);
    });
  }

  /**
   * SIP_T38=prefer: ask for T.38 ourselves; a refusal (488 or anything else) keeps audio. When both
   * ends asked at once (491, glare), ask once more after RFC 3261 14.1's wait: 2.1-4 s for the
   * caller (it chose the Call-ID), 0-2 s for the callee; by then the other side may have switched.
   */
  async requestT38(caller: boolean): Promise<void> {
    if (this.t38 !== 'prefer' || this.transport !== 'audio' || !this.dialog.active) return;
    // Each re-INVITE is a client span of the call (its status only: no URI, no number).
    const reinvite = () =>
      inSpan(
        'sip.reinvite',
        { kind: SpanKind.CLIENT, attributes: { 'faxline.sip.offer': 't38' } },
        async (span) => {
          const r = await this.dialog.reinvite(t38Offer(this.local()));
          span?.setAttribute('faxline.sip.status', r.status);
          return r;
        },
      );
    let r = await reinvite();
    if (r.status === 491) {
      const waitMs = caller ? 2100 + Math.random() * 1900 : Math.random() * 2000;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, waitMs);
        void this.done.finally(() => (clearTimeout(t), resolve()));
      });
      if (this.transport !== 'audio' || !this.dialog.active) return;
      r = await reinvite();
    }
    if (r.status < 200 || r.status >= 300 || r.sdp === undefined) return;
    const image = readSdp(r.sdp).image;
    if (!image || this.transport !== 'audio') return;
    this.session.switchToT38(image, agreeT38(image.t38));
    this.transport = 't38';
    spanEvent('sip.switched_to_t38');
  }
}

export class SipLine implements TransmissionBackend {
  readonly name = 'sip';
  private readonly o: SipLineOptions;
  private started: Promise<{ ua: UserAgent; media: MediaEngine }> | undefined;
  private registration: { stop: () => Promise<void> } | undefined;
  private sdpVersion = 1;

  get options(): Readonly<SipLineOptions> {
    return this.o;
  }

  constructor(o: SipLineOptions) {
    parseUri(o.trunk); // a bad trunk URI fails at start, not at the first call
    this.o = o;
  }

  /** Binds SIP_LISTEN and loads the media engine (once; transmit() calls it too). */
  start(): Promise<{ ua: UserAgent; media: MediaEngine }> {
    this.started ??= (async () => {
      const media = typeof this.o.media === 'function' ? await this.o.media() : this.o.media;
      if (!media) throw new Error(mediaUnavailableMessage);
      const stale = await removeStaleTmp();
      if (stale.length)
        this.o.log?.warn({ removed: stale }, 'removed temporary directories of dead SIP workers');
      const creds =
        this.o.username && this.o.password !== undefined
          ? { credentials: { username: this.o.username, password: this.o.password } }
          : {};
      const ua = await UserAgent.start({
        host: this.o.listen.host,
        port: this.o.listen.port,
        ...(this.o.publicAddress ? { publicAddress: this.o.publicAddress } : {}),
        ...(this.o.timers ? { timers: this.o.timers } : {}),
        ...(this.o.log ? { log: this.o.log } : {}),
        ...(this.o.inboundAuth ? { inboundAuth: this.o.inboundAuth } : {}),
        ...creds,
      });
      if (this.o.register && this.o.username)
        this.registration = ua.register({ registrar: this.o.trunk, user: this.o.username });
      this.ua = ua;
      return { ua, media };
    })();
    return this.started;
  }

  private localMedia(ua: UserAgent, port: number): LocalMedia {
    return { address: ua.address, port, sessionId: port, version: this.sdpVersion++ };
  }

  private openSession(ua: UserAgent, media: MediaEngine): MediaSession {
    return media.open({
      address: this.o.listen.host,
      portMin: this.o.rtpPorts.min,
      portMax: this.o.rtpPorts.max,
    });
  }

  async transmit(fax: PreparedFax, ctl: CallControl): Promise<Outcome> {
    const started = Date.now();
    const fail = (
      type: Exclude<Outcome, { ok: true }>['type'],
      code: string,
      message: string,
      retryable: boolean,
      engine?: Record<string, unknown>,
      pagesSent = 0,
    ): Outcome => ({
      ok: false,
      type,
      code,
      message,
      pagesSent,
      retryable,
      durationMs: Date.now() - started,
      ...(engine ? { engine } : {}),
    });
    if (!fax.tiff)
      return fail('backend_error', 'NO_IMAGE', 'the SIP line needs the rendered fax image', false);
    // The numbers go into the Request-URI and From as they are: every path into a job checks E.164,
    // and this keeps a row that escaped those checks from putting anything else on the wire.
    if (!isE164(fax.faxNumber))
      return fail('invalid_number', 'NOT_E164', 'the fax number is not in E.164 form', false);
    if (fax.callerId !== '' && !isE164(fax.callerId))
      return fail('backend_error', 'CALLER_ID_NOT_E164', 'the caller id is not in E.164 form', false);
    const { ua, media } = await this.start();
    if (ctl.signal.aborted) return fail('aborted', 'ABORTED', 'call aborted before dialling', true);
    let session: MediaSession;
    try {
      session = this.openSession(ua, media);
    } catch (err) {
      return fail('backend_error', 'NO_MEDIA_PORT', `no media port: ${(err as Error).message}`, true);
    }
    const dir = await mkdtemp(join(tmpdir(), `${tmpPrefix}${process.pid}-`));
    try {
      const file = join(dir, 'tx.tif');
      await writeFile(file, fax.tiff);
      await ctl.onProgress({ type: 'dialling' });
      const ring = new AbortController();
      const ringTimer = setTimeout(() => ring.abort(), this.o.ringTimeoutMs);
      // INVITE to the final answer (ringing included): a client span of the call with the status.
      const r = await inSpan('sip.invite', { kind: SpanKind.CLIENT }, async (span) => {
        const res = await ua
          .invite({
            requestUri: requestUri(this.o.trunk, fax.faxNumber),
            via: hopOf(this.o.trunk),
            fromUser: fax.callerId,
            sdp: audioOffer(this.localMedia(ua, session.port)),
            signal: AbortSignal.any([ctl.signal, ring.signal]),
          })
          .finally(() => clearTimeout(ringTimer));
        span?.setAttribute('faxline.sip.status', res.status);
        return res;
      });
      const engine: Record<string, unknown> = { sip_call_id: r.callId, sip_status: r.status };
      if (!r.ok) {
        if (ctl.signal.aborted) return fail('aborted', 'ABORTED', 'call aborted before answer', true, engine);
        if (ring.signal.aborted)
          return fail(
            'no_answer',
            'RING_TIMEOUT',
            `no answer within ${this.o.ringTimeoutMs / 1000} s`,
            true,
            engine,
          );
        const c = classifyStatus(r.status);
        return fail(c.type, `SIP_${r.status}`, `SIP ${r.status} ${r.reason}`, c.retryable, engine);
      }
      return await this.answered(fax, ctl, {
        ua,
        session,
        dialog: r.dialog,
        answer: r.answer,
        file,
        engine,
        fail,
      });
    } finally {
      session.close();
      await rm(dir, { recursive: true, force: true });
    }
  }

  private async answered(
    fax: PreparedFax,
    ctl: CallControl,
    c: {
      ua: UserAgent;
      session: MediaSession;
      dialog: Dialog;
      answer: string;
      file: string;
      engine: Record<string, unknown>;
      fail: (
        type: Exclude<Outcome, { ok: true }>['type'],
        code: string,
        message: string,
        retryable: boolean,
        engine?: Record<string, unknown>,
        pagesSent?: number,
      ) => Outcome;
    },
  ): Promise<Outcome> {
    const { ua, session, dialog, engine, fail } = c;
    const remote = readSdpSafe(c.answer);
    const onT38 = remote?.image !== undefined && this.o.t38 !== 'off';
    const pt = remote?.audio?.payloadTypes.find((p) => p === 0 || p === 8) as 0 | 8 | undefined;
    if (!remote || (!onT38 && (pt === undefined || !remote.audio))) {
      hangUp(dialog);
      return fail(
        'backend_error',
        'SDP_ANSWER',
        'the answer has no usable media (G.711 or T.38)',
        true,
        engine,
      );
    }
    const call = new CallMedia(
      session,
      dialog,
      this.o.t38,
      () => this.localMedia(ua, session.port),
      onT38 ? 't38' : 'audio',
      { mediaTimeoutMs: this.o.mediaTimeoutMs ?? defaultMediaTimeoutMs },
    );
    let pages = 0;
    let connected = false;
    const onProgress = async (e: MediaEvent) => {
      let p: Progress | undefined;
      if (e.type === 'connected') {
        connected = true;
        p = { type: 'connected', bitRate: e.bitRate };
      } else if (e.type === 'page') {
        pages = e.pages;
        p = { type: 'page_sent', page: e.pages, of: fax.pageBytes.length };
      }
      if (p) await ctl.onProgress(p);
    };
    const stopOnAbort = () => session.stop();
    ctl.signal.addEventListener('abort', stopOnAbort, { once: true });
    try {
      call.start(
        {
          role: 'send',
          file: c.file,
          ident: (fax.stationId ?? fax.callerId).slice(0, 20),
          ecm: true,
          transport: onT38 ? 't38' : 'audio',
          remote: onT38 && remote.image ? remote.image : (remote.audio as { address: string; port: number }),
          ...(onT38 && remote.image ? { t38: agreeT38(remote.image.t38) } : { payloadType: pt as 0 | 8 }),
          maxMs: Math.max(1000, ctl.deadline.getTime() - Date.now()),
        },
        onProgress,
      );
      void call.requestT38(true).catch(() => {});
      const result = await call.done;
      // T.30 has ended: the outcome is known now. Our BYE to a far end that died would be
      // retransmitted until Timer F (32 s); it goes on in the user agent (close() waits for it,
      // bounded) while the outcome is reported.
      hangUp(dialog);
      Object.assign(engine, {
        transport: call.transport,
        remote_csid: result.remoteIdent,
        bit_rate: result.bitRate,
        ecm: result.ecm,
        x_resolution_ppm: result.xResolution,
        y_resolution_ppm: result.yResolution,
        t30_code: result.code,
        t30_text: result.text,
        line_time_ms: result.durationMs,
      });
      if (ctl.signal.aborted)
        return fail('aborted', 'ABORTED', 'call aborted', true, engine, Math.max(pages, result.pages));
      if (result.ok)
        return {
          ok: true,
          pages: result.pages,
          durationMs: result.durationMs,
          remoteStationId: result.remoteIdent,
          bitRate: result.bitRate,
          engine,
        };
      // Silence before T.30 ever trained: whatever answered never behaved like a fax (a voice line
      // with silence suppression, say), so no_fax_tone; silence after it: the call dropped.
      if (call.localEnd)
        return fail(
          call.localEnd.kind === 'media_timeout' && !connected ? 'no_fax_tone' : 'call_dropped',
          call.localEnd.kind === 'media_timeout' ? 'MEDIA_TIMEOUT' : 'CALL_TIME_LIMIT',
          localEndText(call.localEnd),
          true,
          engine,
          result.pages,
        );
      if (call.remoteBye) spanEvent('sip.bye_received');
      if (call.remoteBye)
        return fail(
          'call_dropped',
          'SIP_BYE',
          'the far end hung up during the fax',
          true,
          engine,
          result.pages,
        );
      const k = classifyT30(result);
      return fail(k.type, `T30_${result.code}`, `T.30: ${result.text}`, k.retryable, engine, result.pages);
    } finally {
      ctl.signal.removeEventListener('abort', stopOnAbort);
      hangUp(dialog);
    }
  }

  /**
   * Answers incoming calls and receives faxes (the receiving engine): each INVITE gets a media
   * session and the fax is written where `decide` says; `onResult` hears how each call ended.
   */
  async answer(o: AnswerOptions): Promise<void> {
    const { ua, media } = await this.start();
    const screen = o.screen;
    ua.screenInvite = screen
      ? (c) => {
          const r = screen({ source: c.source, auth: authState(c.auth) });
          return r ? { status: r.reject, ...(r.reason ? { reason: r.reason } : {}) } : undefined;
        }
      : undefined;
    ua.trustSource = o.trusted;
    ua.onInvite = (call) => {
      // An inbound call starts a trace of its own: a server span from the INVITE to the call's end.
      void inSpan('sip.inbound_call', { parent: contextFromStored(null), kind: SpanKind.SERVER }, () =>
        this.receive(ua, media, call, o),
      ).catch((err: unknown) => {
        this.o.log?.warn({ err: (err as Error).message, callId: call.callId }, 'receiving a SIP call failed');
        call.reject(500);
      });
    };
  }

  private async receive(
    ua: UserAgent,
    media: MediaEngine,
    call: IncomingCall,
    o: AnswerOptions,
  ): Promise<void> {
    const d = await o.decide({
      callId: call.callId,
      from: call.fromUri,
      to: call.toUri,
      requestUri: call.requestUri,
      source: call.source,
      auth: authState(call.auth),
    });
    if ('reject' in d) {
      spanAttributes({ 'faxline.sip.status': d.reject });
      if (call.auth && !call.auth.ok)
        this.o.log?.debug({ callId: call.callId, auth: call.auth.detail }, 'inbound INVITE credentials');
      return d.reject === 401 ? call.challenge() : call.reject(d.reject, d.reason);
    }
    let reported = false;
    const report = (r: ReceivedFax) => {
      reported = true;
      spanAttributes({
        'faxline.receive.ok': r.ok,
        'faxline.pages': r.pages,
        'faxline.sip.remote_bye': r.remoteBye,
      });
      o.onResult(r);
    };
    try {
      await this.receiveDecided(ua, media, call, o, d, report);
    } finally {
      // However it ended (an exception included), what was decided hears of it once.
      if (!reported)
        report({
          callId: call.callId,
          from: call.fromUri,
          to: call.toUri,
          file: d.file,
          ok: false,
          reason: 'the call ended on an internal error',
          pages: 0,
          result: undefined,
          remoteBye: false,
        });
    }
  }

  private async receiveDecided(
    ua: UserAgent,
    media: MediaEngine,
    call: IncomingCall,
    o: AnswerOptions,
    d: { file: string; ident: string },
    report: (r: ReceivedFax) => void,
  ): Promise<void> {
    // Decided to answer, but the call ends before any media: onResult still hears of it.
    const unanswered = (status: number, reason: string) => {
      call.reject(status);
      report({
        callId: call.callId,
        from: call.fromUri,
        to: call.toUri,
        file: d.file,
        ok: false,
        reason,
        pages: 0,
        result: undefined,
        remoteBye: false,
      });
    };
    const maxReceiveMs = this.o.maxReceiveMs ?? defaultMaxReceiveMs;
    let session: MediaSession;
    try {
      session = this.openSession(ua, media);
    } catch {
      return unanswered(503, 'no media port free (RTP_PORTS)');
    }
    try {
      const a = answerOffer(call.offer, this.localMedia(ua, session.port), this.o.t38 !== 'off');
      if (!a.ok) return unanswered(488, 'the offer has no usable media (G.711 or T.38)');
      const dialog = call.accept(a.sdp);
      if (!dialog) return unanswered(487, 'cancelled by the caller before the answer'); // cancelled meanwhile
      const cm = new CallMedia(
        session,
        dialog,
        this.o.t38,
        () => this.localMedia(ua, session.port),
        a.transport,
        { mediaTimeoutMs: this.o.mediaTimeoutMs ?? defaultMediaTimeoutMs, maxMs: maxReceiveMs },
      );
      cm.start(
        {
          role: 'receive',
          file: d.file,
          ident: d.ident.slice(0, 20),
          ecm: o.ecm ?? true,
          transport: a.transport,
          remote: a.remote,
          ...(a.transport === 't38' ? { t38: a.t38 } : { payloadType: a.payloadType }),
          maxMs: maxReceiveMs,
          maxPageMm: this.o.maxPageMm ?? defaultMaxPageMm,
          maxPages: this.o.maxPages ?? defaultMaxPages,
          rxT6: this.o.inboundT6 ?? false,
        },
        () => {},
      );
      void cm.requestT38(false).catch(() => {});
      const result = await cm.done;
      // Our BYE to a far end that died is retransmitted until Timer F (32 s): the result is reported
      // at once, the BYE finishes after (in the user agent, which close() waits for, bounded).
      hangUp(dialog);
      const ok = result.ok && !cm.localEnd;
      report({
        callId: call.callId,
        from: call.fromUri,
        to: call.toUri,
        file: d.file,
        ok,
        reason: ok
          ? result.text
          : cm.localEnd
            ? localEndText(cm.localEnd)
            : cm.remoteBye
              ? 'the far end hung up'
              : result.text,
        pages: result.pages,
        result,
        remoteBye: cm.remoteBye,
        ...(cm.localEnd ? { localEnd: cm.localEnd.kind } : {}),
      });
    } finally {
      session.close();
    }
  }

  /** The user agent once started (its counters feed the SIP metrics), else undefined. */
  get userAgent(): UserAgent | undefined {
    return this.ua;
  }
  private ua: UserAgent | undefined;

  async close(): Promise<void> {
    if (!this.started) return;
    const s = await this.started.catch(() => undefined);
    await this.registration?.stop().catch(() => {});
    await s?.ua.close();
  }
}

/**
 * Sends BYE if the dialog is still up, without waiting for the answer: the user agent keeps the
 * transaction until it ends (Timer F at most) and its close() waits for it, bounded.
 */
function hangUp(dialog: Dialog): void {
  if (!dialog.active) return;
  // The BYE is a client span of the call (it may outlive the call's span: Timer F bounds it).
  void inSpan('sip.bye', { kind: SpanKind.CLIENT }, () => dialog.bye()).catch(() => {});
}

function authState(v: IncomingCall['auth']): InboundAuthState {
  return v === undefined ? 'off' : v.ok ? 'ok' : v.kind;
}

function readSdpSafe(text: string) {
  try {
    return readSdp(text);
  } catch {
    return undefined;
  }
}
