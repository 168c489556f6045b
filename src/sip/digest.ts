// Digest authentication for SIP requests (RFC 3261 22, RFC 7616 hashing, RFC 8760 SHA-256 in SIP):
// the answer to a 401 WWW-Authenticate or a 407 Proxy-Authenticate challenge, with qop=auth (the
// client side), and the check of such answers on inbound INVITEs (DigestVerifier, the server side).
// Both compute the response with digestResponse().
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export interface Challenge {
  realm: string;
  nonce: string;
  opaque: string | undefined;
  /** MD5, MD5-sess, SHA-256 or SHA-256-sess (upper-cased). */
  algorithm: string;
  /** The qop values offered ("auth", "auth-int"); empty for RFC 2069 style challenges. */
  qop: string[];
  stale: boolean;
}

const hashOf: Record<string, string> = { MD5: 'md5', 'SHA-256': 'sha256' };

/** The parameters of a `Digest k=v, k="v", ...` field value (names lower-cased), or null for other schemes. */
function digestParams(value: string): Map<string, string> | null {
  const m = /^\s*Digest\s+(.*)$/is.exec(value);
  if (!m) return null;
  const params = new Map<string, string>();
  const re = /([A-Za-z0-9_-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^\s,]+)\s*(?:,|$)/g;
  for (const p of (m[1] as string).matchAll(re)) {
    params.set(
      (p[1] as string).toLowerCase(),
      p[3] !== undefined ? p[3].replace(/\\(.)/g, '$1') : (p[2] as string),
    );
  }
  return params;
}

/** Parses `Digest realm="...", nonce="...", ...`; throws on other schemes or missing fields. */
export function parseChallenge(value: string): Challenge {
  const params = digestParams(value);
  if (!params) throw new Error(`not a Digest challenge: "${value.slice(0, 40)}"`);
  const realm = params.get('realm');
  const nonce = params.get('nonce');
  if (realm === undefined || nonce === undefined) throw new Error('Digest challenge without realm or nonce');
  const algorithm = (params.get('algorithm') ?? 'MD5').toUpperCase();
  return {
    realm,
    nonce,
    opaque: params.get('opaque'),
    algorithm,
    qop: (params.get('qop') ?? '')
      .split(',')
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean),
    stale: (params.get('stale') ?? '').toLowerCase() === 'true',
  };
}

export function supported(c: Challenge): boolean {
  const base = c.algorithm.replace(/-SESS$/, '');
  return base in hashOf && (c.qop.length === 0 || c.qop.includes('auth'));
}

/**
 * The `response` value of RFC 7616 3.4.1 (RFC 2617 without qop): what a client sends and what a server
 * computes to check it. `nc` is the 8 hex digits as written on the wire.
 */
export function digestResponse(p: {
  algorithm: string;
  realm: string;
  nonce: string;
  username: string;
  password: string;
  method: string;
  uri: string;
  qop?: 'auth';
  nc?: string;
  cnonce?: string;
}): string {
  const algorithm = p.algorithm.toUpperCase();
  const sess = algorithm.endsWith('-SESS');
  const algo = hashOf[algorithm.replace(/-SESS$/, '')];
  if (!algo) throw new Error(`unsupported digest algorithm ${p.algorithm}`);
  const h = (s: string) => createHash(algo).update(s, 'utf8').digest('hex');
  let ha1 = h(`${p.username}:${p.realm}:${p.password}`);
  if (sess) ha1 = h(`${ha1}:${p.nonce}:${p.cnonce ?? ''}`);
  const ha2 = h(`${p.method}:${p.uri}`);
  return p.qop
    ? h(`${ha1}:${p.nonce}:${p.nc ?? ''}:${p.cnonce ?? ''}:${p.qop}:${ha2}`)
    : h(`${ha1}:${p.nonce}:${ha2}`);
}

export interface DigestInput {
  challenge: Challenge;
  method: string;
  uri: string;
  username: string;
  password: string;
  /** Requests sent with this nonce so far, including this one (1, 2, …). */
  nc: number;
  /** Fixed in tests; random otherwise. */
  cnonce?: string;
}

