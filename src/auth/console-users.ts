// People of the web console (issue 29): users with a role in one account, their passwords (scrypt),
// sessions (only the SHA-256 of the cookie is stored), invitations and the sign-in throttle. All of
// it in PostgreSQL (migration 027), so any API replica serves any session. These functions run on the
// owner's pool: sign-in finds a user before it knows the account (docs/console.md "Sessions").
import { createHash, randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import type { Queryable } from '../db/pool.ts';
import { isId } from '../domain/ids.ts';

export const consoleRoles = ['owner', 'admin', 'sender', 'viewer'] as const;
export type ConsoleRole = (typeof consoleRoles)[number];

export function isConsoleRole(v: unknown): v is ConsoleRole {
  return typeof v === 'string' && (consoleRoles as readonly string[]).includes(v);
}

/**
 * scrypt with N = 2^15, r = 8, p = 3: 32 MiB of memory per hash and three passes over it, one of the
 * equivalent settings OWASP's password storage cheat sheet lists (2^17/8/1, 2^16/8/2, 2^15/8/3);
 * about 0.1-0.2 s of one core here, run on libuv's thread pool, not the event loop. The parameters
 * are stored with each hash, so raising them later keeps old hashes verifiable.
 */
export const SCRYPT = { N: 2 ** 15, r: 8, p: 3, keyLength: 32 } as const;
const MAXMEM = 256 * 1024 * 1024;

export const PASSWORD_MIN = 10;
export const PASSWORD_MAX = 200;

/** Why a password is refused, or null. */
export function passwordProblem(pw: string): string | null {
  if (pw.length < PASSWORD_MIN) return `Password: must be at least ${PASSWORD_MIN} characters`;
  if (pw.length > PASSWORD_MAX) return `Password: must be at most ${PASSWORD_MAX} characters`;
  return null;
}

function derive(pw: string, salt: Buffer, n: number, r: number, p: number, len: number): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(pw.normalize('NFC'), salt, len, { N: n, r, p, maxmem: MAXMEM }, (err, key) =>
      err ? reject(err) : resolve(key),
    ),
  );
}

/** `scrypt$N$r$p$salt$hash`, salt and hash Base64url. */
export async function hashPassword(pw: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(pw, salt, SCRYPT.N, SCRYPT.r, SCRYPT.p, SCRYPT.keyLength);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

/** Constant-time check of a password against a stored hash; a malformed hash never matches. */
export async function verifyPassword(pw: string, stored: string): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [n, r, p] = [Number(parts[1]), Number(parts[2]), Number(parts[3])];
  if (![n, r, p].every((x) => Number.isInteger(x) && x > 0) || n > 2 ** 20) return false;
  const salt = Buffer.from(parts[4]!, 'base64url');
  const want = Buffer.from(parts[5]!, 'base64url');
  if (want.length < 16) return false;
  const got = await derive(pw, salt, n, r, p, want.length);
  return timingSafeEqual(got, want);
}

/** A hash nobody's password matches, verified when the email is unknown (same time either way). */
let decoy: Promise<string> | undefined;
function decoyHash(): Promise<string> {
  decoy ??= hashPassword(randomBytes(24).toString('base64url'));
  return decoy;
}

const sha256 = (s: string) => createHash('sha256').update(s).digest();
const token = () => randomBytes(32).toString('base64url');

export function normaliseEmail(raw: string): string {
  return raw.trim().toLowerCase();
}

const EMAIL = /^[^\s@]{1,64}@[^\s@]{1,189}\.[^\s@]{1,63}$/;
export function emailProblem(email: string): string | null {
  return EMAIL.test(email) ? null : 'Email: must be an email address such as name@example.com';
}

export interface NewUser {
  accountId: string;
  email: string;
  role: ConsoleRole;
  /** Omitted for an invited user: the invitation sets it. */
  password?: string;
  createdBy?: string | null;
}

export class ConsoleUserError extends Error {
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.field = field;
  }
}

