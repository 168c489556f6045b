// Batched broker operations used by the AMQP intake: acknowledgements coalesced into multiple-acks
// (never covering a delivery still being handled), several commands published with one wait for
// their confirms (failing when any of them is unroutable), and the Dispatcher's dispatchMany.
import amqp from 'amqplib';
import type { ConsumeMessage } from 'amqplib';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AckCoalescer, batchSocketWrites, Broker } from '../src/amqp/broker.ts';
import type { Pool } from '../src/db/pool.ts';
import { Dispatcher } from '../src/jobs/dispatcher.ts';
import { createLogger } from '../src/log.ts';
import { AMQP_URL, deleteTopology, eventually, uniqueName } from './support/harness.ts';

const msg = (tag: number) => ({ fields: { deliveryTag: tag } }) as unknown as ConsumeMessage;
const tick = () => new Promise((r) => setImmediate(r));

function fakeChannel() {
  const acks: { tag: number; multiple: boolean }[] = [];
  return {
    acks,
    ack: (m: ConsumeMessage, allUpTo?: boolean) =>
      acks.push({ tag: m.fields.deliveryTag, multiple: allUpTo === true }),
  };
}

describe('AckCoalescer', () => {
  it('acknowledges a run of finished deliveries with one multiple-ack', async () => {
    const ch = fakeChannel();
    const a = new AckCoalescer(ch, 100);
    for (let t = 1; t <= 5; t++) a.delivered(msg(t));
    for (const t of [3, 1, 2, 5, 4]) a.ack(msg(t));
    await tick();
    assert.deepEqual(ch.acks, [{ tag: 5, multiple: true }]);
  });

  it('holds finished deliveries behind one still being handled', async () => {
    const ch = fakeChannel();
    const a = new AckCoalescer(ch, 100);
    for (let t = 1; t <= 4; t++) a.delivered(msg(t));
    a.ack(msg(1));
    a.ack(msg(3));
    a.ack(msg(4));
    await tick();
    // 2 is not finished: a multiple-ack up to 3 or 4 would acknowledge it too early.
    assert.deepEqual(ch.acks, [{ tag: 1, multiple: true }]);
    a.ack(msg(2));
    await tick();
    assert.deepEqual(ch.acks, [
      { tag: 1, multiple: true },
      { tag: 4, multiple: true },
    ]);
  });

  it('passes over deliveries settled on their own (nacked or dead-lettered)', async () => {
    const ch = fakeChannel();
    const a = new AckCoalescer(ch, 100);
    for (let t = 1; t <= 3; t++) a.delivered(msg(t));
    a.ack(msg(1));
    a.settled(msg(2));
    await tick();
    assert.deepEqual(ch.acks, [{ tag: 1, multiple: true }]);
    a.settled(msg(3));
    await tick();
    // Nothing finished by a handler after 1: no further ack is sent.
    assert.deepEqual(ch.acks, [{ tag: 1, multiple: true }]);
  });

  it('acks one by one when a slow delivery holds back more than maxHeld', async () => {
    const ch = fakeChannel();
    const a = new AckCoalescer(ch, 2);
    for (let t = 1; t <= 5; t++) a.delivered(msg(t));
    a.ack(msg(2));
    a.ack(msg(3));
    a.ack(msg(4));
    await tick();
    assert.deepEqual(
      ch.acks.map((x) => x.tag),
      [2, 3, 4],
    );
    assert.ok(ch.acks.every((x) => !x.multiple));
    // When the slow one finishes, only it (and what followed) is acknowledged, nothing twice.
    a.ack(msg(1));
    a.ack(msg(5));
    await tick();
    assert.deepEqual(ch.acks.at(-1), { tag: 5, multiple: true });
    assert.equal(ch.acks.length, 4);
  });
});

describe('batchSocketWrites', () => {
  it('corks the socket around each pass of amqplib’s writer, once, and leaves unknown shapes alone', () => {
    const calls: string[] = [];
    const stream = {
      cork: () => calls.push('cork'),
      uncork: () => calls.push('uncork'),
      write: (c: string) => calls.push(`write ${c}`),
    };
    const muxer = {
      _readIncoming: () => {
        stream.write('a');
        stream.write('b');
      },
    };
    const model = { connection: { muxer, stream } };
    assert.equal(batchSocketWrites(model), true);
    assert.equal(batchSocketWrites(model), false, 'not wrapped twice');
    muxer._readIncoming();
    assert.deepEqual(calls, ['cork', 'write a', 'write b', 'uncork']);
    assert.equal(batchSocketWrites({}), false);
    assert.equal(batchSocketWrites({ connection: { muxer: {}, stream } }), false);
  });
});

describe('Broker.publishMany and Dispatcher.dispatchMany', () => {
  it('publishes a batch of commands, each confirmed, and records them as dispatched', async () => {
    const prefix = uniqueName('tb').toLowerCase();
    const log = createLogger('silent');
    const broker = new Broker({ url: AMQP_URL, prefix, queueType: 'quorum', deliveryLimit: 5 }, log);
    await broker.start();
    const marked: string[][] = [];
    const db = {
      query: (_text: string, values: unknown[]) => {
        marked.push(values[0] as string[]);
        return Promise.resolve({ rows: [], rowCount: 0 });
      },
    } as unknown as Pool;
    const dispatcher = new Dispatcher(db, broker, log);
    const conn = await amqp.connect(AMQP_URL);
    try {
      const ids = Array.from(
        { length: 50 },
        (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      );
      await dispatcher.dispatchMany(
        ids.map((id, i) => ({
          type: i % 2 === 0 ? 'send' : 'forward',
          job_id: id,
          account_id: '00000000-0000-4000-8000-00000000000a',
        })),
      );
      const ch = await conn.createChannel();
      const sends = await ch.checkQueue(broker.names.queue('send'));
      const forwards = await ch.checkQueue(broker.names.queue('forward'));
      assert.equal(sends.messageCount, 25);
      assert.equal(forwards.messageCount, 25);
      const first = await ch.get(broker.names.queue('send'), { noAck: true });
      assert.ok(first);
      assert.equal(first.properties.messageId, `${ids[0]}:send`);
      assert.equal(first.properties.deliveryMode, 2);
      assert.equal(JSON.parse(first.content.toString()).job_id, ids[0]);
      await dispatcher.stop();
      assert.deepEqual(marked.flat().sort(), [...ids].sort());

      // One unroutable command fails the whole call: the caller must treat the lot as unconfirmed.
      await assert.rejects(
        broker.publishMany(broker.names.commands, [
          { routingKey: 'send', body: { n: 1 }, messageId: 'ok-1' },
          { routingKey: 'nowhere', body: { n: 2 }, messageId: 'lost-2' },
        ]),
        /unroutable/,
      );
      await eventually(
        async () => (await ch.checkQueue(broker.names.queue('send'))).messageCount === 25,
        5000,
      );
    } finally {
      await conn.close();
      await broker.close();
      await deleteTopology(prefix);
    }
  });
});
