// Cursor pagination (numbers, faxes), approval (API and admin CLI), Idempotency-Key, rate limiting
// and group commit under concurrency.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { DemoSeed } from '../src/admin/seed.ts';
import { openJobOptions } from '../src/db/sealed-columns.ts';
import { call, seedAccount, tokenFor, type Reply } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

const BAD_CURSOR = {
  status: 0,
  message: 'cursor: is not a cursor this list issued; pass next_cursor or previous_cursor unchanged',
};

describe('customer API flows', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let seed: DemoSeed;
  let token: string;
  let pdf: string;
  let owner: pg.Client;
  /** Every stored fax's cover subject (sealed in its row: docs/encryption.md), opened. */
  const subjects = async (): Promise<string[]> => {
    const rows = (await owner.query('SELECT id, account_id, options FROM fax_jobs')).rows;
    const out: string[] = [];
    for (const r of rows) {
      const o = await openJobOptions(owner, r.account_id, r.id, r.options as { subject?: string });
      if (o.subject !== undefined) out.push(o.subject);
    }
    return out;
  };
  const doc = () => [{ file_name: 'a.pdf', file_data: pdf }];
  const send = (body: object, headers?: Record<string, string>) =>
    call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: { fax_number: '+15551234567', fax_data: doc(), ...body },
      ...(headers ? { headers } : {}),
    });
  const job = async (id: string) => (await call(s.url, 'GET', `/v1/faxes/${id}`, { token })).body.data;
  const cli = (...args: string[]) =>
    spawnSync(process.execPath, ['src/admin/cli.ts', ...args], {
      env: { ...process.env, DATABASE_URL: s.cfg.DATABASE_URL, QUEUE_PREFIX: s.cfg.QUEUE_PREFIX },
      encoding: 'utf8',
      timeout: 30_000,
    });

  before(async () => {
    s = await startService({ env: { RATE_LIMIT_PER_SECOND: '0' } });
    seed = await seedAccount(s);
    token = await tokenFor(s.url, seed.api_key);
    pdf = await makePdfBase64(1);
    owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await owner.connect();
  });
  after(async () => {
    await owner.end();
    await s.dropAll();
  });

  describe('GET /v1/numbers: cursor pagination', () => {
    const page = (q: string) => call(s.url, 'GET', `/v1/numbers${q}`, { token });

    it('walks forward and back in a stable order with exact meta', async () => {
      const expected = (
        await owner.query('SELECT id FROM numbers WHERE account_id = $1 ORDER BY created_at, id', [
          seed.account_id,
        ])
      ).rows.map((r: { id: string }) => r.id);
      const pages: Reply[] = [];
      let r = await page('?limit=7');
      assert.equal(r.body.meta.previous_cursor, null);
      pages.push(r);
      while (r.body.meta.next_cursor) {
        r = await page(`?limit=7&cursor=${r.body.meta.next_cursor}`);
        assert.equal(r.http, 200);
        assert.equal(r.body.status, 1);
        assert.equal(r.body.message, 'Numbers retrieved successfully');
        pages.push(r);
      }
      assert.equal(pages.length, 9);
      assert.deepEqual(
        pages.flatMap((p) => p.body.data.map((n: { id: string }) => n.id)),
        expected,
      );
      const last = pages[8]!;
      assert.equal(last.body.data.length, 4);
      assert.equal(last.body.meta.has_more, false);
      assert.equal(last.body.meta.next_cursor, null);
      assert.equal(last.body.meta.limit, 7);
      assert.ok(pages.slice(0, 8).every((p) => p.body.meta.has_more === true));
      // Backwards from the last page reproduces every page.
      let back = last;
      for (let i = 7; i >= 0; i--) {
        back = await page(`?limit=7&cursor=${back.body.meta.previous_cursor}`);
        assert.deepEqual(back.body.data, pages[i]!.body.data);
      }
      assert.equal(back.body.meta.previous_cursor, null);
      assert.equal(back.body.meta.has_more, true);
      assert.deepEqual(Object.keys(back.body.data[0]).sort(), [
        'capabilities',
        'created_at',
        // Fax to email (issue 30, docs/api.md): where the number's received faxes are mailed.
        'email_attach',
        'email_to',
        'id',
        'label',
        'number',
        'receive',
        'station_id',
      ]);
    });

    it('limit: default 50; above 1000 clamped to 1000; below 1 or not a number → 422', async () => {
      const d = await page('');
      assert.equal(d.body.data.length, 50);
      assert.equal(d.body.meta.limit, 50);
      const big = await page('?limit=5000');
      assert.equal(big.http, 200);
      assert.equal(big.body.meta.limit, 1000);
      assert.equal(big.body.data.length, 60);
      assert.equal(big.body.meta.has_more, false);
      for (const q of ['0', '-1', 'abc', '2.5'])
        assert.deepEqual((await page(`?limit=${q}`)).body, {
          status: 0,
          message: 'limit: must be a whole number of at least 1 (a page holds at most 1000)',
        });
    });

    it('an altered, forged or foreign cursor → 422', async () => {
      const c: string = (await page('?limit=3')).body.meta.next_cursor;
      const [payload, mac] = c.split('.') as [string, string];
      const pos = JSON.parse(Buffer.from(payload, 'base64url').toString());
      const shifted = Buffer.from(JSON.stringify({ ...pos, t: '2000-01-01T00:00:00.000000Z' })).toString(
        'base64url',
      );
      const flip = (x: string) => (x[0] === 'A' ? 'B' : 'A') + x.slice(1);
      const faxesCursor = (await call(s.url, 'GET', '/v1/faxes?limit=1', { token })).body.meta.next_cursor;
      for (const bad of [
        `${shifted}.${mac}`,
        `${payload}.${flip(mac)}`,
        `${flip(payload)}.${mac}`,
        `${payload}.${'A'.repeat(43)}`,
        'garbage',
        '',
        ...(faxesCursor ? [faxesCursor] : []),
      ]) {
        const r = await page(`?cursor=${encodeURIComponent(bad)}`);
        if (bad === '') {
          assert.equal(r.http, 200, 'an empty cursor is the first page');
          continue;
        }
        assert.equal(r.http, 422, bad);
        assert.deepEqual(r.body, BAD_CURSOR);
      }
    });
  });

  describe('GET /v1/faxes', () => {
    it('lists newest first, filters by state, and binds cursors to the filter', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 5; i++)
        ids.push(
          (await send({ scheduled_date: new Date(Date.now() + 3_600_000 + i * 1000).toISOString() })).body
            .data.job_id,
        );
      const p1 = await call(s.url, 'GET', '/v1/faxes?state=scheduled&limit=2', { token });
      assert.equal(p1.http, 200);
      assert.equal(p1.body.message, 'Faxes retrieved successfully');
      const p2 = await call(
        s.url,
        'GET',
        `/v1/faxes?state=scheduled&limit=2&cursor=${p1.body.meta.next_cursor}`,
        {
          token,
        },
      );
      const p3 = await call(
        s.url,
        'GET',
        `/v1/faxes?state=scheduled&limit=2&cursor=${p2.body.meta.next_cursor}`,
        {
          token,
        },
      );
      const seen = [...p1.body.data, ...p2.body.data, ...p3.body.data];
      assert.ok(
        seen.every(
          (j: { state: string; scheduled_date: string }) => j.state === 'scheduled' && j.scheduled_date,
        ),
      );
      assert.deepEqual(
        seen.map((j: { job_id: string }) => j.job_id).filter((id: string) => ids.includes(id)),
        [...ids].reverse(),
      );
      const wrongFilter = await call(s.url, 'GET', `/v1/faxes?cursor=${p1.body.meta.next_cursor}`, { token });
      assert.deepEqual(wrongFilter.body, BAD_CURSOR);
      const bogus = await call(s.url, 'GET', '/v1/faxes?state=lost', { token });
      assert.equal(bogus.http, 422);
      assert.match(bogus.body.message, /^state: must be one of accepted, awaiting_approval, scheduled,/);
    });
  });

  describe('approval', () => {
    it('waits in awaiting_approval (no command, no schedule slot), then approve sends it', async () => {
      const r = await send({ approval_required: true });
      const id = r.body.data.job_id;
      assert.equal(r.body.message, 'Fax processed for sending');
      assert.equal((await job(id)).state, 'awaiting_approval');
      const listed = await call(s.url, 'GET', '/v1/faxes?state=awaiting_approval', { token });
      assert.ok(listed.body.data.some((j: { job_id: string }) => j.job_id === id));
      const boss = await owner.query(`SELECT count(*)::int AS n FROM pgboss.job WHERE data->>'job_id' = $1`, [
        id,
      ]);
      assert.equal(boss.rows[0].n, 0);
      const ok = await call(s.url, 'POST', '/v1/faxes/approve', { token, body: { job_id: id } });
      assert.equal(ok.http, 200);
      assert.deepEqual(ok.body, {
        status: 1,
        message: 'Fax approved for sending',
        data: { job_id: id, state: 'accepted' },
      });
      await eventually(async () => (await job(id)).state === 'delivered');
      const twice = await call(s.url, 'POST', '/v1/faxes/approve', { token, body: { job_id: id } });
      assert.equal(twice.http, 409);
      assert.equal(twice.body.message, 'Fax is not awaiting approval (current state: delivered)');
    });

    it('reject ends it rejected and it is never sent', async () => {
      const id = (await send({ approval_required: true })).body.data.job_id;
      const r = await call(s.url, 'POST', '/v1/faxes/reject', {
        token,
        body: { job_id: id, reason: 'wrong patient' },
      });
      assert.deepEqual(r.body, {
        status: 1,
        message: 'Fax rejected; it will not be sent',
        data: { job_id: id, state: 'rejected' },
      });
      const j = await job(id);
      assert.equal(j.state, 'rejected');
      assert.deepEqual(j.failure, { code: 'rejected', reason: 'rejected: wrong patient' });
      assert.deepEqual(
        j.history.map((h: { to: string }) => h.to),
        ['awaiting_approval', 'rejected'],
      );
      const fwd = await call(s.url, 'POST', '/v1/faxes/forward', {
        token,
        body: { job_id: id, fax_number: '+15550001111' },
      });
      assert.equal(fwd.http, 409);
      const approve = await call(s.url, 'POST', '/v1/faxes/approve', { token, body: { job_id: id } });
      assert.equal(approve.http, 409);
      assert.equal(approve.body.message, 'Fax is not awaiting approval (current state: rejected)');
    });

    it('a scheduled fax awaiting approval: cancel-schedule works; approve schedules it', async () => {
      const due = new Date(Date.now() + 3_600_000).toISOString();
      const a = (await send({ approval_required: true, scheduled_date: due })).body.data.job_id;
      const c = await call(s.url, 'POST', '/v1/faxes/cancel-schedule', { token, body: { job_id: a } });
      assert.deepEqual(c.body, { status: 1, message: 'Scheduled fax cancelled successfully' });
      assert.equal((await job(a)).state, 'cancelled');
      // Due inside the scheduler's near window (120 s), so that approving gives it its pg-boss job.
      const near = new Date(Date.now() + 60_000).toISOString();
      const b = (await send({ approval_required: true, scheduled_date: near })).body.data.job_id;
      const boss = async () =>
        (await owner.query(`SELECT count(*)::int AS n FROM pgboss.job WHERE data->>'job_id' = $1`, [b]))
          .rows[0].n as number;
      assert.equal(await boss(), 0, 'no schedule slot while awaiting approval');
      const pending = await call(s.url, 'GET', '/v1/faxes?state=scheduled', { token });
      assert.ok(!pending.body.data.some((x: { job_id: string }) => x.job_id === b));
      const ok = await call(s.url, 'POST', '/v1/faxes/approve', { token, body: { job_id: b } });
      assert.equal(ok.body.data.state, 'scheduled');
      const j = await job(b);
      assert.equal(j.scheduled_date, near);
      assert.equal(await boss(), 1);
      const listed = await call(s.url, 'GET', '/v1/faxes?state=scheduled', { token });
      assert.ok(listed.body.data.some((x: { job_id: string }) => x.job_id === b));
      // An unscheduled fax awaiting approval is not "scheduled": cancel-schedule refuses it.
      const u = (await send({ approval_required: true })).body.data.job_id;
      const refused = await call(s.url, 'POST', '/v1/faxes/cancel-schedule', { token, body: { job_id: u } });
      assert.equal(refused.http, 409);
    });

    it('admin CLI: list-awaiting, approve, reject', async () => {
      const x = (await send({ approval_required: true })).body.data.job_id;
      const y = (await send({ approval_required: true })).body.data.job_id;
      const list = cli('list-awaiting', '--account', seed.account_id);
      assert.equal(list.status, 0, list.stderr);
      const listed = JSON.parse(list.stdout).map((j: { job_id: string }) => j.job_id);
      assert.ok(listed.includes(x) && listed.includes(y));
      const ap = cli('approve', '--job', x);
      assert.equal(ap.status, 0, ap.stderr);
      assert.deepEqual(JSON.parse(ap.stdout), { job_id: x, state: 'accepted' });
      await eventually(async () => (await job(x)).state === 'delivered');
      const rj = cli('reject', '--job', y, '--reason', 'duplicate');
      assert.equal(rj.status, 0, rj.stderr);
      assert.deepEqual(JSON.parse(rj.stdout), { job_id: y, state: 'rejected' });
      const again = cli('approve', '--job', y);
      assert.equal(again.status, 1);
      assert.match(again.stderr, /Fax is not awaiting approval \(current state: rejected\) \(409\)/);
    });
  });

  describe('Idempotency-Key', () => {
    it('same key and body → the first answer, one job; same key, other body → 422', async () => {
      const key = { 'idempotency-key': `k-${Date.now()}` };
      const first = await send({ subject: 'once' }, key);
      const again = await send({ subject: 'once' }, key);
      assert.deepEqual(again.body, first.body);
      assert.equal(again.http, 200);
      assert.equal((await subjects()).filter((x) => x === 'once').length, 1);
      const other = await send({ subject: 'twice' }, key);
      assert.equal(other.http, 422);
      assert.deepEqual(other.body, {
        status: 0,
        message:
          'Idempotency-Key: was already used with a different request; use a new key for a new request',
      });
      const fresh = await send({ subject: 'once' }, { 'idempotency-key': `${key['idempotency-key']}-2` });
      assert.notEqual(fresh.body.data.job_id, first.body.data.job_id);
    });

    it('concurrent retries with one key make one job; forward honours keys too', async () => {
      const key = { 'idempotency-key': `race-${Date.now()}` };
      const all = await Promise.all(Array.from({ length: 8 }, () => send({ subject: 'race' }, key)));
      assert.ok(all.every((r) => r.http === 200));
      assert.equal(new Set(all.map((r) => r.body.data.job_id)).size, 1);
      const src = all[0]!.body.data.job_id;
      const fk = { 'idempotency-key': `fwd-${Date.now()}` };
      const f1 = await call(s.url, 'POST', '/v1/faxes/forward', {
        token,
        body: { job_id: src, fax_number: '+15550002222' },
        headers: fk,
      });
      const f2 = await call(s.url, 'POST', '/v1/faxes/forward', {
        token,
        body: { job_id: src, fax_number: '+15550002222' },
        headers: fk,
      });
      assert.equal(f1.body.data.job_id, f2.body.data.job_id);
      const f3 = await call(s.url, 'POST', '/v1/faxes/forward', {
        token,
        body: { job_id: src, fax_number: '+15550003333' },
        headers: fk,
      });
      assert.equal(f3.http, 422);
      const bad = await send({}, { 'idempotency-key': 'has space' });
      assert.equal(bad.http, 422);
      assert.equal(
        bad.body.message,
        'Idempotency-Key: must be 1 to 255 visible ASCII characters, given once',
      );
    });
  });

  describe('group commit', () => {
    it('concurrent sends of two accounts, some refused, each land in their own account exactly once', async () => {
      const other = await seedAccount(s);
      const otherToken = await tokenFor(s.url, other.api_key);
      const reqs = Array.from({ length: 120 }, (_, i) => {
        const mine = i % 2 === 0;
        const bad = i % 10 === 3;
        return call(s.url, 'POST', '/v1/faxes/send', {
          token: mine ? token : otherToken,
          body: {
            fax_number: '+15551234567',
            fax_data: doc(),
            subject: `gc-${i}`,
            ...(bad ? { template_id: '00000000-0000-4000-8000-000000000000' } : {}),
          },
        }).then((r) => ({ i, mine, bad, r }));
      });
      const res = await Promise.all(reqs);
      for (const { i, mine, bad, r } of res) {
        assert.equal(r.http, bad ? 422 : 200, `request ${i}`);
        if (bad) continue;
        const row = await owner.query('SELECT id, account_id, options FROM fax_jobs WHERE id = $1', [
          r.body.data.job_id,
        ]);
        assert.equal(row.rows[0].account_id, mine ? seed.account_id : other.account_id);
        const options = await openJobOptions(
          owner,
          row.rows[0].account_id,
          row.rows[0].id,
          row.rows[0].options,
        );
        assert.equal(options.subject, `gc-${i}`);
      }
      assert.equal((await subjects()).filter((x) => x.startsWith('gc-')).length, 108);
    });
  });
});
