// The AMQP intake against the real RabbitMQ and PostgreSQL: senders publish as their own broker
// users; the account comes from the broker-validated user_id; answers and dead letters carry the
// HTTP API's messages; a republished command makes one fax; the sender receives its events. Hostile
// senders: answers reach only reply queues of the sender's own, routing keys outside the contract
// and oversized messages are dead-lettered (bounded), and a dead letter names the real sender.
import amqp from 'amqplib';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { Broker } from '../src/amqp/broker.ts';
import { JobBatcher } from '../src/amqp-intake/batch.ts';
import { registerSender } from '../src/auth/senders.ts';
import { ApiError } from '../src/domain/envelope.ts';
import { newId } from '../src/domain/ids.ts';
import type { Scheduler } from '../src/scheduler/scheduler.ts';
import { CommandPublisher } from '../src/jobs/command-publisher.ts';
import { createLogger } from '../src/log.ts';
import type { DemoSeed } from '../src/admin/seed.ts';
import { faxEvent, type FaxEvent } from '../src/events/schema.ts';
import { parseExposition, sumOf } from '../src/metrics/exposition.ts';
import { createSenderUser, type BrokerUser } from './support/amqp-users.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { AMQP_URL, deleteTopology, eventually, queuePrefix, startService } from './support/harness.ts';
import { jobFixture, seededDatabase, type SeededDatabase } from './support/jobs.ts';
import { makeTiff, tiffcp } from './support/images.ts';
import { makePdfBase64 } from './support/pdf.ts';
import { TestSender } from './support/sender.ts';