export async function createUser(db: Queryable, u: NewUser): Promise<{ id: string; email: string }> {
  const email = normaliseEmail(u.email);
  const bad = emailProblem(email);
  if (bad) throw new ConsoleUserError('email', bad);
  if (!isConsoleRole(u.role))
    throw new ConsoleUserError('role', `Role: must be one of ${consoleRoles.join(', ')}`);
  if (!isId(u.accountId)) throw new ConsoleUserError('account', 'account: must be an account id (UUID)');
  if (u.password !== undefined) {
    const p = passwordProblem(u.password);
    if (p) throw new ConsoleUserError('password', p);
  }
  const hash = u.password !== undefined ? await hashPassword(u.password) : null;
  const r = await db.query<{ id: string }>(
    `INSERT INTO console_users (account_id, email, role, password_hash, created_by)
     SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM accounts WHERE id = $1)
     ON CONFLICT (email) DO NOTHING RETURNING id`,
    [u.accountId, email, u.role, hash, u.createdBy ?? null],
  );
  if (r.rowCount !== 1) {
    const acct = await db.query('SELECT 1 FROM accounts WHERE id = $1', [u.accountId]);
    if (acct.rowCount !== 1)
      throw new ConsoleUserError('account', `account: no account with id ${u.accountId}`);
    throw new ConsoleUserError('email', 'Email: a user with this email exists already');
  }
  return { id: r.rows[0]!.id, email };
}

export interface ConsoleTimeouts {
  /** A session unused this long ends. */
  idleSeconds: number;
  /** A session ends this long after sign-in, used or not. */
  absoluteSeconds: number;
}

export interface SigninLimits {
  /** Failed sign-ins allowed per email address per window. */
  perEmail: number;
  /** Failed sign-ins allowed per client address per window. */
  perAddress: number;
  windowSeconds: number;
}

export interface SessionUser {
  userId: string;
  accountId: string;
  email: string;
  role: ConsoleRole;
  csrf: string;
}

export type SigninResult =
  | { ok: true; cookie: string; user: SessionUser }
  /** `user`: the user whose email was given, when there is one (its account's audit trail records the failure). */
  | { ok: false; reason: 'invalid'; user?: { userId: string; accountId: string } }
  | { ok: false; reason: 'throttled'; retryAfterSeconds: number };

/** Buckets over their limit: the longest wait of them, or 0. */
async function throttled(db: Queryable, buckets: [string, number][], now: Date, windowSeconds: number) {
  const r = await db.query<{ bucket: string; failures: number; window_start: Date }>(
    'SELECT bucket, failures, window_start FROM console_signin_failures WHERE bucket = ANY($1)',
    [buckets.map(([b]) => b)],
  );
  let wait = 0;
  for (const row of r.rows) {
    const limit = buckets.find(([b]) => b === row.bucket)?.[1] ?? Infinity;
    const ends = row.window_start.getTime() + windowSeconds * 1000;
    if (ends > now.getTime() && row.failures >= limit)
      wait = Math.max(wait, Math.ceil((ends - now.getTime()) / 1000));
  }
  return wait;
}

async function recordFailure(db: Queryable, buckets: string[], now: Date, windowSeconds: number) {
  await db.query(
    `INSERT INTO console_signin_failures AS f (bucket, failures, window_start)
     SELECT b, 1, $2 FROM unnest($1::text[]) AS b
     ON CONFLICT (bucket) DO UPDATE SET
       failures = CASE WHEN f.window_start + make_interval(secs => $3) <= $2 THEN 1 ELSE f.failures + 1 END,
       window_start = CASE WHEN f.window_start + make_interval(secs => $3) <= $2 THEN $2 ELSE f.window_start END`,
    [buckets, now, windowSeconds],
  );
}

/**
 * Signs in: throttled per email and per client address before the password is checked, the same
 * answer for an unknown email, a wrong password and a disabled user.
 */
