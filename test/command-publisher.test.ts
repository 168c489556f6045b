// The command publisher's retry of failed publishes (retrySoon) and its shutdown: a retry still
// waiting for RabbitMQ's confirms when stop() is called is waited for, and its confirmed commands are
// recorded before stop() resolves (not by a timer that fires after the pool has been closed).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import type { Broker } from '../src/amqp/broker.ts';
import type { Pool } from '../src/db/pool.ts';
import { CommandPublisher } from '../src/jobs/command-publisher.ts';
import { createLogger } from '../src/log.ts';
import { eventually } from './support/wait.ts';

describe('command publisher: retrySoon', () => {
  it('stop() waits for a retry in flight and records its confirmed commands', async () => {
    let release!: () => void;
    const confirmed = new Promise<void>((r) => (release = r));
    let publishes = 0;
    // RabbitMQ answering late: the retry's publish is confirmed only once `release` is called.
    const broker = {
      names: { commands: 'faxline.commands' },
      isConnected: true,
      publishMany: async () => {
        publishes++;
        await confirmed;
      },
    } as unknown as Broker;
    const recorded: string[][] = [];
    let closed = false;
    const db = {
      query: async (q: { name?: string; values?: unknown[] }) => {
        if (closed) throw new Error('pool closed');
        if (q.name === 'faxline_mark_dispatched') recorded.push(q.values![0] as string[]);
        return { rows: [], rowCount: 0 };
      },
    } as unknown as Pool;
    const publisher = new CommandPublisher(db, broker, createLogger('silent'));
    const jobId = randomUUID();
    publisher.retrySoon([{ type: 'send', job_id: jobId, account_id: randomUUID() }]);
    await eventually(async () => publishes === 1, 5_000, 20);

    const stopped = publisher.stop();
    release();
    await stopped;
    closed = true; // what the wiring does next
    assert.deepEqual(recorded, [[jobId]], 'the confirmed retry was recorded before stop() resolved');
  });
});