/** The response digest and the field value for Authorization / Proxy-Authorization. */
export function authorize(i: DigestInput): { response: string; value: string } {
  const c = i.challenge;
  const qop = c.qop.length > 0 ? 'auth' : undefined;
  if (c.qop.length > 0 && !c.qop.includes('auth')) throw new Error(`unsupported qop ${c.qop.join(',')}`);
  const cnonce = i.cnonce ?? randomBytes(12).toString('hex');
  const nc = i.nc.toString(16).padStart(8, '0');
  const response = digestResponse({
    algorithm: c.algorithm,
    realm: c.realm,
    nonce: c.nonce,
    username: i.username,
    password: i.password,
    method: i.method,
    uri: i.uri,
    ...(qop ? { qop, nc, cnonce } : {}),
  });
  const q = (s: string) => `"${s.replace(/(["\\])/g, '\\$1')}"`;
  const parts = [
    `username=${q(i.username)}`,
    `realm=${q(c.realm)}`,
    `nonce=${q(c.nonce)}`,
    `uri=${q(i.uri)}`,
    `response=${q(response)}`,
    `algorithm=${c.algorithm}`,
  ];
  if (c.opaque !== undefined) parts.push(`opaque=${q(c.opaque)}`);
  if (qop) parts.push(`qop=${qop}`, `nc=${nc}`, `cnonce=${q(cnonce)}`);
  return { response, value: `Digest ${parts.join(', ')}` };
}

/** What the check of an INVITE's credentials found. */
export type DigestVerdict =
  | { ok: true }
  | {
      ok: false;
      /** missing: no credentials for our realm; stale: our nonce, expired; failed: anything else. */
      kind: 'missing' | 'stale' | 'failed';
      detail: string;
    };

export interface VerifierOptions {
  realm: string;
  username: string;
  password: string;
  /**
   * The algorithms challenged with, in this order (one WWW-Authenticate each), and the only ones
   * accepted; default MD5 then SHA-256. RFC 8760 clients take the topmost they support; some (Kamailio
   * 5.6's uac_auth) read only the topmost and know only MD5, hence MD5 first by default.
   */
  algorithms?: ('MD5' | 'SHA-256')[];
  /** How long a nonce is accepted after it was issued; default 30 s. */
  nonceTtlMs?: number;
  /** Nonces whose last use is remembered (replay protection); past it the oldest is forgotten. */
  maxTracked?: number;
  now?: () => number;
}

/** The request being checked: its method, Request-URI, Authorization values, Call-ID and CSeq. */
export interface CheckedRequest {
  method: string;
  uri: string;
  authorization: string[];
  callId: string;
  cseq: string;
}

const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest();
const sameSecret = (a: string, b: string) => timingSafeEqual(sha256(a), sha256(b));

/**
 * The server side of digest authentication, for INVITEs that start a call (RFC 3261 22.1, a UAS:
 * 401 with WWW-Authenticate). Nonces carry their expiry and a MAC and are not stored when issued, so
 * a flood of unanswered INVITEs costs nothing; the MAC key comes from the credentials, so every
 * process configured with them accepts the nonces of the others (behind a dispatcher, the answer to
 * one worker's challenge may be sent to another). A nonce once used is remembered until it expires:
 * it is accepted again only with a higher nonce count (RFC 7616 3.3), or for the very same request
 * (same Call-ID and CSeq, same nonce count: a retransmission that became a new transaction, or a
 * proxy trying the next worker with it). Comparisons of secrets take constant time.
 */
export class DigestVerifier {
  readonly realm: string;
  private readonly username: string;
  private readonly password: string;
  private readonly key: Buffer;
  private readonly ttlMs: number;
  private readonly algorithms: ('MD5' | 'SHA-256')[];
  private readonly maxTracked: number;
  private readonly now: () => number;
  private readonly used = new Map<string, { nc: number; callId: string; cseq: string; expires: number }>();