export async function signIn(
  db: Queryable,
  o: { email: string; password: string; address: string; now: Date; limits: SigninLimits },
): Promise<SigninResult> {
  const email = normaliseEmail(o.email);
  const buckets: [string, number][] = [
    [`email:${email}`, o.limits.perEmail],
    [`ip:${o.address}`, o.limits.perAddress],
  ];
  const wait = await throttled(db, buckets, o.now, o.limits.windowSeconds);
  if (wait > 0) return { ok: false, reason: 'throttled', retryAfterSeconds: wait };
  const r = await db.query<{
    id: string;
    account_id: string;
    role: ConsoleRole;
    password_hash: string | null;
    disabled_at: Date | null;
  }>('SELECT id, account_id, role, password_hash, disabled_at FROM console_users WHERE email = $1', [email]);
  const u = r.rows[0];
  const matches = await verifyPassword(o.password, u?.password_hash ?? (await decoyHash()));
  if (!u || !u.password_hash || !matches || u.disabled_at) {
    await recordFailure(
      db,
      buckets.map(([b]) => b),
      o.now,
      o.limits.windowSeconds,
    );
    return {
      ok: false,
      reason: 'invalid',
      ...(u ? { user: { userId: u.id, accountId: u.account_id } } : {}),
    };
  }
  const cookie = token();
  const csrf = token();
  await db.query(
    `INSERT INTO console_sessions (id_hash, user_id, account_id, csrf_token, created_at, last_seen_at)
     VALUES ($1, $2, $3, $4, $5, $5)`,
    [sha256(cookie), u.id, u.account_id, csrf, o.now],
  );
  // A success clears the email's failures (not the address's: one address may try many emails).
  await db.query('DELETE FROM console_signin_failures WHERE bucket = $1', [`email:${email}`]);
  return { ok: true, cookie, user: { userId: u.id, accountId: u.account_id, email, role: u.role, csrf } };
}

/**
 * The user of a session cookie, or null: unknown, signed out, idle or past its absolute timeout, or
 * its user disabled. A live session's last use is moved to `now` (at most once a minute).
 */
export async function sessionUser(
  db: Queryable,
  cookie: string,
  now: Date,
  t: ConsoleTimeouts,
): Promise<SessionUser | null> {
  if (!/^[A-Za-z0-9_-]{43}$/.test(cookie)) return null;
  const r = await db.query<{
    user_id: string;
    account_id: string;
    email: string;
    role: ConsoleRole;
    csrf_token: string;
    live: boolean;
    touch: boolean;
  }>(
    `SELECT s.user_id, s.account_id, u.email, u.role, s.csrf_token,
            (u.disabled_at IS NULL AND s.last_seen_at + make_interval(secs => $3) > $2
               AND s.created_at + make_interval(secs => $4) > $2 AND s.created_at <= $2 + interval '5 minutes') AS live,
            s.last_seen_at + interval '1 minute' <= $2 AS touch
       FROM console_sessions s JOIN console_users u ON u.id = s.user_id
      WHERE s.id_hash = $1`,
    [sha256(cookie), now, t.idleSeconds, t.absoluteSeconds],
  );
  const row = r.rows[0];
  if (!row) return null;
  if (!row.live) {
    await db.query('DELETE FROM console_sessions WHERE id_hash = $1', [sha256(cookie)]);
    return null;
  }
  if (row.touch)
    await db.query('UPDATE console_sessions SET last_seen_at = $2 WHERE id_hash = $1', [sha256(cookie), now]);
  return {
    userId: row.user_id,
    accountId: row.account_id,
    email: row.email,
    role: row.role,
    csrf: row.csrf_token,
  };
}

export async function signOut(db: Queryable, cookie: string): Promise<void> {
  await db.query('DELETE FROM console_sessions WHERE id_hash = $1', [sha256(cookie)]);
}

