// GET /v1/workspace: the account, the limits in force (from the configuration), and this calendar
// month's faxes and pages (UTC) by state; other accounts' faxes and last month's are not counted.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Fastify from 'fastify';
import pg from 'pg';
import type { DemoSeed } from '../src/admin/seed.ts';
import type { RouteDeps } from '../src/api/deps.ts';
import { registerWorkspaceRoutes } from '../src/api/routes/workspace.ts';
import { jobStates } from '../src/domain/states.ts';
import { twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { call } from './support/client.ts';
import { eventually } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

describe('GET /v1/workspace', () => {
  let s: TwoAccounts['s'], a: DemoSeed, b: DemoSeed, tokenA: string, tokenB: string, owner: pg.Client;
  let close: TwoAccounts['close'];

  before(async () => {
    ({ s, a, b, tokenA, tokenB, owner, close } = await twoAccounts({
      RATE_LIMIT_PER_SECOND: '7',
      RATE_LIMIT_BURST: '900',
      FAX_MAX_PAGES: '42',
      CONTACTS_PER_ACCOUNT: '321',
    }));
  });
  after(() => close());

  it('account, limits from the configuration, and usage this month by state', async () => {
    const pdf = await makePdfBase64(2);
    const send = (token: string, extra: object = {}) =>
      call(s.url, 'POST', '/v1/faxes/send', {
        token,
        body: { fax_number: '+15551234567', fax_data: [{ file_name: 'a.pdf', file_data: pdf }], ...extra },
      });
    const delivered = [await send(tokenA), await send(tokenA)].map((r) => r.body.data.job_id as string);
    assert.equal((await send(tokenA, { approval_required: true })).http, 200);
    assert.equal(
      (await send(tokenA, { scheduled_date: new Date(Date.now() + 86_400_000).toISOString() })).http,
      200,
    );
    assert.equal((await send(tokenB)).http, 200, "another account's fax");
    // A fax of A from last month (UTC), delivered with 9 pages: not this month's.
    const now = new Date();
    const lastMonth = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) - 1000);
    await owner.query(
      `INSERT INTO fax_jobs (id, account_id, kind, state, fax_number, caller_id, fax_quality, fax_priority, page_count, pages_sent, created_at)
       VALUES (gen_random_uuid(), $1, 'send', 'delivered', '+15551234567', $2, 'standard', 'regular', 9, 9, $3)`,
      [a.account_id, a.numbers[0], lastMonth],
    );
    for (const id of delivered)
      await eventually(async () => {
        const r = await call(s.url, 'GET', `/v1/faxes/${id}`, { token: tokenA });
        return r.body.data?.state === 'delivered';
      });

    const w = await call(s.url, 'GET', '/v1/workspace', { token: tokenA });
    assert.equal(w.http, 200, JSON.stringify(w.body));
    assert.equal(w.body.status, 1);
    assert.equal(w.body.message, 'Workspace retrieved successfully');
    const d = w.body.data;
    assert.equal(d.account.id, a.account_id);
    assert.equal(d.account.name, 'Demo clinic');
    assert.equal(d.limits.rate_limit_per_second, 7);
    assert.equal(d.limits.rate_limit_burst, 900);
    assert.equal(d.limits.pages_per_fax, 42);
    assert.equal(d.limits.contacts, 321);
    assert.equal(d.limits.api_keys, 20);
    assert.equal(d.limits.documents_per_fax, 20);
    assert.equal(d.limits.token_lifetime_seconds, 86_400);
    assert.equal(d.limits.default_caller_id, null);
    const from = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
    assert.equal(d.usage.period.from, from.toISOString());
    assert.equal(
      d.usage.period.to,
      new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)).toISOString(),
    );
    assert.deepEqual(
      Object.keys(d.usage.by_state).sort(),
      [...jobStates].sort(),
      'every state, zeros included',
    );
    assert.deepEqual(d.usage.by_state.delivered, { faxes: 2, pages: 4, pages_sent: 4 });
    assert.deepEqual(d.usage.by_state.awaiting_approval, { faxes: 1, pages: 0, pages_sent: 0 });
    assert.deepEqual(d.usage.by_state.scheduled, { faxes: 1, pages: 0, pages_sent: 0 });
    assert.equal(d.usage.faxes, 4);
    assert.equal(d.usage.pages, 4);
    assert.equal(d.usage.pages_sent, 4);

    const wb = (await call(s.url, 'GET', '/v1/workspace', { token: tokenB })).body.data;
    assert.equal(wb.account.id, b.account_id);
    assert.equal(wb.usage.faxes, 1);
    refusedWithoutToken(await call(s.url, 'GET', '/v1/workspace'));
  });
});

describe('GET /v1/workspace under a burst of one account', () => {
  it('counts the usage once for requests that arrive while it is being counted', async () => {
    let accountReads = 0;
    let usageReads = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const client = {
      async query(sql: string) {
        if (/FROM accounts/.test(sql)) {
          accountReads++;
          return { rows: [{ id: 'acc', name: 'A', created_at: '2026-01-01T00:00:00.000Z' }] };
        }
        if (/FROM fax_jobs/.test(sql)) {
          usageReads++;
          await gate; // a slow count (an account with many faxes this month)
          return { rows: [{ state: 'delivered', faxes: 3, pages: 6, pages_sent: 6 }] };
        }
        throw new Error(`unexpected query: ${sql}`);
      },
    };
    const deps = {
      auth: async (req: { accountId?: string }) => {
        req.accountId = 'acc';
      },
      tenant: { tx: (_: string, fn: (c: typeof client) => Promise<unknown>) => fn(client) },
      clock: { now: () => new Date() },
      accountLimits: {},
    } as unknown as RouteDeps;
    const app = Fastify();
    app.setValidatorCompiler(() => () => true);
    app.setSerializerCompiler(() => (data) => JSON.stringify(data));
    registerWorkspaceRoutes(app, deps);
    try {
      const burst = Array.from({ length: 20 }, () => app.inject({ method: 'GET', url: '/v1/workspace' }));
      await eventually(async () => accountReads === 20);
      release();
      const answers = await Promise.all(burst);
      for (const a of answers) {
        assert.equal(a.statusCode, 200, a.body);
        assert.equal(JSON.parse(a.body).data.usage.faxes, 3);
      }
      assert.equal(usageReads, 1, 'one count for the whole burst');
    } finally {
      await app.close();
    }
  });
});

function refusedWithoutToken(r: { http: number; body: { status: number } }): void {
  assert.equal(r.http, 401);
  assert.equal(r.body.status, 401);
}
