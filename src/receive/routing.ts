// Which inbound fax calls are answered, and for whom. Independent of SIP: the answering side passes
// what it read from the INVITE (Request-URI user, To user, the packet's source address) and gets a
// decision with the SIP status to answer. The order of the checks is the order of the statuses below:
// a caller not on the allow-list learns nothing about which numbers exist.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { type Cidr, inCidr, parseAddress, parseCidr } from '../documents/addresses.ts';
import { isE164 } from '../domain/e164.ts';

/** Why a call was refused; also the `cause` label of faxline_inbound_calls_refused_total. */
export type RefusalCause =
  | 'source_not_allowed'
  | 'auth_required'
  | 'auth_failed'
  | 'unknown_number'
  | 'receiving_off'
  | 'over_line_limit';

export const refusalStatus: Record<RefusalCause, { status: number; reason: string }> = {
  source_not_allowed: { status: 403, reason: 'Forbidden' },
  // Digest credentials demanded (SIP_INBOUND_USERNAME): none, or an expired nonce, is challenged; a
  // wrong answer (user, password, a nonce never issued, a replay) is refused.
  auth_required: { status: 401, reason: 'Unauthorized' },
  auth_failed: { status: 403, reason: 'Forbidden' },
  unknown_number: { status: 404, reason: 'Not Found' },
  receiving_off: { status: 480, reason: 'Temporarily Unavailable' },
  over_line_limit: { status: 486, reason: 'Busy Here' },
};

export interface InboundCall {
  /** User part of the Request-URI (`sip:+15551234567@…` → `+15551234567`). */
  requestUser: string | null;
  /** User part of the To header's URI. */
  toUser: string | null;
  /** User part of the From header's URI (the caller id), stored with the fax. */
  fromUser?: string | null;
  /** Address the INVITE came from (the packet's source, not a header). */
  source: string;
  /**
   * The INVITE's digest credentials as the user agent checked them (SIP_INBOUND_USERNAME); absent or
   * 'off' when none are demanded. Checked after the source: an address not allowed is never challenged.
   */
  auth?: 'off' | 'ok' | 'missing' | 'stale' | 'failed';
}

/** The number as faxline holds it, and what receiving it needs. */
export interface ReceivingNumber {
  numberId: string;
  accountId: string;
  number: string;
  /** The number's station id (CSI), or null: the number itself. */
  stationId: string | null;
  receive: boolean;
}

export type RouteDecision =
  | {
      answer: true;
      accountId: string;
      numberId: string;
      number: string;
      /** CSI to send: the number's station id, else the number (at most 20 characters). */
      stationId: string;
      /** The caller id, normalised to E.164 when it can be, else as given (or null). */
      from: string | null;
      /** Give the line back when the call ends (idempotent). */
      release(): void;
    }
  | { answer: false; cause: RefusalCause; status: number; reason: string; detail: string };

/**
 * A called or calling party as a trunk writes it → E.164, or null when it is not a number.
 * 1. `tel:`/`sip:` prefixes, URI parameters (`;npdi`, `;phone-context=…`) and visual separators
 *    (space, `-`, `.`, `(`, `)`) are dropped.
 * 2. `+` and digits: already E.164.
 * 3. `00` and digits: the international prefix, replaced by `+`.
 * 4. Digits only, with a default country code (SIP_INBOUND_COUNTRY_CODE, e.g. `1` or `44`):
 *    a leading single `0` is the national trunk prefix (`020 7946 0000` → `+44 20 7946 0000`);
 *    digits that already start with the country code and are at least 11 long are E.164 without its
 *    `+` (`15551234567` → `+15551234567`); other digits are a national number (`5551234567` →
 *    `+15551234567`).
 * 5. Digits only, no country code configured: E.164 without its `+`.
 */
