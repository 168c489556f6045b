// The two hooks a SIP answering engine calls for each INVITE: `decide` (route it; on answer, store
// the reception's start and say where the fax engine writes the TIFF and which CSI it sends) and
// `finished` (store how it ended, free the line, remove the temporary file). Written against the
// media contract (src/transmission/sip/media.ts: MediaResult), not against a SIP library.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../log.ts';
import type { AnswerOptions, InboundAuthState, ReceivedFax } from '../transmission/sip/line.ts';
import type { MediaResult } from '../transmission/sip/media.ts';
import type { Receiving } from './component.ts';
import type { ReceptionResult, StoredReception } from './sink.ts';

/** What the user agent knows of an INVITE when it decides. */
export interface OfferedCall {
  callId: string;
  /** Request-URI (`sip:+15551234567@host`) and the To and From URIs, as received. */
  requestUri: string;
  toUri: string;
  fromUri: string;
  /** The address the INVITE came from (the packet's source). */
  source: string;
  /** The INVITE's digest credentials as the user agent found them; absent or 'off': none demanded. */
  auth?: InboundAuthState;
}

export type AnswerDecision =
  { answer: true; file: string; ident: string } | { answer: false; status: number; reason: string };

/** How the call ended, from the engine: its MediaResult, or none when media never started. */
export interface EndedCall {
  callId: string;
  result: MediaResult | undefined;
  /** Why, when there is no result (e.g. "the far end hung up", "no media port"). */
  reason: string;
  startedAt: number;
}

export interface AnsweringHooks {
  decide(call: OfferedCall): Promise<AnswerDecision>;
  finished(call: EndedCall): Promise<StoredReception | null>;
  /** Calls decided and not yet finished. */
  readonly open: number;
  /** The refusals decide() would give from source and credentials alone (answered statelessly). */
  screen?(call: Pick<OfferedCall, 'source' | 'auth'>): { status: number; reason: string } | null;
  /** Whether in-dialog requests from `address` are accepted in every call (SIP_INBOUND_ALLOW). */
  trusted?(address: string): boolean;
}

/** The user part of a SIP or tel URI (`sip:+1555@h;user=phone` → `+1555`), or null. */
export function uriUser(uri: string): string | null {
  const m = /^(?:sips?|tel):([^@;>]*)/i.exec(uri.trim().replace(/^<|>$/g, ''));
  if (!m || m[1] === '') return null;
  // The far end writes this: a malformed escape is read as written (decodeURIComponent would throw,
  // failing the call 500 before the source allow-list was even checked).
  try {
    return decodeURIComponent(m[1]!);
  } catch {
    return m[1]!;
  }
}

export async function answeringHooks(r: Receiving, o: { dir?: string } = {}): Promise<AnsweringHooks> {
  // Received TIFFs are plaintext fax content: each is removed once stored (sealed) in PostgreSQL, in
  // `finished`. The directory is named like the SIP line's own (faxline-sip-<pid>-…), so what a
  // process that died left here is removed by removeStaleTmp when the next line starts.
  const dir = await mkdtemp(join(o.dir ?? tmpdir(), `faxline-sip-${process.pid}-`));
  const open = new Map<
    string,
    { file: string; release(): void; complete: (x: ReceptionResult, f: string) => Promise<StoredReception> }
  >();
  return {
    get open() {
      return open.size;
    },
    screen(call) {
      const d = r.router.screen({ source: call.source, ...(call.auth ? { auth: call.auth } : {}) });
      return d && { status: d.status, reason: d.reason };
    },
    trusted: (address) => r.router.allows(address),
    async decide(call) {
      const d = await r.router.route({
        requestUser: uriUser(call.requestUri),
        toUser: uriUser(call.toUri),
        fromUser: uriUser(call.fromUri),
        source: call.source,
        ...(call.auth ? { auth: call.auth } : {}),
      });
      if (!d.answer) return { answer: false, status: d.status, reason: d.reason };
      try {
        const rec = await r.sink.begin({
          accountId: d.accountId,
          numberId: d.numberId,
          to: d.number,
          from: d.from,
          stationId: d.stationId,
          callId: call.callId || null,
        });
        const file = join(dir, `${rec.id}.tif`);
        open.set(call.callId, { file, release: d.release, complete: rec.complete });
        return { answer: true, file, ident: d.stationId };
      } catch (err) {
        d.release();
        throw err;
      }
    },
    async finished(call) {
      const c = open.get(call.callId);
      if (!c) return null;
      open.delete(call.callId);
      try {
        const res: ReceptionResult = call.result ?? {
          ok: false,
          code: -1,
          text: call.reason,
          pages: 0,
          bitRate: 0,
          ecm: false,
          remoteIdent: '',
          transport: 'audio',
          durationMs: Date.now() - call.startedAt,
        };
        return await c.complete(res, c.file);
      } finally {
        c.release();
        await rm(c.file, { force: true });
      }
    },
  };
}

/**
 * The SIP line's answering options (SipLine.answer) over the hooks: routing and begin() in decide,
 * complete() in onResult. A failure to store is logged (the row stays 'receiving' and the sweep
 * fails and announces it).
 */
export function sipAnswering(
  hooks: AnsweringHooks,
  log: Pick<Logger, 'error'>,
  o: { onStored?: (s: StoredReception | null) => void } = {},
): AnswerOptions {
  const started = new Map<string, number>();
  const { screen, trusted } = hooks;
  return {
    ...(screen
      ? {
          screen: (c: { source: string; auth: InboundAuthState }) => {
            const d = screen.call(hooks, c);
            return d ? { reject: d.status, reason: d.reason } : undefined;
          },
        }
      : {}),
    ...(trusted ? { trusted: (address: string) => trusted.call(hooks, address) } : {}),
    decide: async (c) => {
      const d = await hooks.decide({
        callId: c.callId,
        requestUri: c.requestUri,
        toUri: c.to,
        fromUri: c.from,
        source: c.source,
        auth: c.auth,
      });
      if (!d.answer) return { reject: d.status, reason: d.reason };
      started.set(c.callId, Date.now());
      return { file: d.file, ident: d.ident };
    },
    onResult: (r: ReceivedFax) => {
      const startedAt = started.get(r.callId) ?? Date.now();
      started.delete(r.callId);
      hooks
        .finished({ callId: r.callId, result: r.result, reason: r.reason, startedAt })
        .then((s) => o.onStored?.(s))
        .catch((err: unknown) =>
          log.error({ err: (err as Error).message, callId: r.callId }, 'received fax could not be stored'),
        );
    },
  };
}
