// Broadcast (issue 21, item 1) against the real PostgreSQL and RabbitMQ, on the simulated line: one
// send with `recipients` makes one job per recipient, its documents stored and rendered once (the
// metric faxline_broadcast_renders_total counts it), each recipient with its own cover; the broadcast
// is read with counts per state and its jobs paged, and cancelled as a whole; another account's
// broadcast id behaves like a missing one; the same over AMQP.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { parseExposition, sumOf } from '../src/metrics/exposition.ts';
import { registerSender } from '../src/auth/senders.ts';
import { openJobOptions } from '../src/db/sealed-columns.ts';
import { getRender } from '../src/documents/render/store.ts';
import { PgDocumentStore } from '../src/documents/store.ts';
import { faxEvent, type FaxEvent } from '../src/events/schema.ts';
import { assertRefused, twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { createSenderUser, type BrokerUser } from './support/amqp-users.ts';
import { eventually } from './support/harness.ts';
import { whileProgressing } from './support/wait.ts';
import { makePdfBase64 } from './support/pdf.ts';
import { TestSender } from './support/sender.ts';

const numbers = (n: number, base = 5550200000) => Array.from({ length: n }, (_, i) => `+1${base + i}`);

describe('broadcast', () => {
  let t: TwoAccounts;
  let pdf2: string;
  let user: BrokerUser | undefined;
  let sender: TestSender | undefined;

  before(async () => {
    t = await twoAccounts(
      { SIM_SPEEDUP: '1000', LINES: '64', BROADCAST_MAX_RECIPIENTS: '250', LINE_POLL_MS: '50' },
      { cover: true },
    );
    pdf2 = await makePdfBase64(2);
  });
  after(async () => {
    await sender?.close();
    await user?.remove();
    await t?.close();
  });

  const renders = async () => {
    const text = await (await fetch(`${t.s.url}/metrics`)).text();
    const m = parseExposition(text);
    return {
      rendered: sumOf(m, 'faxline_broadcast_renders_total', { outcome: 'rendered' }),
      reused: sumOf(m, 'faxline_broadcast_renders_total', { outcome: 'reused' }),
    };
  };

  it(
    'sends one document to 200 numbers: one render, 200 jobs, each with its own cover, all delivered',
    { timeout: 660_000 },
    async () => {
      const before = await renders();
      const to = numbers(200);
      const r = await t.api('POST', '/v1/faxes/send', t.tokenA, {
        recipients: to.map((fax_number, i) => ({
          fax_number,
          to_name: `Prescriber ${i}`,
          ...(i === 7 ? { subject: 'Only for seven', client_reference: 'rx-7' } : {}),
        })),
        fax_data: [{ file_name: 'notice.pdf', file_data: pdf2 }],
        subject: 'Recall notice',
        client_reference: 'recall-2026-11',
      });
      assert.equal(r.http, 200, JSON.stringify(r.body));
      assert.equal(r.body.status, 1);
      assert.equal(r.body.message, 'Fax processed for sending');
      const { broadcast_id: bid, job_ids: ids, job_id: first } = r.body.data;
      assert.equal(ids.length, 200);
      assert.equal(first, ids[0]);

      // The documents are stored once: on the first job; the others read them there.
      const docs = await t.owner.query(
        'SELECT count(*)::int AS n FROM fax_documents d JOIN fax_jobs j ON j.id = d.job_id WHERE j.broadcast_id = $1',
        [bid],
      );
      assert.equal(docs.rows[0].n, 1);
      const jobs = await t.owner.query(
        `SELECT id, account_id, fax_number, source_job_id, client_reference, options, broadcast_position
         FROM fax_jobs WHERE broadcast_id = $1 ORDER BY broadcast_position`,
        [bid],
      );
      // Each recipient's cover text is sealed in its own row (docs/encryption.md): opened here.
      for (const j of jobs.rows) j.options = await openJobOptions(t.owner, j.account_id, j.id, j.options);
      assert.deepEqual(
        jobs.rows.map((j) => j.id),
        ids,
      );
      assert.deepEqual(
        jobs.rows.map((j) => j.fax_number),
        to,
      );
      assert.equal(jobs.rows[0].source_job_id, null);
      assert.ok(jobs.rows.slice(1).every((j) => j.source_job_id === ids[0]));
      assert.equal(jobs.rows[7].client_reference, 'rx-7');
      assert.equal(jobs.rows[7].options.subject, 'Only for seven');
      assert.equal(jobs.rows[8].client_reference, 'recall-2026-11');
      assert.equal(jobs.rows[8].options.subject, 'Recall notice');
      assert.equal(jobs.rows[8].options.recipient_name, 'Prescriber 8');
      // The broadcast's view lists its faxes with their options opened, as GET /v1/faxes/{id} shows them.
      const listed: { job_id: string; options: Record<string, unknown> }[] = [];
      for (let cursor: string | undefined, i = 0; i < 10; i++) {
        const q = cursor ? `?limit=100&cursor=${encodeURIComponent(cursor)}` : '?limit=100';
        const page = await t.api('GET', `/v1/broadcasts/${bid}${q}`, t.tokenA);
        listed.push(...page.body.data.jobs);
        cursor = page.body.meta?.next_cursor ?? undefined;
        if (!cursor) break;
      }
      const shown = (id: string) => listed.find((j) => j.job_id === id)?.options;
      assert.equal(shown(ids[7])?.subject, 'Only for seven');
      assert.equal(shown(ids[8])?.recipient_name, 'Prescriber 8');
      assert.equal(shown(ids[8])?.sealed, undefined);

      // 200 terminal jobs, all delivered: waited for as long as deliveries go on (a busy machine
      // delivers them slowly; a stop fails after a minute without one).
      const done = await whileProgressing(async () => {
        const g = await t.api('GET', `/v1/broadcasts/${bid}`, t.tokenA);
        return {
          done: g.body.data?.counts?.delivered === 200 ? g : null,
          progress: JSON.stringify(g.body.data?.counts ?? null),
        };
      });
      assert.deepEqual(done.body.data.counts, { delivered: 200 });
      assert.equal(done.body.data.recipients, 200);

      // The document body was rendered once; the 199 others reused its pages. A preparation that
      // failed for a passing reason is run again and counted again: each extra one must be such a
      // logged retry, requeued (a render process that did not start in time on a busy machine) or run
      // again in place (no pooled database connection within its timeout: "dependency back;
      // handled" says how many runs it took).
      const after = await renders();
      assert.equal(after.rendered - before.rendered, 1);
      const retried = t.s.logs.lines.filter((l) => l.includes('"msg":"message handling failed; will retry"'));
      const inPlace = t.s.logs.lines.filter((l) => l.includes('"msg":"dependency back; handled"'));
      const extra =
        retried.length + inPlace.reduce((n, l) => n + (JSON.parse(l) as { runs: number }).runs - 1, 0);
      assert.ok(
        after.reused - before.reused >= 199 && after.reused - before.reused <= 199 + extra,
        `reused ${after.reused - before.reused} times, with ${extra} runs again: ${[...retried, ...inPlace].join(' | ')}`,
      );

      // Each fax is cover (its own recipient) + the 2 document pages.
      // (The cover's values are sealed in fax_renders: read as the service reads them.)
      const fax = await t.owner.query(
        `SELECT j.id, j.page_count, j.pages_sent
         FROM fax_jobs j JOIN fax_renders r ON r.job_id = j.id
        WHERE j.broadcast_id = $1 ORDER BY j.broadcast_position`,
        [bid],
      );
      for (const x of fax.rows) {
        const cover = (await getRender(t.owner, x.id))!.cover!;
        Object.assign(x, { to_name: cover.to_name, to_fax: cover.to_fax, total: cover.total_pages });
      }
      assert.equal(fax.rows.length, 200);
      assert.ok(fax.rows.every((x) => x.page_count === 3 && x.pages_sent === 3 && x.total === 3));
      assert.deepEqual(
        fax.rows.map((x) => x.to_fax),
        to,
      );
      assert.deepEqual(
        fax.rows.map((x) => x.to_name),
        to.map((_, i) => `Prescriber ${i}`),
      );
      // The shared render: one row, the 2 document pages.
      const shared = await t.owner.query(
        'SELECT job_id, document_pages FROM document_renders WHERE job_id = $1',
        [ids[0]],
      );
      assert.deepEqual(shared.rows, [{ job_id: ids[0], document_pages: 2 }]);

      // Deleting the documents (a deletion request) deletes the shared pages and every recipient's fax image.
      assert.equal(await new PgDocumentStore(t.owner).delete(ids[0], 'request'), 1);
      const left = await t.owner.query(
        `SELECT (SELECT count(*)::int FROM document_renders WHERE job_id = $1) AS shared,
              (SELECT count(*)::int FROM fax_renders r JOIN fax_jobs j ON j.id = r.job_id
                WHERE j.broadcast_id = $2) AS images`,
        [ids[0], bid],
      );
      assert.deepEqual(left.rows[0], { shared: 0, images: 0 });
    },
  );

  it('with a header line, renders each recipient its own pages (they carry its own values)', async () => {
    await t.owner.query(
      `UPDATE fax_defaults SET header_line = 'To {to_number}  page {page} of {pages}' WHERE account_id = $1`,
      [t.b.account_id],
    );
    const m = async () => {
      const e = parseExposition(await (await fetch(`${t.s.url}/metrics`)).text());
      return sumOf(e, 'faxline_broadcast_renders_total', { outcome: 'own_header' });
    };
    const before = await m();
    const r = await t.api('POST', '/v1/faxes/send', t.tokenB, {
      recipients: numbers(3, 5550260000).map((fax_number) => ({ fax_number })),
      fax_data: [{ file_name: 'a.pdf', file_data: pdf2 }],
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    await eventually(async () => {
      const g = await t.api('GET', `/v1/broadcasts/${r.body.data.broadcast_id}`, t.tokenB);
      return g.body.data?.counts?.delivered === 3;
    }, 60_000);
    assert.equal((await m()) - before, 3);
    const shared = await t.owner.query('SELECT 1 FROM document_renders WHERE job_id = $1', [
      r.body.data.job_ids[0],
    ]);
    assert.equal(shared.rowCount, 0, 'nothing shared');
    // Three different images: each page's header names its own recipient.
    const images = await t.owner.query(
      `SELECT count(DISTINCT md5(r.tiff))::int AS n FROM fax_renders r JOIN fax_jobs j ON j.id = r.job_id
        WHERE j.broadcast_id = $1`,
      [r.body.data.broadcast_id],
    );
    assert.equal(images.rows[0].n, 3);
  });

  it('fails every recipient of a refused document with its reason, the refusal stored once', async () => {
    const broken = Buffer.from('%PDF-1.7\nthis is not really a pdf').toString('base64');
    const r = await t.api('POST', '/v1/faxes/send', t.tokenA, {
      recipients: numbers(5, 5550250000).map((fax_number) => ({ fax_number })),
      fax_data: [{ file_name: 'broken.pdf', file_data: broken }],
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const bid = r.body.data.broadcast_id as string;
    const done = await eventually(async () => {
      const g = await t.api('GET', `/v1/broadcasts/${bid}`, t.tokenA);
      return g.body.data?.counts?.failed === 5 ? g.body.data : null;
    }, 30_000);
    const reasons = new Set(
      done.jobs.map((j: { failure: { code: string; reason: string } }) => j.failure.code),
    );
    assert.deepEqual([...reasons], ['pdf_broken']);
    assert.ok(done.jobs.every((j: { failure: { reason: string } }) => /broken\.pdf/.test(j.failure.reason)));
    // The refusal is stored once, with the documents' job: the others read it instead of checking.
    const stored = await t.owner.query('SELECT failure_code, pages FROM document_renders WHERE job_id = $1', [
      r.body.data.job_ids[0],
    ]);
    assert.deepEqual(stored.rows, [{ failure_code: 'pdf_broken', pages: null }]);
  });

  it('pages the jobs of a broadcast and hides it from another account', async () => {
    const r = await t.api('POST', '/v1/faxes/send', t.tokenA, {
      recipients: numbers(5, 5550210000).map((fax_number) => ({ fax_number })),
      fax_data: [{ file_name: 'a.pdf', file_data: pdf2 }],
      scheduled_date: new Date(Date.now() + 3_600_000).toISOString(),
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const bid = r.body.data.broadcast_id as string;
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 5; page++) {
      const g = await t.api(
        'GET',
        `/v1/broadcasts/${bid}?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
        t.tokenA,
      );
      assert.equal(g.http, 200, JSON.stringify(g.body));
      assert.equal(g.body.message, 'Broadcast found');
      assert.deepEqual(g.body.data.counts, { scheduled: 5 });
      seen.push(...g.body.data.jobs.map((j: { job_id: string }) => j.job_id));
      assert.ok(g.body.data.jobs.every((j: { broadcast_id: string }) => j.broadcast_id === bid));
      cursor = g.body.meta.next_cursor;
      if (!cursor) break;
    }
    assert.deepEqual([...seen].sort(), [...r.body.data.job_ids].sort());

    // Account B: the id behaves exactly as one that does not exist, for reading and cancelling.
    const missing = '00000000-0000-4000-8000-000000000000';
    for (const id of [bid, missing, 'not-an-id']) {
      const g = await t.api('GET', `/v1/broadcasts/${id}`, t.tokenB);
      assertRefused(g, 404, 'Broadcast not found');
      assert.deepEqual(g.body, { status: 0, message: 'Broadcast not found' });
      const c = await t.api('POST', '/v1/broadcasts/cancel', t.tokenB, { broadcast_id: id });
      assert.deepEqual([c.http, c.body], [404, { status: 0, message: 'Broadcast not found' }]);
    }
    // And B's list shows none of A's faxes.
    const list = await t.api('GET', '/v1/faxes?limit=1000', t.tokenB);
    assert.ok(!list.body.data.some((j: { broadcast_id: string }) => j.broadcast_id === bid));
    // Nothing of A's was cancelled by B.
    const still = await t.api('GET', `/v1/broadcasts/${bid}`, t.tokenA);
    assert.deepEqual(still.body.data.counts, { scheduled: 5 });
  });

  it('schedules a near broadcast in one go: every job gets its own due-time job, all sent when due', async () => {
    const due = Date.now() + 2_000; // inside the near window: straight into the due queue
    const r = await t.api('POST', '/v1/faxes/send', t.tokenA, {
      recipients: numbers(6, 5550215000).map((fax_number) => ({ fax_number })),
      fax_data: [{ file_name: 'a.pdf', file_data: pdf2 }],
      scheduled_date: new Date(due).toISOString(),
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const ids = r.body.data.job_ids as string[];
    const refs = await t.owner.query<{ id: string; schedule_ref: string | null }>(
      'SELECT id, schedule_ref FROM fax_jobs WHERE id = ANY($1::uuid[])',
      [ids],
    );
    assert.equal(refs.rows.length, 6);
    assert.ok(
      refs.rows.every((x) => x.schedule_ref !== null),
      JSON.stringify(refs.rows),
    );
    assert.equal(new Set(refs.rows.map((x) => x.schedule_ref)).size, 6, 'one due-time job per fax');
    const done = await eventually(async () => {
      const g = await t.api('GET', `/v1/broadcasts/${r.body.data.broadcast_id}`, t.tokenA);
      return g.body.data?.counts?.delivered === 6 ? g.body.data : null;
    }, 30_000);
    assert.deepEqual(done.counts, { delivered: 6 });
    const sent = await t.owner.query<{ at: Date }>(
      `SELECT min(at) AS at FROM fax_job_transitions WHERE job_id = ANY($1::uuid[]) AND to_state = 'accepted'`,
      [ids],
    );
    assert.ok(sent.rows[0]!.at.getTime() >= due - 1_000, 'none left before its time');
  });

  it('cancels a broadcast as a whole: every job not yet on the line; twice is refused', async () => {
    const r = await t.api('POST', '/v1/faxes/send', t.tokenA, {
      recipients: numbers(4, 5550220000).map((fax_number) => ({ fax_number })),
      fax_data: [{ file_name: 'a.pdf', file_data: pdf2 }],
      approval_required: true,
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const bid = r.body.data.broadcast_id as string;
    // One of them is approved and delivered first: it is not cancelled.
    const ok = await t.api('POST', '/v1/faxes/approve', t.tokenA, { job_id: r.body.data.job_ids[0] });
    assert.equal(ok.http, 200);
    await eventually(async () => {
      const j = await t.api('GET', `/v1/faxes/${r.body.data.job_ids[0]}`, t.tokenA);
      return j.body.data.state === 'delivered';
    }, 30_000);
    const c = await t.api('POST', '/v1/broadcasts/cancel', t.tokenA, { broadcast_id: bid });
    assert.equal(c.http, 200, JSON.stringify(c.body));
    assert.deepEqual(c.body, {
      status: 1,
      message: 'Broadcast cancelled',
      data: { broadcast_id: bid, cancelled: 3, not_cancelled: 1, counts: { cancelled: 3, delivered: 1 } },
    });
    const again = await t.api('POST', '/v1/broadcasts/cancel', t.tokenA, { broadcast_id: bid });
    assertRefused(again, 409, /none of its faxes is still waiting/);
    assert.deepEqual(again.body.data, { broadcast_id: bid, counts: { cancelled: 3, delivered: 1 } });
    const history = await t.owner.query(
      `SELECT detail FROM fax_job_transitions WHERE job_id = $1 AND to_state = 'cancelled'`,
      [r.body.data.job_ids[1]],
    );
    assert.deepEqual(history.rows[0].detail, { by: 'customer', broadcast_id: bid });
  });

  it('refuses fax_number with recipients, neither, too many recipients, and a bad recipient', async () => {
    const doc = [{ file_name: 'a.pdf', file_data: pdf2 }];
    const both = await t.api('POST', '/v1/faxes/send', t.tokenA, {
      fax_number: '+15551234567',
      recipients: [{ fax_number: '+15551234568' }],
      fax_data: doc,
    });
    assertRefused(both, 422, 'give either fax_number (one recipient) or recipients (a broadcast), not both');
    const neither = await t.api('POST', '/v1/faxes/send', t.tokenA, { fax_data: doc });
    assertRefused(neither, 422, 'fax_number: is required');
    const many = await t.api('POST', '/v1/faxes/send', t.tokenA, {
      recipients: numbers(251).map((fax_number) => ({ fax_number })),
      fax_data: doc,
    });
    assertRefused(
      many,
      422,
      'recipients: has 251 recipients; at most 250 per broadcast (send the rest in another broadcast)',
    );
    const bad = await t.api('POST', '/v1/faxes/send', t.tokenA, {
      recipients: [{ fax_number: '+15551234567' }, { fax_number: '555-1234', to_name: 5 }],
      fax_data: doc,
    });
    assertRefused(
      bad,
      422,
      /^recipients\[1\]\.fax_number: must be an E\.164 number.*recipients\[1\]\.to_name: must be a string$/,
    );
    const empty = await t.api('POST', '/v1/faxes/send', t.tokenA, { recipients: [], fax_data: doc });
    assertRefused(empty, 422, 'recipients: must have at least 1 recipient');
    const none = await t.owner.query('SELECT count(*)::int AS n FROM broadcasts WHERE account_id = $1', [
      t.a.account_id,
    ]);
    assert.equal(none.rows[0].n, 5, 'only the five broadcasts of the tests above exist');
  });

  it('replays a broadcast sent again with the same Idempotency-Key', async () => {
    const body = {
      recipients: numbers(3, 5550230000).map((fax_number) => ({ fax_number })),
      fax_data: [{ file_name: 'a.pdf', file_data: pdf2 }],
      scheduled_date: new Date(Date.now() + 3_600_000).toISOString(),
    };
    const { call } = await import('./support/client.ts');
    const send = () =>
      call(t.s.url, 'POST', '/v1/faxes/send', {
        token: t.tokenA,
        body,
        headers: { 'idempotency-key': 'broadcast-once' },
      });
    const one = await send();
    const two = await send();
    assert.equal(one.http, 200, JSON.stringify(one.body));
    assert.deepEqual(two.body, one.body);
    const n = await t.owner.query('SELECT count(*)::int AS n FROM fax_jobs WHERE broadcast_id = $1', [
      one.body.data.broadcast_id,
    ]);
    assert.equal(n.rows[0].n, 3);
  });

  it('accepts a broadcast over AMQP, once per command id', async () => {
    user = await createSenderUser(t.s.cfg.QUEUE_PREFIX, t.a.account_id);
    await registerSender(t.owner, user.user, t.a.account_id);
    sender = await new TestSender(t.s.cfg.QUEUE_PREFIX).connect(user.url);
    // The sender listens to its account's events: each carries the broadcast id and its reference.
    const evq = await sender.ch.assertQueue('', { exclusive: true });
    await sender.ch.bindQueue(evq.queue, `${t.s.cfg.QUEUE_PREFIX}.events`, `${t.a.account_id}.fax.delivered`);
    const delivered: FaxEvent[] = [];
    await sender.ch.consume(
      evq.queue,
      (m) => m && delivered.push(faxEvent.parse(JSON.parse(m.content.toString()))),
      { noAck: true },
    );
    const body = {
      recipients: numbers(3, 5550240000).map((fax_number, i) => ({
        fax_number,
        client_reference: `amqp-${i}`,
      })),
      fax_data: [{ file_name: 'a.pdf', file_data: pdf2 }],
    };
    const r = await sender.command('send', body, { userId: user.user, messageId: 'bcast-1' });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    assert.equal(r.body.data.command_id, 'bcast-1');
    assert.equal(r.body.data.job_ids.length, 3);
    const again = await sender.command('send', body, { userId: user.user, messageId: 'bcast-1' });
    assert.deepEqual(again.body, r.body, 'the same command id: the same broadcast, no second one');
    const jobs = await t.owner.query(
      'SELECT request_id, client_reference FROM fax_jobs WHERE broadcast_id = $1 ORDER BY broadcast_position',
      [r.body.data.broadcast_id],
    );
    assert.deepEqual(jobs.rows, [
      { request_id: 'amqp/bcast-1#0', client_reference: 'amqp-0' },
      { request_id: 'amqp/bcast-1#1', client_reference: 'amqp-1' },
      { request_id: 'amqp/bcast-1#2', client_reference: 'amqp-2' },
    ]);
    await eventually(async () => {
      const g = await t.api('GET', `/v1/broadcasts/${r.body.data.broadcast_id}`, t.tokenA);
      return g.body.data?.counts?.delivered === 3;
    }, 30_000);
    const mine = await eventually(async () => {
      const e = delivered.filter((x) => x.broadcast_id === r.body.data.broadcast_id);
      return e.length === 3 ? e : null;
    });
    assert.deepEqual(
      mine.map((e) => [e.job_id, e.client_reference]).sort(),
      r.body.data.job_ids.map((id: string, i: number) => [id, `amqp-${i}`]).sort(),
    );
  });
});
