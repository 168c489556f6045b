// Broadcast bursts (issue 27, finding 2) against the real PostgreSQL and RabbitMQ. The request rate
// limit counts requests, and a broadcast is one request for up to 1,000 jobs: ten at once from
// account B delayed account A's single sends by seconds. Shown here:
// - the attack at the size of the finding (10 concurrent 1000-recipient broadcasts from B) while A
//   sends single faxes one after the other: A's accept latency, and the time from accepted to
//   queued (fax_job_transitions), measured in the same run alone and during the burst;
// - the per-account recipient rate, shared through PostgreSQL: 429 with Retry-After in the envelope,
//   a refused broadcast writes no job and no broadcast, a replay (Idempotency-Key) is answered and
//   not charged, another account is not charged; the same over the AMQP intake;
// - the bound on an account's jobs that are not yet final: 429, and final jobs do not count.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { registerSender } from '../src/auth/senders.ts';
import { assertRefused, twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { call } from './support/client.ts';
import { createSenderUser, type BrokerUser } from './support/amqp-users.ts';
import { eventually } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';
import { TestSender } from './support/sender.ts';

const numbers = (n: number, base: number) => Array.from({ length: n }, (_, i) => `+1${base + i}`);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe('broadcast burst: what one account sends costs it, not another', () => {
  let t: TwoAccounts;
  let pdf: string;
  before(async () => {
    // The installation's defaults for the new bounds (nothing set here): the test shows them.
    t = await twoAccounts({ SIM_SPEEDUP: '1000', LINES: '32', LINE_POLL_MS: '50' });
    pdf = await makePdfBase64(1);
  });
  after(async () => {
    await t?.close();
  });

  /** A's single send: its job id and the time until the answer. */
  const sendA = async (i: number) => {
    const t0 = performance.now();
    const r = await t.api('POST', '/v1/faxes/send', t.tokenA, {
      fax_number: `+1555310${String(i).padStart(4, '0')}`,
      fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
    });
    assert.equal(r.http, 200, `A's send ${i}: ${JSON.stringify(r.body)}`);
    return { id: r.body.data.job_id as string, ms: performance.now() - t0 };
  };
  /** Milliseconds from each job's `accepted` to its `queued` transition, once all are queued. */
  const toQueued = (ids: string[], what: string) =>
    eventually(
      async () => {
        const r = await t.owner.query<{ ms: number | null }>(
          `SELECT (extract(epoch FROM (SELECT min(at) FROM fax_job_transitions x WHERE x.job_id = j.id AND x.to_state = 'queued'))
                 - extract(epoch FROM (SELECT min(at) FROM fax_job_transitions x WHERE x.job_id = j.id AND x.to_state = 'accepted'))) * 1000 AS ms
             FROM fax_jobs j WHERE j.id = ANY($1::uuid[])`,
          [ids],
        );
        return r.rows.length === ids.length && r.rows.every((x) => x.ms !== null)
          ? r.rows.map((x) => Number(x.ms))
          : null;
      },
      180_000,
      250,
    ).catch((err: unknown) => {
      throw new Error(
        `waiting for every one of A's ${ids.length} faxes sent ${what} to reach queued: ${String(err)}`,
      );
    });

  it("10 concurrent 1000-recipient broadcasts from B do not delay A's single sends", async () => {
    // Warm-up: the send worker's first preparation starts its render processes; not measured.
    const warm = await sendA(9999);
    await toQueued([warm.id], 'to warm the send worker up');
    // A alone: sequential sends, then each one's time to queued.
    const alone: { id: string; ms: number }[] = [];
    for (let i = 0; i < 10; i++) {
      alone.push(await sendA(i));
    }
    const aloneQueued = await toQueued(
      alone.map((x) => x.id),
      'alone',
    );

    // The burst: B's ten broadcasts at once; A keeps sending one after the other until all ten are
    // answered, and at least ten times (B's commands are still ahead of A's then).
    let answered = false;
    const bStarted = performance.now();
    const bAnswerMs: number[] = [];
    const burst = Promise.all(
      Array.from({ length: 10 }, (_, k) =>
        t
          .api('POST', '/v1/faxes/send', t.tokenB, {
            recipients: numbers(1000, 5550000000 + k * 10_000).map((fax_number) => ({ fax_number })),
            fax_data: [{ file_name: 'b.pdf', file_data: pdf }],
          })
          .finally(() => bAnswerMs.push(performance.now() - bStarted)),
      ),
    ).finally(() => {
      answered = true;
    });
    const during: { id: string; ms: number }[] = [];
    for (let i = 100; (!answered || during.length < 10) && during.length < 300; i++) {
      during.push(await sendA(i));
    }
    const bAnswers = await burst;
    assert.ok(answered, 'the burst was answered while A was sending (300 sends at most)');
    const duringQueued = await toQueued(
      during.map((x) => x.id),
      'during the burst',
    );
    // How many of B's faxes reached queued before the last of A's did: a count, not a time, so it
    // does not depend on how busy the machine is (both accounts' work slows alike).
    const bQueuedFirst = await t.owner.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM fax_job_transitions x JOIN fax_jobs j ON j.id = x.job_id
        WHERE j.account_id = $1 AND x.to_state = 'queued'
          AND x.at < (SELECT max(at) FROM fax_job_transitions WHERE job_id = ANY($2::uuid[]) AND to_state = 'queued')`,
      [t.b.account_id, during.map((x) => x.id)],
    );

    const bAccepted = bAnswers.filter((r) => r.http === 200).length;
    const bRefused = bAnswers.filter((r) => r.http === 429);
    const report = {
      acceptAloneMs: alone.map((x) => Math.round(x.ms)),
      acceptDuringMs: during.map((x) => Math.round(x.ms)),
      queuedAloneMs: aloneQueued.map(Math.round),
      queuedDuringMs: duringQueued.map(Math.round),
      bAnswerMs: bAnswerMs.map(Math.round),
      bQueuedBeforeAsLast: bQueuedFirst.rows[0]!.n,
      bAccepted,
      bRefused: bRefused.length,
    };
    console.log(`broadcast burst: ${JSON.stringify(report)}`);

    // Every broadcast of B is answered: accepted or refused with 429 and Retry-After (no 5xx).
    assert.equal(
      bAccepted + bRefused.length,
      10,
      JSON.stringify(bAnswers.map((r) => [r.http, r.body.message])),
    );
    for (const r of bRefused) {
      assert.ok(Number(r.headers.get('retry-after')) >= 1, 'a refused broadcast carries Retry-After');
      assert.equal(r.body.data.retry_after, Number(r.headers.get('retry-after')));
    }

    // A's latency during B's burst. On the old code A's sends were answered only after B's commands
    // were confirmed (1.1-3.9 s on an idle machine, as long as B's own answer), and its faxes waited
    // 14-37 s for `queued` (0.4-2.7 s alone) behind B's preparations. Now an idle machine answers A
    // in under 0.2 s during the burst and queues its faxes within a second, B's 1,000 commands
    // passed over. On a busy machine (CI: a load of 8-12 on 2 cores) every step of this process
    // slows alike, B's work included: A's slowest send took 2.4 s there, its faxes 8-10 s to queued.
    // So the bounds follow this run's own pace. A's sends: the typical one (the median) against A's
    // sends alone; the slowest (the one sent as B's ten bodies arrived, parsed by the same process:
    // 3.4 s under CI_LOAD=2 while B's answers took 1.4-4.1 s) no longer than B's slowest answer, or
    // 1.5 s. A's faxes: by how many of B's faxes went first (fair turns: B's backlog in the worker
    // and what its places prepared meanwhile, 17-20; first come first served: 759 of B's 1,000),
    // and by time only with a wide margin.
    const medianBound = Math.max(1500, 4 * median(report.acceptAloneMs));
    assert.ok(
      median(report.acceptDuringMs) <= medianBound,
      `A's sends during the burst took ${median(report.acceptDuringMs)} ms at the median; bound ${medianBound} ms (alone: ${report.acceptAloneMs.join(', ')})`,
    );
    const acceptBound = Math.max(
      1500,
      4 * median(report.acceptAloneMs),
      2.5 * Math.max(...report.acceptAloneMs),
      Math.max(...report.bAnswerMs),
    );
    const slowest = Math.max(...report.acceptDuringMs);
    assert.ok(
      slowest <= acceptBound,
      `A's slowest send during the burst took ${slowest} ms; bound ${acceptBound} ms (alone: ${report.acceptAloneMs.join(', ')}; B's answers: ${report.bAnswerMs.join(', ')})`,
    );
    assert.ok(
      report.bQueuedBeforeAsLast <= 250,
      `${report.bQueuedBeforeAsLast} of B's faxes reached queued before the last of A's ${during.length} sent during the burst; at most 250 (B's backlog of 64 in the worker and what its places prepared meanwhile)`,
    );
    // A's time to queued against this run's pace: B's own answers say how long the machine took to
    // take the burst in, and A's faxes, queued while B's 1,000 jobs are written, published and
    // parked, may take a few times that (CI under CI_LOAD=2 on a slower machine, 2026-12-07: 21-33 s
    // for all ten, B's answers 3.7-10.6 s, yet only 11 of B's faxes queued first). A time bound is
    // the coarse check; the count above is what tells fair turns from first come, first served.
    const queuedBound = Math.max(
      30_000,
      4 * median(report.queuedAloneMs),
      8 * Math.max(...report.queuedAloneMs),
      4 * Math.max(...report.bAnswerMs),
    );
    const slowestQueued = Math.max(...report.queuedDuringMs);
    assert.ok(
      slowestQueued <= queuedBound,
      `A's slowest fax sent during the burst took ${slowestQueued} ms from accepted to queued; bound ${queuedBound} ms ` +
        `(alone: median ${median(report.queuedAloneMs)}, max ${Math.max(...report.queuedAloneMs)}; B's slowest answer ${Math.max(...report.bAnswerMs)})`,
    );
  });
});