export function normaliseE164(raw: string | null | undefined, countryCode: string): string | null {
  if (raw === null || raw === undefined) return null;
  let s = raw.trim().replace(/^(tel|sips?):/i, '');
  s = s.split(';')[0]!.split('@')[0]!;
  s = s.replace(/[\s\-.()]/g, '');
  let out: string;
  if (/^\+\d+$/.test(s)) out = s;
  else if (/^00\d+$/.test(s)) out = `+${s.slice(2)}`;
  else if (/^\d+$/.test(s)) {
    if (countryCode === '') out = `+${s}`;
    else if (/^0[1-9]/.test(s)) out = `+${countryCode}${s.slice(1)}`;
    else if (s.startsWith(countryCode) && s.length >= 11) out = `+${s}`;
    else out = `+${countryCode}${s}`;
  } else return null;
  return isE164(out) ? out : null;
}

/**
 * The called number: the Request-URI user, else the To user. Trunks put the dialled number in the
 * Request-URI; some (registration-based ones) put the account's user name there instead, and the
 * dialled number only in To, hence the fallback.
 */
export function calledNumber(call: InboundCall, countryCode: string): string | null {
  return normaliseE164(call.requestUser, countryCode) ?? normaliseE164(call.toUser, countryCode);
}

/** SIP_INBOUND_ALLOW after its host names were resolved: addresses and CIDR ranges. */
export interface SourceAllowList {
  cidrs: Cidr[];
  /** What was configured (for the log line of a refusal). */
  text: string;
}

/**
 * Resolves SIP_INBOUND_ALLOW (addresses, CIDR ranges, host names, separated by commas or spaces), or,
 * when it is empty, the host of `trunk` (a SIP URI, e.g. `sip:trunk.example.net:5060`): every address
 * either resolves to. Nothing configured at all: an empty list, which refuses every call.
 */
export async function resolveAllowList(
  allow: string,
  trunk: string,
  resolve: (host: string) => Promise<string[]> = resolveAll,
): Promise<SourceAllowList> {
  const entries = allow.split(/[\s,]+/).filter(Boolean);
  if (entries.length === 0 && trunk !== '') entries.push(trunkHost(trunk));
  const cidrs: Cidr[] = [];
  for (const e of entries) {
    const c = parseCidr(e);
    if (c) {
      cidrs.push(c);
      continue;
    }
    if (!/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$/i.test(e))
      throw new Error(`SIP_INBOUND_ALLOW: "${e}" is neither an address, a CIDR range nor a host name`);
    const addrs = await resolve(e);
    if (addrs.length === 0) throw new Error(`SIP_INBOUND_ALLOW: ${e} resolves to no address`);
    for (const a of addrs) cidrs.push(parseCidr(a)!);
  }
  return { cidrs, text: entries.join(',') };
}

async function resolveAll(host: string): Promise<string[]> {
  const r = await lookup(host, { all: true });
  return r.map((x) => x.address);
}

/** The host of a SIP URI: `sip:user@host:port;params` → `host` (IPv6 without its brackets). */
export function trunkHost(uri: string): string {
  let s = uri.trim().replace(/^sips?:/i, '');
  s = s.split(';')[0]!;
  if (s.includes('@')) s = s.slice(s.lastIndexOf('@') + 1);
  if (s.startsWith('[')) return s.slice(1, s.indexOf(']'));
  if (isIP(s) === 6) return s;
  return s.split(':')[0]!;
}

export function sourceAllowed(list: SourceAllowList, source: string): boolean {
  const a = parseAddress(source.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/i, '$1'));
  return a !== null && list.cidrs.some((c) => inCidr(a, c));
}

/** Longest caller id kept when it is not a number (characters). */
export const CALLER_TEXT_MAX = 64;

/**
 * A caller id that is not a number (`anonymous`, a name), as stored and sent in events: the far end
 * wrote it, so control characters (NUL would make PostgreSQL refuse the row) become spaces, spaces
 * collapse, and it is cut at CALLER_TEXT_MAX characters. Empty: null.
 */
