// The audit trail of the AMQP intake (issue 32, docs/audit-retention.md): every send, broadcast,
// forward and cancel published by a sender is an event with actor amqp_sender and the broker user,
// readable with GET /v1/audit-events; a refused command is an event `refused` with its status; a
// command published twice is one event (the job's); and a single send's event is committed with its
// job, in the same transaction.
import amqp from 'amqplib';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { registerSender } from '../src/auth/senders.ts';
import { createSenderUser, type BrokerUser } from './support/amqp-users.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { AMQP_URL, eventually, startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';
import { TestSender } from './support/sender.ts';

interface Row {
  actor_type: string;
  actor_id: string | null;
  action: string;
  object_type: string | null;
  object_id: string | null;
  ip: string | null;
  result: string;
  status: number | null;
  detail: Record<string, unknown> | null;
}

describe('AMQP intake audit events', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let db: pg.Client;
  let acc: string, token: string;
  let user: BrokerUser;
  let a: TestSender;
  let pdf: string;

  before(async () => {
    s = await startService();
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    const seed = await seedAccount(s);
    acc = seed.account_id;
    token = await tokenFor(s.url, seed.api_key);
    user = await createSenderUser(s.cfg.QUEUE_PREFIX, acc);
    await registerSender(db, user.user, acc);
    a = await new TestSender(s.cfg.QUEUE_PREFIX).connect(user.url);
    pdf = await makePdfBase64(1);
  });
  after(async () => {
    await a?.close();
    await user?.remove();
    await db?.end();
    await s?.dropAll();
  });

  const send = (extra: Record<string, unknown> = {}) => ({
    fax_number: '+15551234567',
    fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
    ...extra,
  });

  async function amqpEvents(): Promise<Row[]> {
    const r = await call(s.url, 'GET', '/v1/audit-events?actor_type=amqp_sender&limit=100', { token });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    return r.body.data as Row[];
  }

  it('records each command of a sender with its broker user, in the account’s trail', async () => {
    const sent = await a.command('send', send(), { userId: user.user, messageId: 'aud-send' });
    assert.equal(sent.body.status, 1, sent.body.message);
    const jobId = sent.body.data.job_id as string;
    // Its event was committed with the job: it is there as soon as the answer is.
    const inTx = await db.query('SELECT 1 FROM audit_events WHERE object_id = $1', [jobId]);
    assert.equal(inTx.rows.length, 1, 'the send’s event is committed with its job');

    const again = await a.command('send', send(), { userId: user.user, messageId: 'aud-send' });
    assert.equal(again.body.data.job_id, jobId, 'a republished command is the same job');

    const fwd = await a.command(
      'forward',
      { job_id: jobId, fax_number: '+15557654321' },
      { userId: user.user, messageId: 'aud-fwd' },
    );
    assert.equal(fwd.body.status, 1, fwd.body.message);
    const fwdId = fwd.body.data.job_id as string;

    const at = new Date(Date.now() + 3_600_000).toISOString();
    const sch = await a.command('send', send({ scheduled_date: at }), {
      userId: user.user,
      messageId: 'aud-sch',
    });
    assert.equal(sch.body.status, 1, sch.body.message);
    const schId = sch.body.data.job_id as string;
    const cancel = await a.command(
      'cancel',
      { job_id: schId },
      { userId: user.user, messageId: 'aud-cancel' },
    );
    assert.equal(cancel.body.status, 1, cancel.body.message);
    // Cancelled already: refused (409), recorded as refused.
    const twice = await a.command(
      'cancel',
      { job_id: schId },
      { userId: user.user, messageId: 'aud-cancel2' },
    );
    assert.equal(twice.http, 409);

    const bc = await a.command(
      'send',
      {
        fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
        recipients: [{ fax_number: '+15551110001' }, { fax_number: '+15551110002' }],
      },
      { userId: user.user, messageId: 'aud-bc' },
    );
    assert.equal(bc.body.status, 1, bc.body.message);
    const bcFirst = bc.body.data.job_id as string;

    const bad = await a.command('send', { fax_number: '555' }, { userId: user.user, messageId: 'aud-bad' });
    assert.equal(bad.http, 422);

    const rows = await amqpEvents();
    const seen = rows.map((e) => `${e.action} ${e.object_id ?? '-'} ${e.result} ${e.status}`).sort();
    assert.deepEqual(
      seen,
      [
        `fax.cancel ${schId} ok 200`,
        `fax.cancel ${schId} refused 409`,
        `fax.forward ${fwdId} ok 200`,
        `fax.send - refused 422`,
        `fax.send ${bcFirst} ok 200`,
        `fax.send ${jobId} ok 200`,
        `fax.send ${schId} ok 200`,
      ].sort(),
      'one event per command (the republished send is not a second one)',
    );
    for (const e of rows) {
      assert.equal(e.actor_type, 'amqp_sender');
      assert.equal(e.actor_id, user.user, 'the actor is the broker user the message was published as');
      assert.equal(e.object_type, 'fax');
      assert.equal(e.ip, null);
    }
    const refusal = rows.find((e) => e.status === 422);
    assert.match(String(refusal?.detail?.message), /fax_number/);
    assert.doesNotMatch(JSON.stringify(rows), /555123|555765|555111/, 'no fax number in the trail');
  });
});

describe('AMQP_INLINE_DOCUMENTS=refuse', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let db: pg.Client;
  let acc: string;
  let user: BrokerUser;
  let a: TestSender;

  before(async () => {
    s = await startService({ env: { AMQP_INLINE_DOCUMENTS: 'refuse' } });
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    acc = (await seedAccount(s)).account_id;
    user = await createSenderUser(s.cfg.QUEUE_PREFIX, acc);
    await registerSender(db, user.user, acc);
    a = await new TestSender(s.cfg.QUEUE_PREFIX).connect(user.url);
  });
  after(async () => {
    await a?.close();
    await user?.remove();
    await db?.end();
    await s?.dropAll();
  });

  it('refuses a send with an inline document, and its dead letter keeps no byte of it', async () => {
    const pdf = await makePdfBase64(1);
    const r = await a.command(
      'send',
      { fax_number: '+15551234567', fax_data: [{ file_name: 'a.pdf', file_data: pdf }] },
      { userId: user.user, messageId: 'inline-1' },
    );
    assert.equal(r.http, 422);
    assert.match(r.body.message, /AMQP_INLINE_DOCUMENTS=refuse/);
    const jobs = await db.query(`SELECT 1 FROM fax_jobs WHERE request_id = 'amqp/inline-1'`);
    assert.equal(jobs.rows.length, 0, 'nothing stored');
    const conn = await amqp.connect(AMQP_URL);
    try {
      const ch = await conn.createChannel();
      const dead = await eventually(() => ch.get(`${s.cfg.QUEUE_PREFIX}.intake.dead`, { noAck: true }));
      assert.ok(dead);
      assert.equal(dead.properties.messageId, 'inline-1');
      assert.equal(dead.content.length, 0, 'the dead letter holds no part of the document');
      assert.ok(Number(dead.properties.headers?.['x-faxline-original-bytes']) > pdf.length);
    } finally {
      await conn.close();
    }
    const ev = await db.query(`SELECT result, status FROM audit_events WHERE actor_type = 'amqp_sender'`);
    assert.deepEqual(ev.rows, [{ result: 'refused', status: 422 }]);
  });
});
