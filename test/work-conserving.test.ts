// Work-conserving fair share (issue 33, item 5): an account is held to its share of preparation
// places and render processes only while another account waits; one account alone uses every
// place but the one kept for a newcomer (every render process). Before, a lone account stayed at
// PREPARE_ACCOUNT_CONCURRENCY (and at one render process of two) with the other places idle.
// Real PostgreSQL, RabbitMQ and HTTP on 127.0.0.1.
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { FairGate, FairQueue } from '../src/documents/fair-queue.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

describe('FairQueue: work-conserving', () => {
  it('lets a lone account past its share up to all but one slot, and holds it to its share while another waits', () => {
    const q = new FairQueue<string>(4, 1);
    for (let i = 0; i < 6; i++) q.push('A', `a${i}`);
    const first = [q.take(), q.take(), q.take()].map((x) => x?.item);
    assert.deepEqual(first, ['a0', 'a1', 'a2'], 'A alone runs 3 of 4 places, past its share of 1');
    assert.equal(q.take(), null, 'the fourth place is kept for another account');
    q.push('B', 'b0');
    q.push('B', 'b1');
    assert.deepEqual(q.take(), { account: 'B', item: 'b0' }, 'B takes the kept place at once');
    q.done('A');
    // A has 2 running, B 1: both at or past their share of 1, so the fewest running goes first.
    assert.deepEqual(q.take(), { account: 'B', item: 'b1' }, 'the freed place goes to B (fewest running)');
    q.done('A');
    assert.deepEqual(q.take(), { account: 'A', item: 'a3' });
  });

  it('lets one account alone hold every slot when `most` is the size (the render pool)', () => {
    const q = new FairQueue<string>(2, 1, 2);
    q.push('A', 'a0');
    q.push('A', 'a1');
    q.push('A', 'a2');
    assert.equal(q.take()?.item, 'a0');
    assert.equal(q.take()?.item, 'a1', 'both render processes work for the lone account');
    q.push('B', 'b0');
    q.done('A');
    assert.equal(q.take()?.item, 'b0', 'the next free process goes to the newcomer, not to A');
  });

  it('FairGate: a lone account gets more permits than its share', async () => {
    const gate = new FairGate(8, 2);
    const held: (() => void)[] = [];
    for (let i = 0; i < 10; i++) void gate.acquire('A').then((r) => held.push(r));
    await eventually(async () => held.length === 7, 5_000, 5);
    for (const r of held) r();
  });
});

describe('send worker: one account alone uses every preparation place but one', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  // A document server on 127.0.0.1 that holds the documents until released.
  const held: ServerResponse[] = [];
  let release = false;
  let pdf: Buffer;
  const server = createServer((_req, res) => {
    if (release) res.end(pdf);
    else held.push(res);
  });
  before(async () => {
    pdf = Buffer.from(await makePdfBase64(1), 'base64');
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    s = await startService({
      env: {
        FETCH_ALLOW_HOSTS: '127.0.0.1',
        FETCH_TIMEOUT_SECONDS: '300',
        PREPARE_CONCURRENCY: '4',
        PREPARE_ACCOUNT_CONCURRENCY: '1',
      },
    });
  });
  after(async () => {
    release = true;
    for (const res of held.splice(0)) res.end(pdf);
    await s.dropAll();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('prepares 3 faxes of a lone account at once (its share is 1), then serves a newcomer at once', async () => {
    const [a, b] = [await seedAccount(s), await seedAccount(s)];
    const [ta, tb] = [await tokenFor(s.url, a.api_key), await tokenFor(s.url, b.api_key)];
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/slow.pdf`;
    const aJobs: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await call(s.url, 'POST', '/v1/faxes/send', {
        token: ta,
        body: { fax_number: `+1555123450${i}`, fax_data: [{ file_name: `slow${i}.pdf`, file_url: url }] },
      });
      assert.equal(r.http, 200, r.body.message);
      aJobs.push(r.body.data.job_id as string);
    }
    // Alone, A's preparations take the free places: three documents requested and held at once.
    const most = await eventually(async () => (held.length >= 3 ? held.length : null), 60_000).catch(
      () => held.length,
    );
    assert.equal(most, 3, `A alone holds ${most} preparations (share 1, 4 places, one kept)`);
    // B's fax takes the place kept free, at once, while A's three still hold theirs.
    const sent = await call(s.url, 'POST', '/v1/faxes/send', {
      token: tb,
      body: {
        fax_number: '+15551234599',
        fax_data: [{ file_name: 'b.pdf', file_data: pdf.toString('base64') }],
      },
    });
    assert.equal(sent.http, 200, sent.body.message);
    const bJob = sent.body.data.job_id as string;
    await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${bJob}`, { token: tb });
      return r.body.data?.state === 'delivered';
    }, 60_000);
    assert.equal(held.length, 3, 'A never took the kept place while B waited');
    release = true;
    for (const res of held.splice(0)) res.end(pdf);
    for (const id of aJobs)
      await eventually(async () => {
        const r = await call(s.url, 'GET', `/v1/faxes/${id}`, { token: ta });
        return r.body.data?.state === 'delivered';
      }, 120_000);
  });
});

describe('send worker: parked commands come back as soon as there is room for them', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  before(async () => {
    // A backlog of 4 parks most of a burst; parked commands would be due only after 600 s.
    s = await startService({
      env: { PREPARE_ACCOUNT_BACKLOG: '4', PREPARE_PARK_SECONDS: '600', LINES: '8', LINE_POLL_MS: '50' },
    });
  });
  after(() => s.dropAll());

  it('delivers a lone account’s burst of 30 long before its parked commands fall due', async () => {
    const a = await seedAccount(s);
    const token = await tokenFor(s.url, a.api_key);
    const fax_data = [{ file_name: 'a.pdf', file_data: await makePdfBase64(1) }];
    const ids = await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        const r = await call(s.url, 'POST', '/v1/faxes/send', {
          token,
          body: { fax_number: `+155512346${String(i).padStart(2, '0')}`, fax_data },
        });
        assert.equal(r.http, 200, r.body.message);
        return r.body.data.job_id as string;
      }),
    );
    await eventually(async () => s.logs.text.includes('command parked'), 60_000);
    const db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    try {
      // Bounded well below the 600 s park: only an early return of the parked commands passes.
      const left = await eventually(async () => {
        const r = await db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM fax_jobs WHERE id = ANY($1::uuid[]) AND state <> 'delivered'`,
          [ids],
        );
        return r.rows[0]!.n === 0 ? 'none' : null;
      }, 180_000).catch(() => 'some');
      assert.equal(left, 'none', 'faxes of the burst still waited on their parked commands');
      // Every parked lot is forgotten once its command was confirmed (recorded within 50 ms).
      await eventually(async () => {
        const r = await db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM intake_lots WHERE account_id = $1`,
          [a.account_id],
        );
        return r.rows[0]!.n === 0;
      }, 30_000);
    } finally {
      await db.end();
    }
  });
});