describe('broadcast recipient rate and open-job bound', () => {
  let t: TwoAccounts;
  let pdf: string;
  let user: BrokerUser | undefined;
  let sender: TestSender | undefined;
  before(async () => {
    t = await twoAccounts({
      SIM_SPEEDUP: '1000',
      BROADCAST_MAX_RECIPIENTS: '300',
      // 300 at once, then 2 per second: a second broadcast of 200 right after the first is refused.
      BROADCAST_RECIPIENTS_PER_SECOND: '2',
      BROADCAST_RECIPIENTS_BURST: '300',
      ACCOUNT_MAX_OPEN_JOBS: '250',
    });
    pdf = await makePdfBase64(1);
  });
  after(async () => {
    await sender?.close();
    await user?.remove();
    await t?.close();
  });

  const jobsOf = async (accountId: string) =>
    (
      await t.owner.query<{ jobs: number; broadcasts: number }>(
        `SELECT (SELECT count(*)::int FROM fax_jobs WHERE account_id = $1) AS jobs,
                (SELECT count(*)::int FROM broadcasts WHERE account_id = $1) AS broadcasts`,
        [accountId],
      )
    ).rows[0]!;
  const later = () => new Date(Date.now() + 3_600_000).toISOString();
  const broadcast = (token: string, n: number, base: number, extra: Record<string, unknown> = {}) =>
    t.api('POST', '/v1/faxes/send', token, {
      recipients: numbers(n, base).map((fax_number) => ({ fax_number })),
      fax_data: [{ file_name: 'b.pdf', file_data: pdf }],
      ...extra,
    });

  it('refuses recipients over the rate with 429 and Retry-After; writes nothing; charges only that account', async () => {
    // Scheduled an hour ahead: the jobs stay open, which the next test counts on.
    const firstBody = {
      recipients: numbers(200, 5551000000).map((fax_number) => ({ fax_number })),
      fax_data: [{ file_name: 'b.pdf', file_data: pdf }],
      scheduled_date: later(),
    };
    const sendFirst = () =>
      call(t.s.url, 'POST', '/v1/faxes/send', {
        token: t.tokenB,
        body: firstBody,
        headers: { 'idempotency-key': 'burst-first' },
      });
    const first = await sendFirst();
    assert.equal(first.http, 200, JSON.stringify(first.body));
    const before = await jobsOf(t.b.account_id);

    const second = await broadcast(t.tokenB, 200, 5551100000, { scheduled_date: later() });
    assertRefused(
      second,
      429,
      /^Too many broadcast recipients: this account may send to 2 recipients per second \(300 at once\); 200 asked, 10\d available; retry after \d+ s$/,
    );
    const retryAfter = Number(second.headers.get('retry-after'));
    assert.ok(retryAfter >= 40 && retryAfter <= 50, `Retry-After ${retryAfter}: (200 - ~100) / 2 per second`);
    assert.equal(second.body.data.retry_after, retryAfter);
    assert.deepEqual(
      await jobsOf(t.b.account_id),
      before,
      'the refused broadcast wrote no job and no broadcast',
    );

    // The first one again, with its Idempotency-Key: a replay, answered though the bucket is empty.
    const replay = await sendFirst();
    assert.equal(replay.http, 200, JSON.stringify(replay.body));
    assert.equal(replay.body.data.broadcast_id, first.body.data.broadcast_id);

    // A's bucket is its own: the same broadcast from A is accepted.
    const a = await broadcast(t.tokenA, 200, 5551200000, { scheduled_date: later() });
    assert.equal(a.http, 200, JSON.stringify(a.body));

    // What the bucket holds is shared by every process: it is in PostgreSQL, not in this one.
    const bucket = await t.owner.query<{ tokens: number }>(
      'SELECT tokens FROM recipient_buckets WHERE account_id = $1',
      [t.b.account_id],
    );
    assert.ok(
      bucket.rows[0]!.tokens < 110,
      `B's bucket in PostgreSQL holds ${bucket.rows[0]?.tokens} after 200 of 300`,
    );

    // Refilled by hand, so that the next test meets the open-job bound and not the rate.
    await t.owner.query(`UPDATE recipient_buckets SET tokens = 300 WHERE account_id = $1`, [t.b.account_id]);
  });

  it('refuses a broadcast that would take the account past ACCOUNT_MAX_OPEN_JOBS; final jobs do not count', async () => {
    // B has 200 scheduled jobs (open); its bucket was refilled by the test above.
    const before = await jobsOf(t.b.account_id);
    const over = await broadcast(t.tokenB, 100, 5551300000);
    assertRefused(
      over,
      429,
      'Too many faxes in progress: this account has 200 faxes not yet delivered, failed or cancelled, and may have at most 250; this broadcast adds 100; retry when some have finished (after 60 s, for example)',
    );
    assert.equal(over.headers.get('retry-after'), '60');
    assert.deepEqual(await jobsOf(t.b.account_id), before, 'nothing written');
    const bucket = await t.owner.query<{ tokens: number }>(
      'SELECT tokens FROM recipient_buckets WHERE account_id = $1',
      [t.b.account_id],
    );
    assert.ok(
      bucket.rows[0]!.tokens >= 299,
      `the refused broadcast's recipients were given back (${bucket.rows[0]?.tokens})`,
    );

    // Cancelled, B's 200 jobs are final: kept as history, no longer counted.
    const bid = (
      await t.owner.query<{ id: string }>('SELECT id FROM broadcasts WHERE account_id = $1', [t.b.account_id])
    ).rows[0]!.id;
    const c = await t.api('POST', '/v1/broadcasts/cancel', t.tokenB, { broadcast_id: bid });
    assert.equal(c.http, 200, JSON.stringify(c.body));
    const now = await broadcast(t.tokenB, 100, 5551300000);
    assert.equal(now.http, 200, JSON.stringify(now.body));
    assert.equal((await jobsOf(t.b.account_id)).jobs, before.jobs + 100, 'the cancelled history is kept');
  });

  it('applies the same rate to broadcasts over the AMQP intake', async () => {
    user = await createSenderUser(t.s.cfg.QUEUE_PREFIX, t.a.account_id);
    await registerSender(t.owner, user.user, t.a.account_id);
    sender = await new TestSender(t.s.cfg.QUEUE_PREFIX).connect(user.url);
    // A took 200 of its 300 over HTTP in the first test; 200 more are refused, whichever way in.
    const before = await jobsOf(t.a.account_id);
    const r = await sender.command(
      'send',
      {
        recipients: numbers(200, 5551400000).map((fax_number) => ({ fax_number })),
        fax_data: [{ file_name: 'b.pdf', file_data: pdf }],
        scheduled_date: later(),
      },
      { userId: user.user, messageId: 'burst-1', timeoutMs: 30_000 },
    );
    assert.equal(r.http, 429, JSON.stringify(r.body));
    assert.match(
      r.body.message,
      /^Too many broadcast recipients: this account may send to 2 recipients per second/,
    );
    assert.ok(r.body.data.retry_after >= 1, JSON.stringify(r.body));
    assert.deepEqual(await jobsOf(t.a.account_id), before, 'the refused command wrote no job');
  });
});
