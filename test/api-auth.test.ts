// Authentication: key format and storage, token expiry at the exact second (injected clock), every
// 401 reason, an API key refused as a Bearer token, revoke-key through the admin CLI; and the
// per-account rate limit (same injected clock, RATE_LIMIT_PER_SECOND=2, RATE_LIMIT_BURST=3).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { ManualClock } from '../src/clock.ts';
import { call, seedAccount, tokenFor, type Reply } from './support/client.ts';
import { startService } from './support/harness.ts';

const unauthorized = (r: Reply, reason: string) => {
  assert.equal(r.http, 401, JSON.stringify(r.body));
  assert.deepEqual(r.body, { status: 401, message: 'UNAUTHORIZED', data: reason });
  assert.equal(r.headers.get('www-authenticate'), 'Bearer');
};

describe('authentication', () => {
  const clock = new ManualClock(Date.parse('2026-06-01T12:00:00Z'));
  let s: Awaited<ReturnType<typeof startService>>;
  let owner: pg.Client;
  before(async () => {
    s = await startService({ clock, env: { RATE_LIMIT_PER_SECOND: '2', RATE_LIMIT_BURST: '3' } });
    owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await owner.connect();
  });
  after(async () => {
    await owner.end();
    await s.dropAll();
  });

  it('API keys are high-entropy, prefixed for secret scanners, and stored only as a SHA-256 hash', async () => {
    const seed = await seedAccount(s);
    assert.match(seed.api_key, /^fxl_key_[A-Za-z0-9_-]{43}$/);
    const rows = await owner.query<{ key_prefix: string; key_hash: Buffer }>(
      'SELECT key_prefix, key_hash FROM api_keys WHERE account_id = $1',
      [seed.account_id],
    );
    assert.equal(rows.rowCount, 1);
    assert.equal(rows.rows[0]!.key_hash.length, 32);
    assert.ok(seed.api_key.startsWith(rows.rows[0]!.key_prefix));
    assert.ok(rows.rows[0]!.key_prefix.length < 20, 'only a short prefix is kept in clear');
    const dump = await owner.query(`SELECT row_to_json(t)::text AS j FROM api_keys t`);
    assert.ok(!dump.rows.some((r: { j: string }) => r.j.includes(seed.api_key.slice(8))));
  });

  it('a token works until exactly expires_in seconds after issue, then 401 "expired"', async () => {
    const seed = await seedAccount(s);
    const token = await tokenFor(s.url, seed.api_key);
    const issued = clock.now().getTime();
    try {
      clock.set(issued + 86_400_000 - 1);
      assert.equal((await call(s.url, 'GET', '/v1/numbers?limit=1', { token })).http, 200);
      clock.set(issued + 86_400_000);
      unauthorized(await call(s.url, 'GET', '/v1/numbers?limit=1', { token }), 'Access token has expired.');
      unauthorized(
        await call(s.url, 'POST', '/v1/faxes/send', { token, body: { fax_number: '+15551234567' } }),
        'Access token has expired.',
      );
    } finally {
      clock.set(issued);
    }
  });

  it('missing, malformed and unknown tokens each get 401 with their own reason', async () => {
    const seed = await seedAccount(s);
    const token = await tokenFor(s.url, seed.api_key);
    const get = (authorization?: string) =>
      call(s.url, 'GET', '/v1/numbers', authorization === undefined ? {} : { headers: { authorization } });
    unauthorized(await get(), 'Authorization header is missing.');
    const malformed = "Authorization header must be 'Bearer' followed by one space and the access token.";
    for (const h of [
      `Bearer  ${token}`,
      `bearer ${token}`,
      `Basic ${token}`,
      'Bearer',
      `Bearer ${token} x`,
      token,
    ])
      unauthorized(await get(h), malformed);
    unauthorized(
      await get('Bearer fxl_at_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'),
      'Access token is invalid.',
    );
    unauthorized(await get('Bearer something-else'), 'Access token is invalid.');
  });

  it('an API key presented as a Bearer token is refused', async () => {
    const seed = await seedAccount(s);
    unauthorized(
      await call(s.url, 'GET', '/v1/numbers', { headers: { authorization: `Bearer ${seed.api_key}` } }),
      'An API key is not an access token: exchange it for a token at POST /v1/auth.',
    );
  });

  it('revoke-key (admin CLI): the key gets no more tokens and its tokens stop on the next request', async () => {
    const seed = await seedAccount(s);
    const token = await tokenFor(s.url, seed.api_key);
    const other = await seedAccount(s);
    const otherToken = await tokenFor(s.url, other.api_key);
    assert.equal((await call(s.url, 'GET', '/v1/numbers?limit=1', { token })).http, 200);
    const r = spawnSync(process.execPath, ['src/admin/cli.ts', 'revoke-key', '--key', seed.api_key], {
      env: { ...process.env, DATABASE_URL: s.cfg.DATABASE_URL },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), { revoked: 1 });
    unauthorized(
      await call(s.url, 'GET', '/v1/numbers?limit=1', { token }),
      'Access token has been revoked.',
    );
    const again = await call(s.url, 'POST', '/v1/auth', { body: { api_secret_key: seed.api_key } });
    assert.equal(again.http, 401);
    assert.deepEqual(again.body, { status: 0, message: 'API Secret Key is invalid.' });
    assert.equal((await call(s.url, 'GET', '/v1/numbers?limit=1', { token: otherToken })).http, 200);
    const twice = spawnSync(process.execPath, ['src/admin/cli.ts', 'revoke-key', '--key', seed.api_key], {
      env: { ...process.env, DATABASE_URL: s.cfg.DATABASE_URL },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(twice.status, 1);
    assert.match(twice.stderr, /no active API key matches/);
  });

  it('rate limit: 429 with Retry-After (header and envelope) per account, refilling with time', async () => {
    const a = await seedAccount(s);
    const b = await seedAccount(s);
    const ta = await tokenFor(s.url, a.api_key);
    const tb = await tokenFor(s.url, b.api_key);
    const get = (t: string) => call(s.url, 'GET', '/v1/numbers?limit=1', { token: t });
    for (let i = 0; i < 3; i++) assert.equal((await get(ta)).http, 200);
    const limited = await get(ta);
    assert.equal(limited.http, 429);
    assert.deepEqual(limited.body, {
      status: 0,
      message:
        'Too many requests: this account may make 2 requests per second (bursts of 3); retry after 1 s',
      data: { retry_after: 1 },
    });
    assert.equal(limited.headers.get('retry-after'), '1');
    assert.equal((await get(tb)).http, 200, 'another account has its own bucket');
    clock.advance(500);
    assert.equal((await get(ta)).http, 200, 'half a second refills one request at 2/s');
    assert.equal((await get(ta)).http, 429);
  });

  const auth = (key: unknown) => call(s.url, 'POST', '/v1/auth', { body: { api_secret_key: key } });
  const wrongKey = () => `fxl_key_${randomBytes(32).toString('base64url')}`;
  const refused = (r: Reply, what: string, retryAfter: number) => {
    assert.equal(r.http, 429, JSON.stringify(r.body));
    assert.deepEqual(r.body, {
      status: 0,
      message: `Too many failed authentication attempts ${what}; retry after ${retryAfter} s`,
      data: { retry_after: retryAfter },
    });
    assert.equal(r.headers.get('retry-after'), String(retryAfter));
  };

  it('/v1/auth: 20 failures from one address, then 429 with Retry-After for every attempt, a right key too', async () => {
    clock.advance(300_000); // a full window: earlier tests' failures are forgotten
    const a = await seedAccount(s);
    for (let i = 0; i < 20; i++) {
      const r = await auth(wrongKey());
      assert.equal(r.http, 401, `attempt ${i + 1}: ${JSON.stringify(r.body)}`);
      assert.deepEqual(r.body, { status: 0, message: 'API Secret Key is invalid.' });
    }
    // 20 per 300 s refill one attempt every 15 s.
    refused(await auth(wrongKey()), 'from this address', 15);
    refused(await auth(a.api_key), 'from this address', 15);
    clock.advance(15_000);
    assert.equal((await auth(a.api_key)).http, 200, 'a refilled allowance lets a right key in');
    assert.equal((await auth(a.api_key)).http, 200, 'and successes cost nothing');
    assert.equal((await auth(wrongKey())).http, 401);
    refused(await auth(wrongKey()), 'from this address', 15);
    clock.advance(300_000);
  });

  it('/v1/auth: the same wrong key 5 times, then 429 for that key only', async () => {
    clock.advance(300_000);
    const a = await seedAccount(s);
    const key = wrongKey();
    for (let i = 0; i < 5; i++) assert.equal((await auth(key)).http, 401);
    refused(await auth(key), 'with this API key', 60);
    assert.equal((await auth(a.api_key)).http, 200, 'other keys from the same address still work');
    clock.advance(300_000);
  });

  it('an API key holds at most 100 live tokens: issuing one more deletes the oldest', async () => {
    const a = await seedAccount(s);
    const first = await tokenFor(s.url, a.api_key);
    clock.advance(1000);
    const second = await tokenFor(s.url, a.api_key);
    for (let i = 0; i < 99; i++) {
      clock.advance(10);
      await tokenFor(s.url, a.api_key);
    }
    const n = await owner.query('SELECT count(*)::int AS n FROM access_tokens WHERE account_id = $1', [
      a.account_id,
    ]);
    assert.equal(n.rows[0].n, 100);
    unauthorized(
      await call(s.url, 'GET', '/v1/numbers?limit=1', { token: first }),
      'Access token is invalid.',
    );
    assert.equal((await call(s.url, 'GET', '/v1/numbers?limit=1', { token: second })).http, 200);
  });

  it('expired access tokens are deleted when tokens are issued (bounded batches)', async () => {
    const a = await seedAccount(s);
    const b = await seedAccount(s);
    // Tokens of B that expired long ago and were never used again.
    await owner.query(
      `INSERT INTO access_tokens (token_hash, api_key_id, account_id, issued_at, expires_at)
       SELECT sha256(('old' || i)::bytea), k.id, k.account_id, '2000-01-01', '2000-01-02'
         FROM api_keys k, generate_series(1, 150) i WHERE k.account_id = $1`,
      [b.account_id],
    );
    const expired = async () =>
      (await owner.query(`SELECT count(*)::int AS n FROM access_tokens WHERE expires_at < '2001-01-01'`))
        .rows[0].n as number;
    assert.equal(await expired(), 150);
    await tokenFor(s.url, a.api_key);
    assert.equal(await expired(), 50, 'one issue deletes up to 100 expired tokens');
    await tokenFor(s.url, a.api_key);
    assert.equal(await expired(), 0);
  });
});
