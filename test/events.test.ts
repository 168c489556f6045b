// Events: one pure mapping from transitions to event types, and the outbox relay against the real
// PostgreSQL and RabbitMQ — no event is lost when the relay process is killed between publishing
// and committing, and several relays share the outbox without duplicating.
import amqp from 'amqplib';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { Broker } from '../src/amqp/broker.ts';
import { brokerEventPublisher } from '../src/events/component.ts';
import { EventRelay, toEvent } from '../src/events/relay.ts';
import { faxEvent, type FaxEvent } from '../src/events/schema.ts';
import { eventTypeOf, routingKeyOf } from '../src/events/types.ts';
import { createLogger } from '../src/log.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { AMQP_URL, eventually, startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

describe('event types (pure)', () => {
  it('maps every state change to one event type', () => {
    assert.equal(eventTypeOf(null, 'accepted', null), 'fax.accepted');
    assert.equal(eventTypeOf(null, 'scheduled', null), 'fax.scheduled');
    assert.equal(eventTypeOf('scheduled', 'accepted', null), 'fax.accepted');
    assert.equal(eventTypeOf('dialling', 'sending', { bit_rate: 14400 }), 'fax.sending');
    assert.equal(eventTypeOf('sending', 'sending', { page: 2, of: 3 }), 'fax.page_sent');
    assert.equal(eventTypeOf('dialling', 'retry_waiting', null), 'fax.retry_scheduled');
    assert.equal(eventTypeOf('sending', 'delivered', null), 'fax.delivered');
    assert.equal(eventTypeOf('preparing', 'failed', null), 'fax.failed');
    assert.equal(eventTypeOf('scheduled', 'cancelled', null), 'fax.cancelled');
    assert.equal(eventTypeOf('sending', 'unknown', null), 'fax.outcome_unknown');
    assert.equal(routingKeyOf('acc', 'fax.delivered'), 'acc.fax.delivered');
  });

  it('builds a versioned event with failure details on terminal states', () => {
    const e = toEvent({
      transition_id: '42',
      event_id: '6a1d0c4e-8d7e-4a0c-9d55-0b6f1b2f0a11',
      job_id: '7a1d0c4e-8d7e-4a0c-9d55-0b6f1b2f0a11',
      account_id: '8a1d0c4e-8d7e-4a0c-9d55-0b6f1b2f0a11',
      from_state: 'dialling',
      to_state: 'failed',
      attempt: 3,
      at: new Date('2026-11-26T00:00:00Z'),
      detail: { cause: 'busy' },
      failure_code: 'busy',
      failure_reason: 'the line was busy',
      page_count: 2,
      pages_sent: 0,
    });
    assert.deepEqual(faxEvent.parse(e), e);
    assert.equal(e.type, 'fax.failed');
    assert.equal(e.sequence, 42);
    assert.deepEqual(e.details, {
      cause: 'busy',
      page_count: 2,
      pages_sent: 0,
      failure_code: 'busy',
      failure_reason: 'the line was busy',
    });
  });
});

