// A new RabbitMQ connection that fails or stalls while faxline sets it up (declares the topology,
// attaches the consumers). On a cluster whose nodes are coming back, RabbitMQ 3.10 holds
// basic.consume on a quorum queue without a leader and may then close the whole connection with
// 541 INTERNAL_ERROR: the `npm run test:cluster` failure under load (issue 28, docs/clustering.md).
// A proxy in front of the shared broker plays the node (test/support/cluster/amqp-fault-proxy.ts);
// the next address in AMQP_URL is the shared broker itself.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Broker } from '../src/amqp/broker.ts';
import { createLogger } from '../src/log.ts';
import { startAmqpFaultProxy, type SetupFault } from './support/cluster/amqp-fault-proxy.ts';
import { AMQP_URL, LogCapture, deleteTopology, eventually, queuePrefix } from './support/harness.ts';

/** Resolves with `p`, or rejects saying what was waited for once `ms` have passed. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function withFaultyFirstNode(
  fault: SetupFault,
  o: { fallback: boolean; setupTimeoutMs?: number },
  fn: (b: Broker, logs: LogCapture, proxy: Awaited<ReturnType<typeof startAmqpFaultProxy>>) => Promise<void>,
) {
  const proxy = await startAmqpFaultProxy(Number(new URL(AMQP_URL).port || 5672), fault);
  const prefix = queuePrefix('sf');
  const logs = new LogCapture();
  const proxied = new URL(AMQP_URL);
  proxied.port = String(proxy.port);
  const b = new Broker(
    {
      url: o.fallback ? `${proxied.href},${AMQP_URL}` : proxied.href,
      prefix,
      queueType: 'quorum',
      deliveryLimit: 5,
      ...(o.setupTimeoutMs ? { setupTimeoutMs: o.setupTimeoutMs } : {}),
    },
    createLogger('info', logs),
  );
  try {
    await fn(b, logs, proxy);
  } finally {
    await within(b.close(), 15_000, 'broker closed').catch(() => undefined);
    await proxy.close();
    await deleteTopology(prefix).catch(() => undefined);
  }
}

/** Publishes a command and waits until the registered consumer has it: the connection really works. */
async function roundTrip(b: Broker, got: string[]) {
  await b.publish(b.names.commands, 'send', { probe: 'after-fault' }, { messageId: 'probe-1' });
  await eventually(async () => got.includes('probe-1'), 20_000, 50).catch(() => {
    throw new Error(`the consumer did not receive the probe within 20 s (received ${JSON.stringify(got)})`);
  });
}

describe('RabbitMQ connection setup faults', () => {
  it('a node that closes the connection with 541 during setup: the next address is used, nothing is thrown', async () => {
    await withFaultyFirstNode('fatal-close', { fallback: true }, async (b, logs, proxy) => {
      const got: string[] = [];
      await b.consume(b.names.queue('send'), 1, async (msg) => {
        got.push(String(msg.properties.messageId));
      });
      await within(b.start(), 60_000, 'connected through the second address after the 541 close');
      assert.equal(proxy.intercepted(), 1, 'the first connection reached basic.consume and was closed');
      assert.ok(b.isConnected, 'connected');
      assert.equal(b.consumersAttached, 1, 'the consumer is attached on the new connection');
      assert.ok(
        logs.lines.some((l) => /connection attempt failed/.test(l) && /541 \(INTERNAL-ERROR\)/.test(l)),
        `the failed attempt is logged with its reason: ${logs.text}`,
      );
      await roundTrip(b, got);
    });
  });

  it('a node that never answers during setup: the connection is dropped after the setup timeout', async () => {
    await withFaultyFirstNode('silent', { fallback: true, setupTimeoutMs: 2000 }, async (b, logs, proxy) => {
      const got: string[] = [];
      await b.consume(b.names.queue('send'), 1, async (msg) => {
        got.push(String(msg.properties.messageId));
      });
      await within(b.start(), 60_000, 'connected through the second address after the stalled setup');
      assert.equal(proxy.intercepted(), 1, 'the first connection stalled at basic.consume');
      assert.match(logs.text, /setup not finished in time/);
      await eventually(async () => proxy.open() === 0, 10_000, 50).catch(() => {
        throw new Error(`the stalled connection was not dropped within 10 s (${proxy.open()} open)`);
      });
      assert.equal(b.consumersAttached, 1);
      await roundTrip(b, got);
    });
  });

  it('close() while the only node stalls in setup: returns, and leaves no connection or retry behind', async () => {
    await withFaultyFirstNode(
      'silent',
      { fallback: false, setupTimeoutMs: 120_000 },
      async (b, _logs, proxy) => {
        await b.consume(b.names.queue('send'), 1, async () => undefined);
        const started = b.start().then(
          () => 'connected',
          (err: Error) => `failed: ${err.message}`,
        );
        await eventually(async () => proxy.intercepted() >= 1, 30_000, 50).catch(() => {
          throw new Error('the connection did not reach basic.consume within 30 s');
        });
        await within(b.close(), 10_000, 'close() with a setup in flight');
        await eventually(async () => proxy.open() === 0, 10_000, 50).catch(() => {
          throw new Error(
            `a connection is still open through the proxy 10 s after close() (${proxy.open()})`,
          );
        });
        assert.match(await within(started, 10_000, 'start() settled after close()'), /^failed: /);
        assert.equal(b.isConnected, false);
      },
    );
  });
});
