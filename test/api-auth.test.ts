// Authentication: key format and storage, token expiry at the exact second (injected clock), every
// 401 reason, an API key refused as a Bearer token, revoke-key through the admin CLI; and the
// per-account rate limit (same injected clock, RATE_LIMIT_PER_SECOND=2, RATE_LIMIT_BURST=3).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
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
});