export function callerText(raw: string | null | undefined): string | null {
  if (raw === null || raw === undefined) return null;
  const s = [
    ...raw
      // eslint-disable-next-line no-control-regex
      .replace(/[\u0000-\u001f\u007f]+/g, ' ')
      .replace(/\s+/g, ' ')
      .trim(),
  ]
    .slice(0, CALLER_TEXT_MAX)
    .join('')
    .trimEnd();
  return s === '' ? null : s;
}

export interface RouterDeps {
  allow: SourceAllowList;
  /** SIP_INBOUND_COUNTRY_CODE: digits, or '' for none. */
  countryCode: string;
  /** INBOUND_LINES: calls this process receives at once; one more is refused 486. */
  lines: number;
  /** The number's owner and settings, read as the schema owner (the call belongs to no account yet). */
  findNumber(e164: string): Promise<ReceivingNumber | null>;
  onRefused?(cause: RefusalCause): void;
}

/** Routes inbound calls and counts the lines in use in this process. */
export class InboundRouter {
  private readonly d: RouterDeps;
  private inUse = 0;

  constructor(d: RouterDeps) {
    if (!/^(\d{1,3})?$/.test(d.countryCode))
      throw new Error('SIP_INBOUND_COUNTRY_CODE must be 1 to 3 digits, or empty');
    this.d = d;
  }

  /** Lines answered and not yet released. */
  get linesInUse(): number {
    return this.inUse;
  }

  /** Whether `source` is on SIP_INBOUND_ALLOW (in-dialog requests from it are accepted too). */
  allows(source: string): boolean {
    return sourceAllowed(this.d.allow, source);
  }

  /**
   * The refusals that need nothing but the packet (source, then credentials), counted like route()'s;
   * null when the call may go on to route(). The user agent answers these statelessly.
   */
  screen(call: Pick<InboundCall, 'source' | 'auth'>): Extract<RouteDecision, { answer: false }> | null {
    if (!sourceAllowed(this.d.allow, call.source))
      return this.refuse('source_not_allowed', `source ${call.source} is not on SIP_INBOUND_ALLOW`);
    if (call.auth === 'missing' || call.auth === 'stale')
      return this.refuse('auth_required', `no valid digest credentials (${call.auth}): challenged`);
    if (call.auth === 'failed')
      return this.refuse('auth_failed', 'the digest credentials are wrong (SIP_INBOUND_USERNAME)');
    return null;
  }

  async route(call: InboundCall): Promise<RouteDecision> {
    const screened = this.screen(call);
    if (screened) return screened;
    const called = calledNumber(call, this.d.countryCode);
    if (called === null)
      return this.refuse(
        'unknown_number',
        `neither the Request-URI user ${JSON.stringify(call.requestUser)} nor the To user ${JSON.stringify(call.toUser)} is a number`,
      );
    const n = await this.d.findNumber(called);
    if (!n) return this.refuse('unknown_number', `${called} is not a number of this installation`);
    if (!n.receive) return this.refuse('receiving_off', `${called} has receiving off`);
    if (this.inUse >= this.d.lines)
      return this.refuse('over_line_limit', `all ${this.d.lines} inbound lines (INBOUND_LINES) are in use`);
    this.inUse++;
    let released = false;
    return {
      answer: true,
      accountId: n.accountId,
      numberId: n.numberId,
      number: n.number,
      stationId: (n.stationId ?? n.number).slice(0, 20),
      from: normaliseE164(call.fromUser, this.d.countryCode) ?? callerText(call.fromUser),
      release: () => {
        if (released) return;
        released = true;
        this.inUse--;
      },
    };
  }

  private refuse(cause: RefusalCause, detail: string): Extract<RouteDecision, { answer: false }> {
    this.d.onRefused?.(cause);
    return { answer: false, cause, ...refusalStatus[cause], detail };
  }
}