describe('outbox relay', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let db: pg.Client;
  let conn: amqp.ChannelModel;
  let ch: amqp.Channel;
  let queue: string;
  let token: string;
  let pdf: string;

  before(async () => {
    // Everything but the events component: state changes are committed, nothing publishes them.
    s = await startService({ components: ['api', 'send', 'cancel', 'scheduler', 'intake'] });
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    conn = await amqp.connect(AMQP_URL);
    ch = await conn.createChannel();
    queue = (await ch.assertQueue('', { exclusive: true })).queue;
    await ch.bindQueue(queue, `${s.cfg.QUEUE_PREFIX}.events`, '#');
    const seed = await seedAccount(s);
    token = await tokenFor(s.url, seed.api_key);
    pdf = await makePdfBase64(1);
  });
  after(async () => {
    await conn?.close();
    await db?.end();
    await s?.dropAll();
  });

  async function sendAndDeliver(n: number): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = await call(s.url, 'POST', '/v1/faxes/send', {
        token,
        body: { fax_number: `+1555123456${i}`, fax_data: [{ file_name: 'a.pdf', file_data: pdf }] },
      });
      assert.equal(r.body.status, 1);
      ids.push(r.body.data.job_id as string);
    }
    await eventually(async () => {
      const r = await db.query(
        `SELECT count(*)::int AS n FROM fax_jobs WHERE id = ANY($1) AND state = 'delivered'`,
        [ids],
      );
      return r.rows[0].n === n;
    });
    return ids;
  }

  async function drain(): Promise<FaxEvent[]> {
    const out: FaxEvent[] = [];
    for (;;) {
      const m = await ch.get(queue, { noAck: true });
      if (!m) return out;
      out.push(faxEvent.parse(JSON.parse(m.content.toString())));
    }
  }

  const outboxIds = async () =>
    (
      await db.query<{ event_id: string }>('SELECT event_id FROM event_outbox ORDER BY transition_id')
    ).rows.map((r) => r.event_id);

  function runChild(env: Record<string, string>): Promise<{ code: number | null; signal: string | null }> {
    return new Promise((resolve, reject) => {
      const p = spawn(process.execPath, ['test/support/relay-child.ts'], {
        env: {
          ...process.env,
          DATABASE_URL: s.cfg.DATABASE_URL,
          AMQP_URL,
          PREFIX: s.cfg.QUEUE_PREFIX,
          ...env,
        },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      p.on('error', reject);
      p.on('exit', (code, signal) => resolve({ code, signal }));
    });
  }

  it('loses no event when the relay process is killed between publishing and committing', async () => {
    const jobs = await sendAndDeliver(2);
    assert.deepEqual(await drain(), [], 'nothing is published without a relay');
    const pending = await outboxIds();
    const transitions = await db.query(
      'SELECT count(*)::int AS n FROM fax_job_transitions WHERE job_id = ANY($1)',
      [jobs],
    );
    assert.equal(pending.length, transitions.rows[0].n, 'one outbox row per committed transition');
    assert.equal(pending.length, 14);

    const killed = await runChild({ KILL_AFTER: '5' });
    assert.equal(killed.signal, 'SIGKILL');
    assert.deepEqual(await outboxIds(), pending, 'the killed relay committed nothing');
    const early = await eventually(async () => {
      const got = await drain();
      return got.length >= 5 ? got : null;
    });

    const drained = await runChild({});
    assert.equal(drained.code, 0);
    assert.deepEqual(await outboxIds(), []);
    const later = await eventually(async () => {
      const got = await drain();
      return got.length >= pending.length ? got : null;
    });
    const seen = new Set([...early, ...later].map((e) => e.id));
    for (const id of pending) assert.ok(seen.has(id), `event ${id} was published`);
    // The ones published before the kill come again with the same id: consumers deduplicate on it.
    assert.deepEqual(new Set(later.map((e) => e.id)), new Set(pending));
    for (const job of jobs) {
      const types = later.filter((e) => e.job_id === job).map((e) => e.type);
      assert.deepEqual(types, [
        'fax.accepted',
        'fax.preparing',
        'fax.queued',
        'fax.dialling',
        'fax.sending',
        'fax.page_sent',
        'fax.delivered',
      ]);
    }
  });

  it('serves the AsyncAPI 3 description generated from the zod schemas', async () => {
    const r = await fetch(`${s.url}/asyncapi.json`);
    assert.equal(r.status, 200);
    const doc = (await r.json()) as any;
    assert.equal(doc.asyncapi, '3.0.0');
    const prefix = s.cfg.QUEUE_PREFIX;
    assert.equal(doc.channels.intake.address, `${prefix}.intake`);
    assert.equal(doc.channels.events.address, `${prefix}.events`);
    const send = doc.channels.intake.messages.send.payload;
    // fax_number, or recipients for a broadcast (issue 21): exactly one of them.
    assert.deepEqual(send.required, ['fax_data']);
    assert.deepEqual(
      send.oneOf.map((f: { required: string[] }) => f.required),
      [['fax_number'], ['recipients']],
    );
    assert.equal(send.properties.fax_number.pattern, '^\\+[1-9][0-9]{1,14}$');
    const ev = doc.channels.events.messages.event.payload;
    assert.ok(ev.properties.type.enum.includes('fax.page_sent'));
    assert.ok(ev.required.includes('sequence'));
    assert.deepEqual(Object.keys(doc.operations).sort(), ['receiveEvents', 'sendCommand']);
  });

  it('shares the outbox between several relays without publishing an event twice', async () => {
    await sendAndDeliver(3);
    const pending = await outboxIds();
    assert.equal(pending.length, 21);
    const log = createLogger('silent');
    const broker = new Broker(
      { url: AMQP_URL, prefix: s.cfg.QUEUE_PREFIX, queueType: 'quorum', deliveryLimit: 5 },
      log,
    );
    await broker.start();
    try {
      const pool = new pg.Pool({ connectionString: s.cfg.DATABASE_URL, max: 4 });
      pool.on('error', () => undefined); // teardown drops the database
      const relays = [1, 2, 3].map(
        () => new EventRelay({ db: pool, log, batchSize: 2, publish: brokerEventPublisher(broker) }),
      );
      const counts = await Promise.all(
        relays.map(async (r) => {
          let total = 0;
          for (let n = await r.runOnce(); n > 0; n = await r.runOnce()) total += n;
          return total;
        }),
      );
      await pool.end();
      assert.equal(
        counts.reduce((x, y) => x + y, 0),
        21,
      );
      assert.ok(counts.filter((c) => c > 0).length >= 2, `work was shared: ${counts.join(', ')}`);
    } finally {
      await broker.close();
    }
    const got = await eventually(async () => {
      const g = await drain();
      return g.length >= 21 ? g : null;
    });
    assert.equal(got.length, 21);
    assert.deepEqual(new Set(got.map((e) => e.id)), new Set(pending));
  });
});
