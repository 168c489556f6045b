// Where answers may go (pure), and the intake exchange's alternate exchange on an installation whose
// exchange was declared before it existed (real RabbitMQ; the documented policy is applied and removed).
import amqp from 'amqplib';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { replyRoute } from '../src/amqp/reply.ts';
import { declareTopology, intakePolicy, topologyNames } from '../src/amqp/topology.ts';
import { AMQP_URL, deleteTopology, eventually, queuePrefix } from './support/harness.ts';

describe('reply routes', () => {
  const replies = 'p.replies';
  it('routes direct reply-to tokens to the default exchange and server-named queues by account', () => {
    const token = 'amq.rabbitmq.reply-to.g1h2AA1yZXBseUA5MjQ4ODg0AAAEIAAAAABrCDYl.XQpUrtOLzz0llIRhsSiFeA==';
    assert.deepEqual(replyRoute(token, undefined, replies), {
      exchange: '',
      routingKey: token,
      direct: true,
    });
    assert.deepEqual(replyRoute('amq.gen-AbC_d-1', 'acc', replies), {
      exchange: replies,
      routingKey: 'acc.amq.gen-AbC_d-1',
      direct: false,
    });
  });
  it('refuses everything else', () => {
    for (const [to, acc] of [
      ['p.cmd.send', 'acc'],
      ['amq.rabbitmq.reply-to', 'acc'],
      ['amq.gen-x', undefined],
      ['amq.gen-x.#', 'acc'],
      ['amq.gen-', 'acc'],
      ['my-replies', 'acc'],
      ['', 'acc'],
    ] as const) {
      assert.ok('refused' in replyRoute(to, acc, replies), to);
    }
  });
});

describe('AMQP topology of an installation from before the alternate exchange', () => {
  it('keeps its intake exchange, names the policy, and the policy makes unknown routing keys reach the intake queue', async () => {
    const prefix = queuePrefix('t');
    const t = topologyNames(prefix);
    const p = intakePolicy(t);
    const ctl = (...args: string[]) =>
      promisify(execFile)('rabbitmqctl', ['-q', ...args], { timeout: 30_000 });
    const conn = await amqp.connect(AMQP_URL);
    try {
      const ch = await conn.createConfirmChannel();
      await ch.assertExchange(t.intake, 'direct', { durable: true }); // as older versions declared it
      let hint = '';
      await declareTopology(
        ch,
        { prefix, queueType: 'classic', deliveryLimit: 5 },
        { openChannel: () => conn.createChannel(), onLegacyIntake: (h) => (hint = h) },
      );
      assert.equal(
        hint,
        `rabbitmqctl set_policy --apply-to exchanges ${p.name} '${p.pattern}' '${JSON.stringify(p.definition)}'`,
      );
      await ctl('set_policy', '--apply-to', 'exchanges', p.name, p.pattern, JSON.stringify(p.definition));
      const returned = new Set<string>();
      ch.on('return', (m: amqp.Message) => returned.add(String(m.properties.messageId)));
      let n = 0;
      await eventually(
        async () => {
          const id = `probe-${n++}`;
          await new Promise<void>((resolve, reject) =>
            ch.publish(
              t.intake,
              'bogus',
              Buffer.from('{}'),
              { mandatory: true, messageId: id },
              (err: unknown) => (err ? reject(err as Error) : resolve()),
            ),
          );
          return !returned.has(id);
        },
        10_000,
        100,
      );
      const got = await ch.get(t.intake, { noAck: true });
      assert.ok(got, 'the message with an unknown routing key is in the intake queue');
      assert.equal(got.fields.routingKey, 'bogus');
    } finally {
      await ctl('clear_policy', p.name).catch(() => undefined);
      await conn.close().catch(() => undefined);
      await deleteTopology(prefix).catch(() => undefined);
    }
  });
});