describe('AMQP intake', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let db: pg.Client;
  let prefix: string;
  let accA: string, accB: string, tokenA: string;
  let userA: BrokerUser, userB: BrokerUser;
  let a: TestSender;
  let pdf: string;
  const closers: (() => Promise<void>)[] = [];

  before(async () => {
    s = await startService();
    prefix = s.cfg.QUEUE_PREFIX;
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    const seedA = await seedAccount(s);
    const seedB = await seedAccount(s);
    accA = seedA.account_id;
    accB = seedB.account_id;
    tokenA = await tokenFor(s.url, seedA.api_key);
    [userA, userB] = await Promise.all([createSenderUser(prefix, accA), createSenderUser(prefix, accB)]);
    await registerSender(db, userA.user, accA);
    // The operator's way: the admin CLI.
    const cli = await promisify(execFile)(
      process.execPath,
      ['src/admin/cli.ts', 'register-sender', '--user', userB.user, '--account', accB],
      { env: { ...process.env, DATABASE_URL: s.cfg.DATABASE_URL } },
    );
    assert.deepEqual(JSON.parse(cli.stdout), { broker_user: userB.user, account_id: accB });
    a = await new TestSender(prefix).connect(userA.url);
    pdf = await makePdfBase64(1);
  });
  after(async () => {
    await a?.close();
    // Last in, first out: the probe queue is deleted on its channel before its connection closes
    // (in order, the deletion ran on a closed channel and the queue stayed on the broker).
    for (const c of closers.reverse()) await c();
    await Promise.all([userA?.remove(), userB?.remove()]);
    await db?.end();
    await s?.dropAll();
  });

  const sendBody = () => ({ fax_number: '+15551234567', fax_data: [{ file_name: 'a.pdf', file_data: pdf }] });

  async function deadLetters(): Promise<amqp.GetMessage[]> {
    const conn = await amqp.connect(AMQP_URL);
    try {
      const ch = await conn.createChannel();
      const out: amqp.GetMessage[] = [];
      for (;;) {
        const m = await ch.get(`${prefix}.intake.dead`, { noAck: true });
        if (!m) break;
        out.push(m);
      }
      return out;
    } finally {
      await conn.close();
    }
  }

  it('sends a fax for the publishing user’s account and delivers its events to that sender', async () => {
    // The sender listens to its own account's events on a queue of its own.
    const evq = await a.ch.assertQueue('', { exclusive: true });
    await a.ch.bindQueue(evq.queue, `${prefix}.events`, `${accA}.#`);
    const events: FaxEvent[] = [];
    await a.ch.consume(evq.queue, (m) => m && events.push(faxEvent.parse(JSON.parse(m.content.toString()))), {
      noAck: true,
    });

    const r = await a.command('send', sendBody(), { userId: userA.user, messageId: 'cmd-send-1' });
    assert.equal(r.http, 200);
    assert.equal(r.body.status, 1);
    assert.equal(r.body.message, 'Fax processed for sending');
    assert.equal(r.body.data.command_id, 'cmd-send-1');
    const jobId = r.body.data.job_id as string;
    const job = await db.query('SELECT account_id, request_id FROM fax_jobs WHERE id = $1', [jobId]);
    assert.equal(job.rows[0].account_id, accA, 'the account is the one registered for the broker user');
    assert.equal(job.rows[0].request_id, 'amqp/cmd-send-1');

    await eventually(async () => events.some((e) => e.job_id === jobId && e.type === 'fax.delivered'));
    const mine = events.filter((e) => e.job_id === jobId);
    assert.deepEqual(
      mine.map((e) => e.type),
      [
        'fax.accepted',
        'fax.preparing',
        'fax.queued',
        'fax.dialling',
        'fax.sending',
        'fax.page_sent',
        'fax.delivered',
      ],
    );
    assert.ok(mine.every((e) => e.account_id === accA));
    assert.deepEqual(mine[5]!.details, { page: 1, of: 1 });
    assert.equal(mine[6]!.details.pages_sent, 1);
    const seqs = mine.map((e) => e.sequence);
    assert.deepEqual(
      seqs,
      [...seqs].sort((x, y) => x - y),
    );
    assert.equal(new Set(mine.map((e) => e.id)).size, mine.length);

    // The same fax over HTTP is readable by the account's API user.
    const viaHttp = await call(s.url, 'GET', `/v1/faxes/${jobId}`, { token: tokenA });
    assert.equal(viaHttp.body.data.state, 'delivered');
  });

  it('sends a scanned TIFF by command as it sends a PDF', async () => {
    const tiff = tiffcp(
      makeTiff([
        { w: 1728, h: 1078, bits: 1, xDpi: 204, yDpi: 98 },
        { w: 1728, h: 2156, bits: 1, xDpi: 204, yDpi: 196 },
      ]),
      'g4',
    );
    const body = {
      fax_number: '+15551234567',
      fax_data: [{ file_name: 'scan', file_data: tiff.toString('base64') }],
    };
    const r = await a.command('send', body, { userId: userA.user, messageId: 'cmd-send-tiff' });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const jobId = r.body.data.job_id as string;
    const job = await eventually(async () => {
      const j = await call(s.url, 'GET', `/v1/faxes/${jobId}`, { token: tokenA });
      return ['delivered', 'failed'].includes(j.body.data?.state) ? j.body.data : null;
    }, 60_000);
    assert.equal(job.state, 'delivered', JSON.stringify(job.failure));
    assert.equal(job.page_count, 2);
  });

  it('refuses to bind a sender to another account’s events', async () => {
    const conn = await amqp.connect(userA.url);
    closers.push(() => conn.close().catch(() => undefined));
    const ch = await conn.createChannel();
    ch.on('error', () => undefined);
    const q = await ch.assertQueue('', { exclusive: true });
    await assert.rejects(ch.bindQueue(q.queue, `${prefix}.events`, `${accB}.#`), /ACCESS_REFUSED/);
  });

  it('makes one fax when a command is published twice', async () => {
    const first = await a.command('send', sendBody(), { userId: userA.user, messageId: 'cmd-dup-1' });
    const again = await a.command('send', sendBody(), { userId: userA.user, messageId: 'cmd-dup-1' });
    assert.equal(first.body.status, 1);
    assert.equal(again.body.status, 1);
    assert.equal(again.body.data.job_id, first.body.data.job_id);
    // Both at once as well.
    const both = await Promise.all([
      a.command('send', sendBody(), { userId: userA.user, messageId: 'cmd-dup-2' }),
      a.command('send', sendBody(), { userId: userA.user, messageId: 'cmd-dup-2' }),
    ]);
    assert.equal(both[0].body.data.job_id, both[1].body.data.job_id);
    const n = await db.query(
      `SELECT request_id, count(*)::int AS n FROM fax_jobs WHERE request_id IN ('amqp/cmd-dup-1', 'amqp/cmd-dup-2')
        GROUP BY request_id ORDER BY request_id`,
    );
    assert.deepEqual(n.rows, [
      { request_id: 'amqp/cmd-dup-1', n: 1 },
      { request_id: 'amqp/cmd-dup-2', n: 1 },
    ]);
    // The same command id from another sender is another command.
    const b = await new TestSender(prefix).connect(userB.url);
    closers.push(() => b.close());
    const other = await b.command('send', sendBody(), { userId: userB.user, messageId: 'cmd-dup-1' });
    assert.equal(other.body.status, 1);
    assert.notEqual(other.body.data.job_id, first.body.data.job_id);
  });

  it('rejects forged messages: no user_id, an unregistered user, or another user’s id', async () => {
    await deadLetters(); // start from an empty dead-letter queue
    const before = (await db.query('SELECT count(*)::int AS n FROM fax_jobs')).rows[0].n as number;
    // The service's own user (guest) is not a sender: with no user_id, and with its own user_id.
    const guest = await new TestSender(prefix).connect(AMQP_URL);
    closers.push(() => guest.close());
    const noUser = await guest.command('send', sendBody(), { messageId: 'forged-1', userId: null });
    assert.equal(noUser.body.status, 0);
    assert.match(noUser.body.message, /no user_id property/);
    const unknown = await guest.command('send', sendBody(), { messageId: 'forged-2', userId: 'guest' });
    assert.equal(unknown.body.status, 0);
    assert.equal(
      unknown.body.message,
      'Message rejected: RabbitMQ user "guest" is not registered as a sender.',
    );

    // Sender A claiming to be sender B: the broker itself refuses the publish.
    const forger = await new TestSender(prefix).connect(userA.url);
    closers.push(() => forger.close());
    await assert.rejects(forger.publish('send', sendBody(), { userId: userB.user, messageId: 'forged-3' }));
    assert.match(String(forger.channelError?.message), /PRECONDITION_FAILED.*user_id property set to/);

    const dead = await eventually(async () => {
      const d = await deadLetters();
      return d.length >= 2 ? d : null;
    });
    const reasons = dead.map((m) => String(m.properties.headers?.['x-faxline-reason']));
    assert.ok(reasons.some((r) => /no user_id property/.test(r)));
    assert.ok(reasons.some((r) => /"guest" is not registered/.test(r)));
    const afterN = (await db.query('SELECT count(*)::int AS n FROM fax_jobs')).rows[0].n as number;
    assert.equal(afterN, before, 'no job was made');
  });

  it('answers invalid commands with the HTTP API’s messages and dead-letters them with the reason', async () => {
    await deadLetters();
    const bad = {
      fax_number: '555-1234',
      fax_data: [{ file_name: 'a.pdf', file_data: pdf, file_url: 'https://x/a.pdf' }],
    };
    const http = await call(s.url, 'POST', '/v1/faxes/send', { token: tokenA, body: bad });
    const viaAmqp = await a.command('send', bad, { userId: userA.user, messageId: 'bad-1' });
    assert.equal(viaAmqp.http, http.http);
    assert.deepEqual(viaAmqp.body, http.body);
    assert.match(viaAmqp.body.message, /fax_number: must be an E\.164 number/);

    const fwdHttp = await call(s.url, 'POST', '/v1/faxes/forward', {
      token: tokenA,
      body: { job_id: '00000000-0000-4000-8000-000000000000', fax_number: '+15551234567' },
    });
    const fwd = await a.command(
      'forward',
      { job_id: '00000000-0000-4000-8000-000000000000', fax_number: '+15551234567' },
      { userId: userA.user, messageId: 'bad-2' },
    );
    assert.deepEqual(fwd.body, fwdHttp.body);
    assert.deepEqual(fwd.body, { status: 0, message: 'Fax Not Found' });

    const cancel = await a.command('cancel', {}, { userId: userA.user, messageId: 'bad-3' });
    assert.deepEqual(cancel.body, { status: 0, message: 'job_id: is required' });

    const noId = await a.command('send', sendBody(), { userId: userA.user, messageId: ' ' });
    assert.match(noId.body.message, /message_id \(the command id\) is required/);

    // The caller id rule holds on both intakes: a number the account does not hold is refused alike.
    const foreignCaller = { ...sendBody(), caller_id: '+15557654321' };
    const callerHttp = await call(s.url, 'POST', '/v1/faxes/send', { token: tokenA, body: foreignCaller });
    const callerAmqp = await a.command('send', foreignCaller, { userId: userA.user, messageId: 'bad-4' });
    assert.equal(callerHttp.http, 422);
    assert.equal(callerAmqp.http, 422);
    assert.deepEqual(callerAmqp.body, callerHttp.body);
    assert.match(callerAmqp.body.message, /^caller_id: \+15557654321 is not one of your account's numbers/);

    const dead = await eventually(async () => {
      const d = await deadLetters();
      return d.length >= 5 ? d : null;
    });
    const byId = new Map(dead.map((m) => [m.properties.messageId as string, m]));
    assert.equal(byId.get('bad-1')?.properties.headers?.['x-faxline-reason'], http.body.message);
    assert.equal(byId.get('bad-1')?.properties.headers?.['x-faxline-user-id'], userA.user);
    assert.equal(byId.get('bad-2')?.properties.headers?.['x-faxline-reason'], 'Fax Not Found');
    assert.equal(byId.get('bad-3')?.properties.headers?.['x-faxline-routing-key'], 'cancel');
    // The dead letter keeps the command itself, for inspection or a corrected republish.
    assert.equal(JSON.parse(byId.get('bad-1')!.content.toString()).fax_number, '555-1234');
  });

  it('one sender’s command with text PostgreSQL cannot store fails only that command, not a batch-mate’s', async () => {
    // Issue 16, finding 2: B's subject "x\u0000y" failed the shared batch; A's valid send was retried
    // five times with B's error and dead-lettered, unanswered. Published together, pipelined, so the
    // intake checks them concurrently and commits A's in the batch B's would have joined.
    await deadLetters();
    const b = await new TestSender(prefix).connect(userB.url);
    closers.push(() => b.close());
    const goodIds = ['mix-a-1', 'mix-a-2', 'mix-a-3', 'mix-a-4'];
    const [nul, lone, ...good] = await Promise.all([
      b.command(
        'send',
        { ...sendBody(), subject: 'x\u0000y' },
        { userId: userB.user, messageId: 'mix-b-nul' },
      ),
      // The JSON text itself carries the lone surrogate escape, as a hostile sender writes it.
      b.command('send', null, {
        userId: userB.user,
        messageId: 'mix-b-lone',
        raw: Buffer.from(JSON.stringify(sendBody()).replace(/}$/, ',"sender_name":"\\ud800"}')),
      }),
      ...goodIds.map((id) => a.command('send', sendBody(), { userId: userA.user, messageId: id })),
    ]);
    for (const [n, r] of good.entries()) {
      assert.equal(r.http, 200, `${goodIds[n]!}: ${JSON.stringify(r.body)}`);
      const job = await db.query('SELECT account_id, request_id FROM fax_jobs WHERE id = $1', [
        r.body.data.job_id,
      ]);
      assert.deepEqual(job.rows[0], { account_id: accA, request_id: `amqp/${goodIds[n]!}` });
    }
    assert.equal(nul.http, 422);
    assert.deepEqual(nul.body, {
      status: 0,
      message: 'subject: contains the character U+0000 (NUL), which cannot be stored',
    });
    assert.equal(lone.http, 422);
    assert.match(lone.body.message, /^sender_name: contains an unpaired UTF-16 surrogate/);
    const dead = await eventually(async () => {
      const d = await deadLetters();
      return d.length >= 2 ? d : null;
    });
    const byId = new Map(dead.map((m) => [m.properties.messageId as string, m]));
    assert.equal(byId.get('mix-b-nul')?.properties.headers?.['x-faxline-reason'], nul.body.message);
    assert.equal(byId.get('mix-b-lone')?.properties.headers?.['x-faxline-reason'], lone.body.message);
    assert.equal(dead.length, 2, 'only B’s commands are dead-lettered');
    const bJobs = await db.query(
      `SELECT count(*)::int AS n FROM fax_jobs WHERE request_id LIKE 'amqp/mix-b-%'`,
    );
    assert.equal(bJobs.rows[0].n, 0);
  });

  it('cancels a scheduled fax by command', async () => {
    const at = new Date(Date.now() + 3_600_000).toISOString();
    const sent = await a.command(
      'send',
      { ...sendBody(), scheduled_date: at },
      { userId: userA.user, messageId: 'sch-1' },
    );
    assert.equal(sent.body.status, 1);
    const jobId = sent.body.data.job_id as string;
    const c = await a.command('cancel', { job_id: jobId }, { userId: userA.user, messageId: 'cancel-1' });
    assert.equal(c.body.status, 1);
    assert.equal(c.body.message, 'Scheduled fax cancelled successfully');
    const st = await db.query('SELECT state FROM fax_jobs WHERE id = $1', [jobId]);
    assert.equal(st.rows[0].state, 'cancelled');
    // Another sender cannot cancel A's fax: for B it does not exist.
    const b = await new TestSender(prefix).connect(userB.url);
    closers.push(() => b.close());
    const sent2 = await a.command(
      'send',
      { ...sendBody(), scheduled_date: at },
      { userId: userA.user, messageId: 'sch-2' },
    );
    const foreign = await b.command(
      'cancel',
      { job_id: sent2.body.data.job_id },
      { userId: userB.user, messageId: 'x-1' },
    );
    assert.deepEqual(foreign.body, { status: 0, message: 'Fax not found' });
  });

  it('accepts a burst: every command answered once, its job committed and dispatched, every delivery acked', async () => {
    const n = 150;
    const ids = Array.from({ length: n }, (_, i) => `burst-${i}`);
    // Pipelined like a high-volume sender: the intake batches these into shared transactions,
    // publishes their commands together and acknowledges the deliveries with multiple-acks.
    const replies = await Promise.all(
      ids.map((id) => a.command('send', sendBody(), { userId: userA.user, messageId: id })),
    );
    assert.ok(replies.every((r) => r.body.status === 1 && r.http === 200));
    assert.deepEqual(
      replies.map((r) => r.body.data.command_id),
      ids,
    );
    const jobIds = replies.map((r) => r.body.data.job_id as string);
    assert.equal(new Set(jobIds).size, n);
    // Every answer was given after the job's command was confirmed; the confirmation is recorded.
    await eventually(async () => {
      const r = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM fax_jobs WHERE id = ANY($1::uuid[]) AND dispatched_at IS NOT NULL
           AND account_id = $2 AND request_id LIKE 'amqp/burst-%'`,
        [jobIds, accA],
      );
      return r.rows[0]!.n === n;
    });
    // No delivery is left unacknowledged (nor ready) on the intake queue.
    await eventually(
      async () => {
        const out = await promisify(execFile)(
          'rabbitmqctl',
          ['-q', 'list_queues', 'name', 'messages_ready', 'messages_unacknowledged'],
          { timeout: 30_000 },
        );
        const line = out.stdout.split('\n').find((l) => l.split(/\s+/)[0] === `${prefix}.intake`);
        return line !== undefined && line.split(/\s+/).slice(1, 3).join(' ') === '0 0';
      },
      20_000,
      500,
    );
  });
  /** The service's counter of answers by outcome, read from /metrics (0 before the first one). */
  async function replyCount(outcome: string): Promise<number> {
    const text = await (await fetch(`${s.url}/metrics`)).text();
    return sumOf(parseExposition(text), 'faxline_amqp_replies_total', { outcome });
  }

  it('never answers into the service’s own queues or a named queue; each refusal is counted and logged', async () => {
    const probe = `${prefix}.probe`; // a named queue of the service's user, as an internal queue is
    const admin = await amqp.connect(AMQP_URL);
    closers.push(() => admin.close().catch(() => undefined));
    const ach = await admin.createChannel();
    await ach.assertQueue(probe, { durable: true });
    closers.push(async () => void (await ach.deleteQueue(probe).catch(() => undefined)));
    const refused0 = await replyCount('refused');

    const targets = [`${prefix}.cmd.send`, probe, `${prefix}.intake`, `${prefix}.intake.dead`];
    for (const [i, replyTo] of targets.entries()) {
      await a.publish('send', sendBody(), { userId: userA.user, messageId: `inject-${i}`, replyTo });
    }
    // A later answer reached the sender's own reply queue; nothing reached the named queue.
    const later = await a.command('send', sendBody(), { userId: userA.user, messageId: 'inject-later' });
    assert.equal(later.body.status, 1);
    assert.equal((await ach.checkQueue(probe)).messageCount, 0, 'messages in the named queue');
    await eventually(async () => (await replyCount('refused')) >= refused0 + targets.length);
    // The commands themselves were accepted: only their answers were refused.
    const jobs = await db.query(
      `SELECT count(*)::int AS n FROM fax_jobs WHERE request_id LIKE 'amqp/inject-%'`,
    );
    assert.equal(jobs.rows[0].n, targets.length + 1);
    const logged = s.logs.lines.filter((l) => l.includes('answer refused'));
    assert.ok(logged.length >= targets.length);
    assert.ok(
      logged.every((l) => !l.includes('job_id') && !l.includes('Fax processed')),
      'no payload in the log',
    );
  });

  it('answers a sender’s own reply queues, never a server-named queue of another connection', async () => {
    const b = await new TestSender(prefix).connect(userB.url);
    closers.push(() => b.close());
    // A server-named queue of another connection (B's), not bound to the replies exchange.
    const loose = (await b.ch.assertQueue('', { exclusive: true })).queue;
    let looseGot = 0;
    await b.ch.consume(loose, () => void looseGot++, { noAck: true });
    const unroutable0 = await replyCount('unroutable');
    await a.publish('send', sendBody(), { userId: userA.user, messageId: 'steal-0', replyTo: loose });
    // B's own answer comes after that one: the forged answer would have been delivered by now.
    const first = await b.command('send', sendBody(), { userId: userB.user, messageId: 'steal-own-0' });
    assert.equal(first.body.status, 1);
    assert.equal(looseGot, 0, 'answers in another connection’s server-named queue');

    // B's queue bound for B's account: A's answers are not routed there either.
    const bound = await new TestSender(prefix).connect(userB.url, { replyAccount: accB });
    closers.push(() => bound.close());
    await a.publish('send', sendBody(), {
      userId: userA.user,
      messageId: 'steal-1',
      correlationId: 'steal-1',
      replyTo: bound.replyQueue,
    });
    const second = await bound.command('send', sendBody(), { userId: userB.user, messageId: 'steal-own-1' });
    assert.equal(second.body.status, 1);
    assert.deepEqual(
      bound.replies.map((r) => r.correlationId).filter((c) => c === 'steal-1'),
      [],
    );
    await eventually(async () => (await replyCount('unroutable')) >= unroutable0 + 2);
    assert.equal(looseGot, 0);

    // The sender's own: direct reply-to (a) and a server-named queue bound for its account (a2).
    const sent0 = await replyCount('sent');
    const viaDirect = await a.command('send', sendBody(), { userId: userA.user, messageId: 'own-direct' });
    assert.equal(viaDirect.body.status, 1);
    const a2 = await new TestSender(prefix).connect(userA.url, { replyAccount: accA });
    closers.push(() => a2.close());
    assert.match(a2.replyQueue, /^amq\.gen-/);
    const viaQueue = await a2.command('send', sendBody(), { userId: userA.user, messageId: 'own-queue' });
    assert.equal(viaQueue.body.status, 1);
    await eventually(async () => (await replyCount('sent')) >= sent0 + 2);
  });

  it('dead-letters and answers a routing key outside the contract, with or without mandatory', async () => {
    await deadLetters();
    const r = await a.command('bogus', sendBody(), { userId: userA.user, messageId: 'rk-1' });
    assert.equal(r.http, 400);
    assert.equal(
      r.body.message,
      'Message rejected: unknown command "bogus"; use routing key send, forward or cancel.',
    );
    await new Promise<void>((resolve, reject) =>
      a.ch.publish(
        `${prefix}.intake`,
        'send.now',
        Buffer.from(JSON.stringify(sendBody())),
        { mandatory: false, messageId: 'rk-2', userId: userA.user, contentType: 'application/json' },
        (err: unknown) => (err ? reject(err as Error) : resolve()),
      ),
    );
    const dead = await eventually(async () => {
      const d = (await deadLetters()).filter((m) => /^rk-/.test(String(m.properties.messageId)));
      return d.length >= 2 ? d : null;
    });
    const keys = dead.map((m) => m.properties.headers?.['x-faxline-routing-key']).sort();
    assert.deepEqual(keys, ['bogus', 'send.now']);
    assert.ok(dead.every((m) => m.properties.headers?.['x-faxline-user-id'] === userA.user));
    assert.ok(dead.every((m) => /unknown command/.test(String(m.properties.headers?.['x-faxline-reason']))));
  });

  const bigSend = (size: number) => {
    const head = Buffer.from('{"fax_number":"+15551234567","fax_data":[{"file_name":"a.pdf","file_data":"');
    const tail = Buffer.from('"}]}');
    return Buffer.concat([head, Buffer.alloc(size - head.length - tail.length, 'A'), tail]);
  };

  /** Waits for the dead letter of `id` and checks it is a bounded copy of a `size`-byte message. */
  async function boundedDeadLetter(id: string, size: number): Promise<amqp.GetMessage> {
    const m = await eventually(
      async () => (await deadLetters()).find((d) => d.properties.messageId === id),
      60_000,
    );
    assert.ok(m.content.length <= 4096, `dead letter of ${m.content.length} bytes`);
    assert.equal(m.properties.headers?.['x-faxline-original-bytes'], size);
    assert.equal(m.properties.headers?.['x-faxline-truncated'], 4096);
    assert.ok(m.content.toString().startsWith('{"fax_number":"+15551234567"'));
    return m;
  }

  it('dead-letters only a bounded copy of a 50 MB message', async () => {
    await deadLetters();
    // Under the size limit: parsed and refused by the document checks.
    const under = await a.command('send', undefined, {
      userId: userA.user,
      messageId: 'big-under',
      raw: bigSend(50_000_000),
      timeoutMs: 60_000,
    });
    assert.equal(under.body.status, 0);
    await boundedDeadLetter('big-under', 50_000_000);
  });

  it('refuses a message over AMQP_INTAKE_MAX_BYTES unparsed, with a bounded dead letter', async () => {
    await deadLetters();
    const max = 50 * 1024 * 1024; // the default AMQP_INTAKE_MAX_BYTES
    const over = await a.command('send', undefined, {
      userId: userA.user,
      messageId: 'big-over',
      raw: bigSend(max + 1),
      timeoutMs: 60_000,
    });
    assert.equal(over.http, 413);
    assert.equal(over.body.message, `Message rejected: it is larger than ${max} bytes.`);
    const m = await boundedDeadLetter('big-over', max + 1);
    assert.match(String(m.properties.headers?.['x-faxline-reason']), /larger than/);
  });

  it('names the real sender in a dead letter, whatever x-faxline-* headers the message carried', async () => {
    await deadLetters();
    const forged = {
      'x-faxline-user-id': userB.user,
      'X-Faxline-Reason': 'blame B',
      'x-faxline-queue': 'elsewhere',
      'x-trace': 'kept',
    };
    // Not JSON (dead-lettered by the broker wrapper) and an invalid command (by the intake).
    await a.publish('send', undefined, {
      userId: userA.user,
      messageId: 'forge-h-1',
      raw: Buffer.from('not json {'),
      headers: forged,
    });
    await a.publish(
      'send',
      { fax_number: '555' },
      { userId: userA.user, messageId: 'forge-h-2', headers: forged },
    );
    const dead = await eventually(async () => {
      const d = (await deadLetters()).filter((m) => /^forge-h-/.test(String(m.properties.messageId)));
      return d.length >= 2 ? d : null;
    });
    for (const m of dead) {
      const h = m.properties.headers ?? {};
      assert.equal(h['x-faxline-user-id'], userA.user, String(m.properties.messageId));
      assert.equal(h['X-Faxline-Reason'], undefined);
      assert.notEqual(h['x-faxline-reason'], 'blame B');
      assert.equal(h['x-faxline-queue'], `${prefix}.intake`);
      assert.equal(h['x-trace'], 'kept');
    }
  });
});

describe('AMQP intake batches', () => {
  // The batcher itself with the real PostgreSQL and RabbitMQ, so the per-command failures the
  // validation cannot foresee can be made: a Fax Default deleted between the command's check and
  // the batch's commit (foreign key, SQLSTATE 23503) and, should validation ever miss it, text
  // jsonb refuses (22P05).
  const prefix = queuePrefix('ib');
  const log = createLogger('silent');
  const broker = new Broker({ url: AMQP_URL, prefix, queueType: 'quorum', deliveryLimit: 5 }, log);
  const scheduler = {
    scheduleMany: async (_c: unknown, faxes: readonly unknown[]) => {
      if (faxes.length > 0) assert.fail('nothing is scheduled here');
    },
  } as unknown as Scheduler;
  let sdb: SeededDatabase;
  let publisher: CommandPublisher;
  before(async () => {
    sdb = await seededDatabase(2);
    await broker.start();
    publisher = new CommandPublisher(sdb.owner, broker, log);
  });
  after(async () => {
    await publisher?.stop();
    await broker.close();
    await deleteTopology(prefix);
    await sdb?.close();
  });

  it('a command PostgreSQL refuses fails alone; the rest of its batch is committed and dispatched', async () => {
    const [a, b] = sdb.accounts as [DemoSeed, DemoSeed];
    const fd = newId();
    await sdb.owner.query(
      `INSERT INTO fax_defaults (id, account_id, name, fax_as) VALUES ($1, $2, 'deleted meanwhile', '+15550100009')`,
      [fd, b.account_id],
    );
    await sdb.owner.query('DELETE FROM fax_defaults WHERE id = $1', [fd]);
    const sizes: number[] = [];
    const batcher = new JobBatcher({
      db: sdb.owner,
      publisher,
      scheduler,
      maxBatch: 50,
      lingerMs: 20,
      onBatch: (n) => sizes.push(n),
    });
    const cmd = (accountId: string, id: string, over: Parameters<typeof jobFixture>[1] = {}) =>
      jobFixture(accountId, { requestId: `amqp/${id}`, ...over });
    // Added in one turn of the event loop: one batch.
    const jobs = [
      cmd(a.account_id, 'a-1'),
      cmd(b.account_id, 'b-fk', { faxDefaultId: fd }),
      cmd(a.account_id, 'a-2'),
      // (In a text field kept in clear: the options' cover text is sealed, PostgreSQL never sees it.)
      cmd(b.account_id, 'b-nul', { clientReference: 'x\u0000y' }),
      cmd(b.account_id, 'b-ok'),
      cmd(a.account_id, 'a-3'),
    ];
    const res = await Promise.all(
      jobs.map((j) =>
        batcher.add(j, []).then(
          (id) => ({ j, id, err: null as unknown }),
          (err: unknown) => ({ j, id: null, err }),
        ),
      ),
    );
    assert.deepEqual(sizes, [6], 'the six commands shared one batch');
    const by = new Map(res.map((r) => [r.j.requestId, r]));
    const fk = by.get('amqp/b-fk')!.err;
    assert.ok(fk instanceof ApiError, `b-fk is refused with an ApiError, not ${String(fk)}`);
    assert.equal(fk.http, 409);
    assert.match(fk.message, /SQLSTATE 23503/);
    const nul = by.get('amqp/b-nul')!.err;
    assert.ok(nul instanceof ApiError, `b-nul is refused with an ApiError, not ${String(nul)}`);
    assert.equal(nul.http, 422);
    assert.match(nul.message, /SQLSTATE 22P05/);
    const good = res.filter((r) => !['amqp/b-fk', 'amqp/b-nul'].includes(r.j.requestId!));
    for (const r of good) assert.equal(r.err, null, `${r.j.requestId!}: ${String(r.err)}`);
    const rows = await sdb.owner.query<{ request_id: string; account_id: string }>(
      'SELECT request_id, account_id FROM fax_jobs WHERE id = ANY($1::uuid[]) ORDER BY request_id',
      [res.map((r) => r.j.id)],
    );
    assert.deepEqual(
      rows.rows,
      good
        .map((r) => ({ request_id: r.j.requestId!, account_id: r.j.accountId }))
        .sort((x, y) => x.request_id.localeCompare(y.request_id)),
    );
    // Their commands were published (and confirmed) before they were answered.
    const conn = await amqp.connect(AMQP_URL);
    try {
      const ch = await conn.createChannel();
      assert.equal((await ch.checkQueue(broker.names.queue('send'))).messageCount, good.length);
    } finally {
      await conn.close();
    }
  });

  it('an unreachable database fails the whole batch as transient (every delivery is retried)', async () => {
    const [a, b] = sdb.accounts as [DemoSeed, DemoSeed];
    // A pool to a port nobody listens on: ECONNREFUSED, the way a database that is down answers.
    const down = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', max: 1 });
    try {
      const batcher = new JobBatcher({ db: down, publisher, scheduler, maxBatch: 50, lingerMs: 20 });
      const res = await Promise.all(
        [jobFixture(a.account_id), jobFixture(b.account_id)].map((j) =>
          batcher.add(j, []).then(
            () => null,
            (err: unknown) => err,
          ),
        ),
      );
      for (const err of res) {
        assert.ok(
          err instanceof Error && !(err instanceof ApiError),
          `transient, not a refusal: ${String(err)}`,
        );
        assert.match(err.message, /ECONNREFUSED/);
      }
    } finally {
      await down.end();
    }
  });
});
