// API keys over the API: create (the secret shown once), list (never a secret or hash), revoke (its
// tokens refused from the next request), the last active key not revocable, the cap per account,
// another account's key ids answering as missing ones.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { KEEP_REVOKED } from '../src/accounts/api-keys.ts';
import type { DemoSeed } from '../src/admin/seed.ts';
import { createApiKey } from '../src/auth/service.ts';
import { assertRefused, twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { call, tokenFor } from './support/client.ts';

describe('API keys', () => {
  let s: TwoAccounts['s'], a: DemoSeed, b: DemoSeed, tokenA: string, tokenB: string, owner: pg.Client;
  let api: TwoAccounts['api'], close: TwoAccounts['close'];

  before(async () => {
    ({ s, a, b, tokenA, tokenB, owner, api, close } = await twoAccounts({ API_KEYS_PER_ACCOUNT: '4' }));
  });
  after(() => close());

  it('create shows the secret once; list shows prefix, name, created, last used, never the secret', async () => {
    const c = await api('POST', '/v1/api-keys', tokenA, { name: 'billing server' });
    assert.equal(c.http, 200, JSON.stringify(c.body));
    assert.equal(c.body.status, 1);
    const key = c.body.data.api_key as string;
    assert.match(key, /^fxl_key_[A-Za-z0-9_-]{43}$/);
    assert.equal(c.body.data.name, 'billing server');
    assert.equal(key.slice(0, c.body.data.key_prefix.length), c.body.data.key_prefix);
    assert.equal(c.body.data.last_used_at, null);
    // The new key works.
    const t = await tokenFor(s.url, key);
    assert.equal((await api('GET', '/v1/numbers?limit=1', t)).http, 200);

    const l = await api('GET', '/v1/api-keys', tokenA);
    assert.equal(l.http, 200);
    assert.equal(l.body.message, 'API keys retrieved successfully');
    assert.equal(l.body.data.length, 2, 'the seed key and the new one');
    const text = JSON.stringify(l.body);
    assert.ok(!text.includes(key) && !text.includes(a.api_key), 'no secret in a listing');
    const row = l.body.data.find((k: { id: string }) => k.id === c.body.data.id);
    assert.deepEqual(Object.keys(row).sort(), ['created_at', 'id', 'key_prefix', 'last_used_at', 'name']);
    assert.ok(row.last_used_at, 'exchanging the key for a token records when it was last used');
    const seedKey = l.body.data.find((k: { id: string }) => k.id !== c.body.data.id);
    assert.ok(seedKey.last_used_at);
    assert.equal(seedKey.name, null);
    // Another account sees only its own keys.
    const lb = await api('GET', '/v1/api-keys', tokenB);
    assert.equal(lb.body.data.length, 1);
    assert.ok(!lb.body.data.some((k: { id: string }) => k.id === c.body.data.id));
  });

  it('the API role cannot read key hashes (column privileges), even of its own account', async () => {
    const apiRole = new pg.Client({
      connectionString: s.cfg.DATABASE_URL.replace('postgres@', 'faxline_api@'),
    });
    await apiRole.connect();
    try {
      await apiRole.query('BEGIN');
      await apiRole.query(`SELECT set_config('faxline.account_id', $1, true)`, [a.account_id]);
      const ok = await apiRole.query('SELECT id FROM api_keys');
      assert.ok(ok.rows.length >= 1);
      await assert.rejects(apiRole.query('SELECT key_hash FROM api_keys'), /permission denied/);
      await apiRole.query('ROLLBACK');
    } finally {
      await apiRole.end();
    }
  });

  it("revoke: the key's tokens are refused from the next request; another account's id answers as missing", async () => {
    const c = await api('POST', '/v1/api-keys', tokenA, { name: 'to revoke' });
    const key = c.body.data.api_key as string;
    const t = await tokenFor(s.url, key);
    const theirs = await api('DELETE', `/v1/api-keys/${c.body.data.id}`, tokenB);
    const missing = await api('DELETE', '/v1/api-keys/00000000-0000-4000-8000-000000000000', tokenB);
    assertRefused(theirs, 404, 'API key not found');
    assert.deepEqual(theirs.body, missing.body);
    assertRefused(await api('DELETE', '/v1/api-keys/nope', tokenB), 404, 'API key not found');
    assert.equal(
      (await api('GET', '/v1/numbers?limit=1', t)).http,
      200,
      'untouched by the refused revocations',
    );

    const r = await api('DELETE', `/v1/api-keys/${c.body.data.id}`, tokenA);
    assert.deepEqual(r.body, { status: 1, message: 'API key has been revoked.' });
    const after = await api('GET', '/v1/numbers?limit=1', t);
    assertRefused(after, 401, 'UNAUTHORIZED');
    assert.equal(after.body.data, 'Access token has been revoked.');
    const auth = await call(s.url, 'POST', '/v1/auth', { body: { api_secret_key: key } });
    assert.deepEqual(auth.body, { status: 0, message: 'API Secret Key is invalid.' });
    assert.ok(
      !(await api('GET', '/v1/api-keys', tokenA)).body.data.some(
        (k: { id: string }) => k.id === c.body.data.id,
      ),
    );
    assertRefused(await api('DELETE', `/v1/api-keys/${c.body.data.id}`, tokenA), 404, 'API key not found');
  });

  it('the last active key cannot be revoked (409), also by two concurrent revocations; a key may revoke itself while another remains', async () => {
    // B has one key: its own token cannot revoke it.
    const [only] = (await api('GET', '/v1/api-keys', tokenB)).body.data;
    assertRefused(
      await api('DELETE', `/v1/api-keys/${only.id}`, tokenB),
      409,
      'The last active API key of an account cannot be revoked: create another key first (POST /v1/api-keys)',
    );
    assert.equal((await api('GET', '/v1/numbers?limit=1', tokenB)).http, 200);

    // Rotation: create a second key, revoke the first with the first's own token.
    const second = await api('POST', '/v1/api-keys', tokenB, {});
    assert.equal(second.http, 200);
    assert.equal(second.body.data.name, null);
    const self = await api('DELETE', `/v1/api-keys/${only.id}`, tokenB);
    assert.equal(self.http, 200);
    assertRefused(await api('GET', '/v1/numbers?limit=1', tokenB), 401, 'UNAUTHORIZED');
    const tokenB2 = await tokenFor(s.url, second.body.data.api_key);

    // Two keys revoked at once: exactly one succeeds, one key stays.
    const third = await api('POST', '/v1/api-keys', tokenB2, { name: 'third' });
    const both = await Promise.all([
      api('DELETE', `/v1/api-keys/${second.body.data.id}`, tokenB2),
      api('DELETE', `/v1/api-keys/${third.body.data.id}`, tokenB2),
    ]);
    // The loser is refused by the last-key rule (409) or, when it is authenticated only after the
    // winner revoked its own key, by the token check (401): either way one key stays active.
    assert.equal(both.filter((r) => r.http === 200).length, 1, JSON.stringify(both.map((r) => r.body)));
    const loser = both.find((r) => r.http !== 200)!;
    assert.ok(loser.http === 409 || loser.http === 401, JSON.stringify(loser.body));
    const left = await owner.query(
      'SELECT count(*)::int AS n FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL',
      [b.account_id],
    );
    assert.equal(left.rows[0].n, 1);
  });

  it('at most API_KEYS_PER_ACCOUNT active keys (422); invalid fields → 422 naming the field', async () => {
    const active = (await api('GET', '/v1/api-keys', tokenA)).body.data.length as number;
    const tries = await Promise.all(
      Array.from({ length: 6 - active }, (_, i) => api('POST', '/v1/api-keys', tokenA, { name: `k${i}` })),
    );
    assert.equal(tries.filter((r) => r.http === 200).length, 4 - active);
    for (const r of tries.filter((x) => x.http !== 200))
      assertRefused(
        r,
        422,
        'API key limit reached: an account may have at most 4 active keys; revoke one first',
      );
    for (const [body, m] of [
      [{ name: '' }, /^name: must not be empty/],
      [{ name: 'x'.repeat(101) }, /^name: is longer than 100/],
      [{ name: 7 }, /^name: must be a string/],
      [{ scope: 'all' }, /scope/],
    ] as const)
      assertRefused(await api('POST', '/v1/api-keys', tokenA, body), 422, m);
  });

  it('revoked keys are kept up to KEEP_REVOKED per account (newest first), so create-and-revoke loops stay bounded', async () => {
    const c = await owner.query(`INSERT INTO accounts (name) VALUES ('looper') RETURNING id`);
    const acc = c.rows[0].id as string;
    // Older revoked keys than any the API will revoke now.
    await owner.query(
      `INSERT INTO api_keys (account_id, key_prefix, key_hash, revoked_at)
       SELECT $1, 'fxl_key_old', sha256(('old' || g)::bytea), now() - interval '1 day' + g * interval '1 second'
         FROM generate_series(1, $2) g`,
      [acc, KEEP_REVOKED + 5],
    );
    const token = await tokenFor(s.url, await createApiKey(owner, acc));
    const extra = await api('POST', '/v1/api-keys', token, { name: 'short-lived' });
    assert.equal((await api('DELETE', `/v1/api-keys/${extra.body.data.id}`, token)).http, 200);
    const r = await owner.query(
      `SELECT count(*)::int AS n, bool_or(id = $2) AS kept_new, min(revoked_at) AS oldest
         FROM api_keys WHERE account_id = $1 AND revoked_at IS NOT NULL`,
      [acc, extra.body.data.id],
    );
    assert.equal(r.rows[0].n, KEEP_REVOKED);
    assert.equal(r.rows[0].kept_new, true, 'the key just revoked is kept');
    const gone = await owner.query(
      `SELECT count(*)::int AS n FROM generate_series(1, 6) g
        WHERE NOT EXISTS (SELECT 1 FROM api_keys WHERE key_hash = sha256(('old' || g)::bytea))`,
    );
    assert.equal(gone.rows[0].n, 6, 'the six oldest revoked keys were deleted');
    assert.equal((await api('GET', '/v1/numbers?limit=1', token)).http, 200, 'the active key still works');
  });
});
