// Per-fax options (issue 21, item 4) against the real PostgreSQL and RabbitMQ, on the simulated line:
// client_reference is stored, shown with the fax, carried by its events and searchable; max_dials and
// give_up_after override the installation's retry limits within their bounds (422 naming the field
// outside them); the list filters (date range, number, state, reference) combine with each other and
// with the cursor, and never show another account's faxes.
import amqp from 'amqplib';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { faxEvent, type FaxEvent } from '../src/events/schema.ts';
import { decideRetry, defaultRetryPolicy, policyForFax } from '../src/transmission/retry.ts';
import { assertRefused, twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { AMQP_URL, eventually } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

const BUSY = '+15550100001'; // the simulated line: busy on every call

describe('per-fax options', () => {
  let t: TwoAccounts;
  let pdf: string;
  let conn: amqp.ChannelModel | undefined;

  before(async () => {
    // Busy retried at once, up to 5 dials by default: a fax's own max_dials must win either way.
    t = await twoAccounts({ MAX_DIALS: '5', RETRY_BUSY_SECONDS: '0', LINE_POLL_MS: '50' });
    pdf = await makePdfBase64(1);
  });
  after(async () => {
    await conn?.close().catch(() => undefined);
    await t?.close();
  });

  const send = (token: string, body: Record<string, unknown>) =>
    t.api('POST', '/v1/faxes/send', token, { fax_data: [{ file_name: 'a.pdf', file_data: pdf }], ...body });
  const job = async (id: string, token = t.tokenA) =>
    (await t.api('GET', `/v1/faxes/${id}`, token)).body.data;
  const finished = (id: string) =>
    eventually(async () => {
      const j = await job(id);
      return ['delivered', 'failed'].includes(j?.state) ? j : null;
    }, 30_000);

  it('client_reference: stored, shown, in every event of the fax', async () => {
    conn = await amqp.connect(AMQP_URL);
    const ch = await conn.createChannel();
    const q = await ch.assertQueue('', { exclusive: true });
    await ch.bindQueue(q.queue, `${t.s.cfg.QUEUE_PREFIX}.events`, `${t.a.account_id}.#`);
    const events: FaxEvent[] = [];
    await ch.consume(q.queue, (m) => m && events.push(faxEvent.parse(JSON.parse(m.content.toString()))), {
      noAck: true,
    });

    const r = await send(t.tokenA, { fax_number: '+15551230001', client_reference: 'invoice 2026/0042 – ü' });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const id = r.body.data.job_id as string;
    const done = await finished(id);
    assert.equal(done.state, 'delivered');
    assert.equal(done.client_reference, 'invoice 2026/0042 – ü');
    assert.equal(done.max_dials, null);
    assert.equal(done.give_up_after, null);
    assert.equal(done.broadcast_id, null);
    const mine = await eventually(async () => {
      const e = events.filter((x) => x.job_id === id);
      return e.some((x) => x.type === 'fax.delivered') ? e : null;
    });
    assert.ok(mine.length >= 5);
    assert.ok(mine.every((e) => e.client_reference === 'invoice 2026/0042 – ü' && e.broadcast_id === null));
    // A fax sent without one: null in its view and events.
    const plain = await send(t.tokenA, { fax_number: '+15551230002' });
    await finished(plain.body.data.job_id);
    assert.equal((await job(plain.body.data.job_id)).client_reference, null);
    const other = await eventually(async () =>
      events.find((x) => x.job_id === plain.body.data.job_id && x.type === 'fax.delivered'),
    );
    assert.equal(other.client_reference, null);
  });

  it('policyForFax: the fax’s own limits replace the installation’s, the rest is kept', () => {
    const p = defaultRetryPolicy;
    assert.deepEqual(policyForFax(p, { max_dials: null, give_up_after: null }), p);
    assert.deepEqual(policyForFax(p, { max_dials: 2, give_up_after: 600 }), {
      ...p,
      maxDials: 2,
      killTimeSeconds: 600,
    });
    const since = new Date('2026-11-26T00:00:00Z');
    const busy = { type: 'busy' as const, retryable: true };
    const at = (s: number) => new Date(since.getTime() + s * 1000);
    // The second dial of a fax with max_dials 2 is its last; the installation's 12 would retry.
    assert.equal(
      decideRetry(policyForFax(p, { max_dials: 2, give_up_after: null }), busy, {
        dials: 2,
        tries: 0,
        since,
        now: at(1),
      }).retry,
      false,
    );
    assert.equal(decideRetry(p, busy, { dials: 2, tries: 0, since, now: at(1) }).retry, true);
    // give_up_after 300: a retry 180 s after a busy at 200 s would fall past it.
    assert.deepEqual(
      decideRetry(policyForFax(p, { max_dials: null, give_up_after: 300 }), busy, {
        dials: 1,
        tries: 0,
        since,
        now: at(200),
      }),
      {
        retry: false,
        why: 'kill time of 300 s reached',
      },
    );
  });

  it('refuses options outside their bounds with 422 naming the field', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ client_reference: '' }, 'client_reference: must not be empty'],
      [{ client_reference: 'x'.repeat(129) }, 'client_reference: is longer than 128 characters'],
      [
        { client_reference: 'two\nlines' },
        'client_reference: must be printable characters (no control characters or line breaks)',
      ],
      [{ client_reference: 42 }, 'client_reference: must be a string'],
      [{ max_dials: 0 }, 'max_dials: must be at least 1'],
      [{ max_dials: 101 }, 'max_dials: must be at most 100'],
      [{ max_dials: 2.5 }, 'max_dials: must be a whole number'],
      [{ max_dials: '3' }, 'max_dials: must be a whole number'],
      [{ give_up_after: 59 }, 'give_up_after: must be at least 60 seconds'],
      [{ give_up_after: 604_801 }, 'give_up_after: must be at most 604800 seconds'],
    ];
    for (const [body, message] of cases) {
      const r = await send(t.tokenA, { fax_number: '+15551230003', ...body });
      assertRefused(r, 422, message);
    }
  });

  it('max_dials: a busy fax gives up after its own number of dials, not MAX_DIALS', async () => {
    const two = await send(t.tokenA, { fax_number: BUSY, max_dials: 2 });
    const installation = await send(t.tokenA, { fax_number: BUSY });
    const seven = await send(t.tokenA, { fax_number: BUSY, max_dials: 7 });
    const [a, b, c] = await Promise.all(
      [two, installation, seven].map((r) => finished(r.body.data.job_id as string)),
    );
    assert.deepEqual([a.state, a.attempts, a.max_dials], ['failed', 2, 2]);
    assert.match(a.failure.reason, /2 dials \(limit 2\)/);
    assert.deepEqual([b.state, b.attempts, b.max_dials], ['failed', 5, null]);
    assert.deepEqual([c.state, c.attempts, c.max_dials], ['failed', 7, 7], 'above MAX_DIALS too');
  });

  it('give_up_after: no new call once the fax has waited that long since it was ready', async () => {
    // Busy retried after 10 minutes: a fax that gives up after 5 minutes fails at the first busy;
    // with the installation's kill time (3 hours) it waits for its retry.
    const t2 = await twoAccounts({ RETRY_BUSY_SECONDS: '600', LINE_POLL_MS: '50' });
    try {
      const s2 = (body: Record<string, unknown>) =>
        t2.api('POST', '/v1/faxes/send', t2.tokenA, {
          fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
          fax_number: BUSY,
          ...body,
        });
      const soon = await s2({ give_up_after: 300 });
      const usual = await s2({});
      const state = async (id: string) => (await t2.api('GET', `/v1/faxes/${id}`, t2.tokenA)).body.data;
      const a = await eventually(async () => {
        const j = await state(soon.body.data.job_id);
        return j.state === 'failed' ? j : null;
      }, 30_000);
      assert.equal(a.attempts, 1);
      assert.equal(a.give_up_after, 300);
      assert.match(a.failure.reason, /kill time of 300 s reached/);
      const b = await eventually(async () => {
        const j = await state(usual.body.data.job_id);
        return j.state === 'retry_waiting' ? j : null;
      }, 30_000);
      assert.equal(b.attempts, 1);
      assert.equal(b.give_up_after, null);
    } finally {
      await t2.close();
    }
  });

  it('list filters: date range, number, state and reference, combined and paged, per account', async () => {
    // Account B holds faxes with the same number and reference: never listed for A.
    const ref = 'filter-ref';
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await send(t.tokenA, {
        fax_number: '+15551239000',
        client_reference: ref,
        scheduled_date: new Date(Date.now() + 3_600_000).toISOString(),
      });
      assert.equal(r.http, 200, JSON.stringify(r.body));
      ids.push(r.body.data.job_id);
    }
    const elsewhere = await send(t.tokenA, {
      fax_number: '+15551239001',
      client_reference: ref,
      scheduled_date: new Date(Date.now() + 3_600_000).toISOString(),
    });
    for (let i = 0; i < 3; i++)
      await send(t.tokenB, {
        fax_number: '+15551239000',
        client_reference: ref,
        scheduled_date: new Date(Date.now() + 3_600_000).toISOString(),
      });
    // Spread A's five over five days (the owner moves created_at; the API cannot).
    for (const [i, id] of ids.entries())
      await t.owner.query(`UPDATE fax_jobs SET created_at = '2026-01-0${i + 1}T12:00:00Z' WHERE id = $1`, [
        id,
      ]);
    const list = async (q: string, token = t.tokenA) => t.api('GET', `/v1/faxes?${q}`, token);
    const idsOf = (r: Awaited<ReturnType<typeof list>>) =>
      r.body.data.map((j: { job_id: string }) => j.job_id);

    const byRef = await list(`client_reference=${ref}&limit=1000`);
    assert.deepEqual(new Set(idsOf(byRef)), new Set([...ids, elsewhere.body.data.job_id]));
    const byNumber = await list('fax_number=%2B15551239000&limit=1000');
    assert.deepEqual(idsOf(byNumber), [...ids].reverse(), 'newest first');
    const unencodedPlus = await list('fax_number=+15551239000&limit=1000');
    assert.deepEqual(idsOf(unencodedPlus), idsOf(byNumber));
    const range = await list(
      `fax_number=%2B15551239000&created_from=2026-01-02T00:00:00Z&created_to=2026-01-04T12:00:00Z`,
    );
    assert.deepEqual(idsOf(range), [ids[2], ids[1]], 'from inclusive, to exclusive');
    const combined = await list(
      `state=scheduled&client_reference=${ref}&created_to=2026-02-01T00:00:00%2B01:00`,
    );
    assert.deepEqual(idsOf(combined), [...ids].reverse());
    assert.deepEqual(idsOf(await list(`state=delivered&client_reference=${ref}`)), []);

    // Paged two at a time under a filter, forward and back.
    const pages: string[][] = [];
    let cursor: string | null = null;
    for (let n = 0; n < 5; n++) {
      const p = await list(
        `fax_number=%2B15551239000&limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      );
      assert.equal(p.http, 200, JSON.stringify(p.body));
      pages.push(idsOf(p));
      cursor = p.body.meta.next_cursor;
      if (!cursor) {
        const back = await list(
          `fax_number=%2B15551239000&limit=2&cursor=${encodeURIComponent(p.body.meta.previous_cursor)}`,
        );
        assert.deepEqual(idsOf(back), pages[pages.length - 2]);
        break;
      }
    }
    assert.deepEqual(pages.flat(), [...ids].reverse());
    assert.deepEqual(
      pages.map((p) => p.length),
      [2, 2, 1],
    );
    // A cursor issued under one filter is refused under another.
    const first = await list('fax_number=%2B15551239000&limit=2');
    const moved = await list(
      `fax_number=%2B15551239001&limit=2&cursor=${encodeURIComponent(first.body.meta.next_cursor)}`,
    );
    assertRefused(moved, 422, /^cursor: is not a cursor this list issued/);

    // B sees its own three only, with the same filters.
    const b = await list(`client_reference=${ref}&fax_number=%2B15551239000`, t.tokenB);
    assert.equal(b.body.data.length, 3);
    assert.ok(b.body.data.every((j: { job_id: string }) => !ids.includes(j.job_id)));

    // Wrong filter values: 422 naming the parameter.
    assertRefused(await list('fax_number=555'), 422, /^fax_number: must be an E\.164 number/);
    assertRefused(await list('created_from=yesterday'), 422, /^created_from: must be an ISO 8601 timestamp/);
    assertRefused(
      await list('created_from=2026-01-02T00:00:00Z&created_to=2026-01-01T00:00:00Z'),
      422,
      'created_to: must be later than created_from',
    );
    assertRefused(
      await list(`client_reference=${'x'.repeat(129)}`),
      422,
      /^client_reference: must be 1 to 128/,
    );
    assertRefused(await list('state=nope'), 422, /^state: must be one of accepted/);
    assertRefused(await list('fax_number=%2B1555&fax_number=%2B1556'), 422, 'fax_number: must be given once');
  });

  it('the list filters use their indexes', async () => {
    const plan = async (where: string) => {
      const r = await t.owner.query(
        `EXPLAIN (FORMAT JSON) SELECT * FROM fax_jobs WHERE account_id = $1 AND ${where}
          ORDER BY created_at DESC, id DESC LIMIT 51`,
        [t.a.account_id],
      );
      return JSON.stringify(r.rows[0]['QUERY PLAN']);
    };
    await t.owner.query('SET enable_seqscan = off');
    try {
      assert.match(await plan(`client_reference = 'x'`), /fax_jobs_account_reference/);
      assert.match(await plan(`fax_number = '+15551239000'`), /fax_jobs_account_number/);
    } finally {
      await t.owner.query('RESET enable_seqscan');
    }
  });
});
