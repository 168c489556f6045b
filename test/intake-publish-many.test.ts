// CommandPublisher.publishMany / Broker.publishMany, which the HTTP intake uses to publish a group-commit
// batch's commands together: every command is on its queue when the lot resolves, and a lot with
// one command the broker cannot route rejects as a whole (so none of its requests is told "accepted").
import assert from 'node:assert/strict';
import amqp from 'amqplib';
import { after, before, describe, it } from 'node:test';
import { Broker } from '../src/amqp/broker.ts';
import { newId } from '../src/domain/ids.ts';
import { CommandPublisher } from '../src/jobs/command-publisher.ts';
import { createLogger } from '../src/log.ts';
import { AMQP_URL, deleteTopology, queuePrefix } from './support/harness.ts';

describe('publishMany', () => {
  const prefix = queuePrefix('dm');
  const log = createLogger('silent');
  const broker = new Broker({ url: AMQP_URL, prefix, queueType: 'quorum', deliveryLimit: 5 }, log);
  const recorded: string[][] = [];
  before(async () => {
    await broker.start();
  });
  after(async () => {
    await broker.close();
    await deleteTopology(prefix);
  });

  it('puts every command of the lot on its queue before resolving, and records them', async () => {
    // The dispatch record (dispatched_at) goes to PostgreSQL in the service; here it is captured.
    const publisher = new CommandPublisher(
      {
        query: async (q: { values: string[][] }) => {
          recorded.push(q.values[0]!);
          return { rows: [], rowCount: q.values[0]!.length };
        },
      } as never,
      broker,
      log,
    );
    const account = newId();
    const cmds = Array.from({ length: 25 }, (_, i) => ({
      type: i % 5 === 0 ? ('forward' as const) : ('send' as const),
      job_id: newId(),
      account_id: account,
    }));
    await publisher.publishMany(cmds);
    const conn = await amqp.connect(AMQP_URL);
    try {
      const ch = await conn.createChannel();
      assert.equal((await ch.checkQueue(broker.names.queue('send'))).messageCount, 20);
      assert.equal((await ch.checkQueue(broker.names.queue('forward'))).messageCount, 5);
      const m = await ch.get(broker.names.queue('forward'), { noAck: true });
      assert.ok(m);
      const body = JSON.parse(m.content.toString()) as Record<string, unknown>;
      assert.equal(body.version, 1);
      assert.equal(body.type, 'forward');
      assert.equal(m.properties.messageId, `${String(body.job_id)}:forward`);
    } finally {
      await conn.close();
    }
    await publisher.stop(); // flushes the record of confirmed publishes (dispatched_at)
    assert.deepEqual(recorded.flat().sort(), cmds.map((c) => c.job_id).sort());
  });

  it('rejects the whole lot when one message cannot be routed', async () => {
    const msgs = [
      { routingKey: 'send', body: { n: 1 }, messageId: newId() },
      { routingKey: 'no-such-queue', body: { n: 2 }, messageId: newId() },
    ];
    await assert.rejects(broker.publishMany(broker.names.commands, msgs), /unroutable/);
    await broker.publishMany(broker.names.commands, []); // nothing to wait for
  });
});
