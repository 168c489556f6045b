// Digest authentication for SIP requests (RFC 3261 22, RFC 7616 hashing, RFC 8760 SHA-256 in SIP):
// the answer to a 401 WWW-Authenticate or a 407 Proxy-Authenticate challenge, with qop=auth.
import { createHash, randomBytes } from 'node:crypto';

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

/** Parses `Digest realm="...", nonce="...", ...`; throws on other schemes or missing fields. */
export function parseChallenge(value: string): Challenge {
  const m = /^\s*Digest\s+(.*)$/is.exec(value);
  if (!m) throw new Error(`not a Digest challenge: "${value.slice(0, 40)}"`);
  const params = new Map<string, string>();
  const re = /([A-Za-z0-9_-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^\s,]+)\s*(?:,|$)/g;
  for (const p of (m[1] as string).matchAll(re)) {
    params.set(
      (p[1] as string).toLowerCase(),
      p[3] !== undefined ? p[3].replace(/\\(.)/g, '$1') : (p[2] as string),
    );
  }
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
  const sess = c.algorithm.endsWith('-SESS');
  const algo = hashOf[c.algorithm.replace(/-SESS$/, '')];
  if (!algo) throw new Error(`unsupported digest algorithm ${c.algorithm}`);
  const h = (s: string) => createHash(algo).update(s, 'utf8').digest('hex');
  const qop = c.qop.length > 0 ? 'auth' : undefined;
  if (c.qop.length > 0 && !c.qop.includes('auth')) throw new Error(`unsupported qop ${c.qop.join(',')}`);
  const cnonce = i.cnonce ?? randomBytes(12).toString('hex');
  const nc = i.nc.toString(16).padStart(8, '0');
  let ha1 = h(`${i.username}:${c.realm}:${i.password}`);
  if (sess) ha1 = h(`${ha1}:${c.nonce}:${cnonce}`);
  const ha2 = h(`${i.method}:${i.uri}`);
  const response = qop ? h(`${ha1}:${c.nonce}:${nc}:${cnonce}:${qop}:${ha2}`) : h(`${ha1}:${c.nonce}:${ha2}`);
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