/** Removes sessions past the idle timeout (called now and then; a dead session is refused anyway). */
export async function sweepSessions(db: Queryable, now: Date, t: ConsoleTimeouts): Promise<number> {
  const r = await db.query(
    `DELETE FROM console_sessions WHERE last_seen_at < $1::timestamptz - make_interval(secs => $2)
        OR created_at < $1::timestamptz - make_interval(secs => $3)`,
    [now, t.idleSeconds, t.absoluteSeconds],
  );
  return r.rowCount ?? 0;
}

/** A one-time link's token for a user who has no password yet; valid `ttlSeconds`. */
export async function createInvite(
  db: Queryable,
  o: { userId: string; accountId: string; now: Date; ttlSeconds: number },
): Promise<string> {
  const t = token();
  await db.query(
    `INSERT INTO console_invites (token_hash, user_id, account_id, expires_at)
     VALUES ($1, $2, $3, $4::timestamptz + make_interval(secs => $5))`,
    [sha256(t), o.userId, o.accountId, o.now, o.ttlSeconds],
  );
  return t;
}

/** The email an unused, unexpired invitation is for, or null. */
export async function inviteEmail(db: Queryable, t: string, now: Date): Promise<string | null> {
  if (!/^[A-Za-z0-9_-]{43}$/.test(t)) return null;
  const r = await db.query<{ email: string }>(
    `SELECT u.email FROM console_invites i JOIN console_users u ON u.id = i.user_id
      WHERE i.token_hash = $1 AND i.used_at IS NULL AND i.expires_at > $2 AND u.disabled_at IS NULL`,
    [sha256(t), now],
  );
  return r.rows[0]?.email ?? null;
}

/** Sets the password of an invitation's user and uses the invitation up; false when not valid. */
export async function acceptInvite(db: Queryable, t: string, password: string, now: Date): Promise<boolean> {
  const bad = passwordProblem(password);
  if (bad) throw new ConsoleUserError('password', bad);
  if (!/^[A-Za-z0-9_-]{43}$/.test(t)) return false;
  const hash = await hashPassword(password);
  const r = await db.query(
    `WITH used AS (
       UPDATE console_invites SET used_at = $2
        WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2 RETURNING user_id)
     UPDATE console_users u SET password_hash = $3 FROM used
      WHERE u.id = used.user_id AND u.disabled_at IS NULL`,
    [sha256(t), now, hash],
  );
  return r.rowCount === 1;
}

/** Changes a user's role within an account; false when no such user there. */
export async function setRole(db: Queryable, accountId: string, userId: string, role: ConsoleRole) {
  if (!isId(userId)) return false;
  const r = await db.query('UPDATE console_users SET role = $3 WHERE id = $2 AND account_id = $1', [
    accountId,
    userId,
    role,
  ]);
  return r.rowCount === 1;
}

/** Disables (or enables) a user; disabling ends every session of theirs at once. */
export async function setDisabled(
  db: Queryable,
  accountId: string,
  userId: string,
  disabled: boolean,
  now: Date,
): Promise<boolean> {
  if (!isId(userId)) return false;
  const r = await db.query(
    'UPDATE console_users SET disabled_at = CASE WHEN $3 THEN coalesce(disabled_at, $4) END WHERE id = $2 AND account_id = $1',
    [accountId, userId, disabled, now],
  );
  if (disabled) await db.query('DELETE FROM console_sessions WHERE user_id = $1', [userId]);
  return r.rowCount === 1;
}

/** A user of this account, or null (another account's id answers like a missing one). */
export async function findUser(
  db: Queryable,
  accountId: string,
  userId: string,
): Promise<{ id: string; email: string; role: ConsoleRole; disabled: boolean } | null> {
  if (!isId(userId)) return null;
  const r = await db.query<{ id: string; email: string; role: ConsoleRole; disabled: boolean }>(
    'SELECT id, email, role, disabled_at IS NOT NULL AS disabled FROM console_users WHERE id = $1 AND account_id = $2',
    [userId, accountId],
  );
  return r.rows[0] ?? null;
}
