import type { Clock } from '../clock.ts';
import type { Pool, Queryable } from '../db/pool.ts';
import {
  API_KEY_PREFIX,
  displayPrefix,
  hashSecret,
  newAccessToken,
  newApiKey,
  TOKEN_PREFIX,
} from './keys.ts';

/** Fixed by the customer API: tokens live 86,400 seconds. */
export const TOKEN_TTL_SECONDS = 86_400;

export async function createAccount(
  db: Queryable,
  name: string,
): Promise<{ account_id: string; api_key: string }> {
  const acc = await db.query<{ id: string }>('INSERT INTO accounts (name) VALUES ($1) RETURNING id', [name]);
  const accountId = acc.rows[0]!.id;
  const apiKey = await createApiKey(db, accountId);
  return { account_id: accountId, api_key: apiKey };
}

export async function createApiKey(db: Queryable, accountId: string): Promise<string> {
  const key = newApiKey();
  await db.query('INSERT INTO api_keys (account_id, key_prefix, key_hash) VALUES ($1, $2, $3)', [
    accountId,
    displayPrefix(key),
    hashSecret(key),
  ]);
  return key;
}

/** Live tokens one key may hold unless configured otherwise (AUTH_MAX_TOKENS_PER_KEY). */
export const DEFAULT_MAX_TOKENS_PER_KEY = 100;

/**
 * Exchanges an API key for an access token; null when the key is unknown or revoked. The key keeps
 * at most `maxPerKey` live tokens (the oldest are deleted), and expired tokens of any key are deleted
 * in a bounded batch (migration 010).
 */
export async function issueToken(
  db: Queryable,
  clock: Clock,
  apiKey: string,
  maxPerKey = DEFAULT_MAX_TOKENS_PER_KEY,
): Promise<{ access_token: string; token_type: 'Bearer'; expires_in: number } | null> {
  if (!apiKey.startsWith(API_KEY_PREFIX)) return null;
  const token = newAccessToken();
  const now = clock.now();
  // A SECURITY DEFINER function (migration 002): the API role cannot read api_keys or access_tokens.
  const r = await db.query<{ account_id: string | null }>(
    'SELECT faxline_issue_token($1, $2, $3, $4, $5) AS account_id',
    [
      hashSecret(apiKey),
      hashSecret(token),
      now,
      new Date(now.getTime() + TOKEN_TTL_SECONDS * 1000),
      maxPerKey,
    ],
  );
  if (!r.rows[0]?.account_id) return null;
  return { access_token: token, token_type: 'Bearer', expires_in: TOKEN_TTL_SECONDS };
}

export type AuthResult = { ok: true; accountId: string; keyId: string } | { ok: false; reason: string };

export const authReasons = {
  missing: 'Authorization header is missing.',
  malformed: "Authorization header must be 'Bearer' followed by one space and the access token.",
  apiKey: 'An API key is not an access token: exchange it for a token at POST /v1/auth.',
  unknown: 'Access token is invalid.',
  expired: 'Access token has expired.',
  revoked: 'Access token has been revoked.',
} as const;

/** What the database knows of an access token. */
export interface TokenRow {
  account_id: string;
  /** The API key the token was issued for: the actor of the request in the audit trail. */
  api_key_id: string;
  expires_at: Date;
  revoked: boolean;
}

/** Finds a token by the hash of its secret. */
export type TokenLookup = (hash: Buffer) => Promise<TokenRow | null>;

/**
 * Token lookups of concurrent requests combined into one query (through a SECURITY DEFINER
 * function: the API role cannot read access_tokens). Each request still reads the database, so a
 * revocation or an expiry applies to the very next request: nothing is cached.
 */
export function batchedTokenLookup(db: Pool, maxInFlight = 2): TokenLookup {
  let waiting: { hash: Buffer; resolve: (r: TokenRow | null) => void; reject: (e: unknown) => void }[] = [];
  let inFlight = 0;
  const run = () => {
    if (inFlight >= maxInFlight || waiting.length === 0) return;
    const batch = waiting;
    waiting = [];
    inFlight++;
    // A named statement: parsed and planned once per connection.
    db.query<TokenRow & { token_hash: Buffer }>({
      name: 'faxline_token_keys',
      text: 'SELECT token_hash, account_id, api_key_id, expires_at, revoked FROM faxline_token_keys($1::bytea[])',
      values: [batch.map((w) => w.hash)],
    })
      .then(
        (r) => {
          const found = new Map(r.rows.map((row) => [row.token_hash.toString('hex'), row]));
          for (const w of batch) w.resolve(found.get(w.hash.toString('hex')) ?? null);
        },
        (err: unknown) => {
          for (const w of batch) w.reject(err);
        },
      )
      .finally(() => {
        inFlight--;
        run();
      });
  };
  return (hash) =>
    new Promise((resolve, reject) => {
      waiting.push({ hash, resolve, reject });
      run();
    });
}

/** Checks an Authorization header. Revocation takes effect on the next request (no cache). */
export async function authenticate(
  lookup: TokenLookup,
  clock: Clock,
  header: string | undefined,
): Promise<AuthResult> {
  if (header === undefined || header === '') return { ok: false, reason: authReasons.missing };
  const m = /^Bearer ([A-Za-z0-9_-]+)$/.exec(header);
  if (!m) return { ok: false, reason: authReasons.malformed };
  const token = m[1]!;
  if (token.startsWith(API_KEY_PREFIX)) return { ok: false, reason: authReasons.apiKey };
  if (!token.startsWith(TOKEN_PREFIX)) return { ok: false, reason: authReasons.unknown };
  const row = await lookup(hashSecret(token));
  if (!row) return { ok: false, reason: authReasons.unknown };
  if (row.revoked) return { ok: false, reason: authReasons.revoked };
  if (clock.now().getTime() >= row.expires_at.getTime()) return { ok: false, reason: authReasons.expired };
  return { ok: true, accountId: row.account_id, keyId: row.api_key_id };
}

/** Revokes a key given as the key itself or its id. Returns the number of keys revoked. */
export async function revokeKey(db: Queryable, keyOrId: string): Promise<number> {
  const byKey = keyOrId.startsWith(API_KEY_PREFIX);
  const r = await db.query(
    byKey
      ? 'UPDATE api_keys SET revoked_at = now() WHERE key_hash = $1 AND revoked_at IS NULL'
      : 'UPDATE api_keys SET revoked_at = now() WHERE id::text = $1 AND revoked_at IS NULL',
    [byKey ? hashSecret(keyOrId) : keyOrId],
  );
  return r.rowCount ?? 0;
}