  constructor(o: VerifierOptions) {
    if (!/^[\x20-\x7e]+$/.test(o.realm) || /["\\]/.test(o.realm))
      throw new Error('the digest realm must be printable ASCII without quotes or backslashes');
    this.realm = o.realm;
    this.username = o.username;
    this.password = o.password;
    this.key = createHash('sha256')
      .update(`faxline-digest-nonce\0${o.realm}\0${o.username}\0${o.password}`, 'utf8')
      .digest();
    this.ttlMs = o.nonceTtlMs ?? 30_000;
    this.algorithms = o.algorithms?.length ? o.algorithms : ['MD5', 'SHA-256'];
    this.maxTracked = o.maxTracked ?? 10_000;
    this.now = o.now ?? Date.now;
  }

  private mac(body: string): string {
    return createHmac('sha256', this.key).update(body, 'utf8').digest('base64url').slice(0, 22);
  }

  /** A fresh nonce: `<expiry, base 36 ms>.<random>.<MAC>`. */
  nonce(): string {
    const body = `${(this.now() + this.ttlMs).toString(36)}.${randomBytes(9).toString('base64url')}`;
    return `${body}.${this.mac(body)}`;
  }

  /** WWW-Authenticate values for a 401, one per algorithm, in the configured order. */
  challenges(stale = false): string[] {
    const nonce = this.nonce();
    return this.algorithms.map(
      (a) =>
        `Digest realm="${this.realm}", nonce="${nonce}", algorithm=${a}, qop="auth"${stale ? ', stale=true' : ''}`,
    );
  }

  verify(req: CheckedRequest): DigestVerdict {
    const fail = (detail: string): DigestVerdict => ({ ok: false, kind: 'failed', detail });
    const mine = req.authorization.map(digestParams).find((p) => p?.get('realm') === this.realm);
    if (!mine) return { ok: false, kind: 'missing', detail: `no credentials for realm "${this.realm}"` };
    const [username, nonce, uri, response] = ['username', 'nonce', 'uri', 'response'].map((k) => mine.get(k));
    if (username === undefined || nonce === undefined || uri === undefined || response === undefined)
      return fail('credentials without username, nonce, uri or response');
    const qop = mine.get('qop')?.toLowerCase();
    const nc = mine.get('nc');
    const cnonce = mine.get('cnonce');
    if (qop !== 'auth' || nc === undefined || !/^[0-9a-fA-F]{8}$/.test(nc) || !cnonce)
      return fail('credentials without qop=auth, nc or cnonce');
    const algorithm = (mine.get('algorithm') ?? 'MD5').toUpperCase();
    if (!this.algorithms.some((a) => a === algorithm.replace(/-SESS$/, '')))
      return fail(`algorithm ${algorithm} is not one offered`);
    const m = /^([0-9a-z]{1,12})\.([A-Za-z0-9_-]{12})\.([A-Za-z0-9_-]{22})$/.exec(nonce);
    if (!m || !timingSafeEqual(Buffer.from(this.mac(`${m[1]}.${m[2]}`)), Buffer.from(m[3]!)))
      return fail('a nonce this installation never issued');
    const expires = parseInt(m[1]!, 36);
    const now = this.now();
    if (now > expires) return { ok: false, kind: 'stale', detail: 'the nonce expired' };
    if (uri !== req.uri) return fail('the digest uri is not the Request-URI');
    const expected = digestResponse({
      algorithm,
      realm: this.realm,
      nonce,
      username: this.username,
      password: this.password,
      method: req.method,
      uri,
      qop: 'auth',
      nc,
      cnonce,
    });
    // Both compared whatever the first found, in constant time.
    const userOk = sameSecret(username, this.username);
    const responseOk = sameSecret(response.toLowerCase(), expected);
    if (!(userOk && responseOk)) return fail('wrong user name or password');
    this.forgetExpired(now);
    const count = parseInt(nc, 16);
    const seen = this.used.get(nonce);
    if (seen) {
      const same = seen.callId === req.callId && seen.cseq === req.cseq && seen.nc === count;
      if (!same && count <= seen.nc) return fail(`nonce count ${nc} already used (a replay)`);
      seen.nc = Math.max(seen.nc, count);
      seen.callId = req.callId;
      seen.cseq = req.cseq;
      return { ok: true };
    }
    this.used.set(nonce, { nc: count, callId: req.callId, cseq: req.cseq, expires });
    if (this.used.size > this.maxTracked) this.used.delete(this.used.keys().next().value as string);
    return { ok: true };
  }

  /** Used nonces are kept in the order of first use, which is nearly the order of expiry. */
  private forgetExpired(now: number): void {
    for (const [k, v] of this.used) {
      if (v.expires >= now) break;
      this.used.delete(k);
    }
  }
}
