// Intake lots (migration 009): an HTTP group-commit batch records its accepted jobs' unconfirmed
// commands as one lot row instead of marking each job after the confirm. Against the real PostgreSQL
// and RabbitMQ: a lot whose process died between COMMIT and confirm is found by the sweep, which
// republishes the commands of its jobs that are still accepted (and only those), then forgets it; a
// confirmed lot is forgotten and nothing is republished; a job is removable after a failed publish
// only while its lot is unconfirmed.
import assert from 'node:assert/strict';
import amqp from 'amqplib';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { DemoSeed } from '../src/admin/seed.ts';
import { Broker } from '../src/amqp/broker.ts';
import { GroupCommit } from '../src/intake/group-commit.ts';
import { intakeFlush, type JobWrite } from '../src/intake/send.ts';
import { CommandPublisher } from '../src/jobs/command-publisher.ts';
import { deleteUndispatched, findStaleLots, type NewJob } from '../src/jobs/repo.ts';
import { createLogger } from '../src/log.ts';
import { AMQP_URL, deleteTopology, queuePrefix } from './support/harness.ts';
import { jobFixture, seededDatabase, type SeededDatabase } from './support/jobs.ts';

describe('intake lots', () => {
  const prefix = queuePrefix('lots');
  const log = createLogger('silent');
  const broker = new Broker({ url: AMQP_URL, prefix, queueType: 'quorum', deliveryLimit: 5 }, log);
  let sdb: SeededDatabase;
  let owner: pg.Pool;
  let seed: DemoSeed;
  let gc: GroupCommit<JobWrite>;

  before(async () => {
    sdb = await seededDatabase(2);
    owner = sdb.owner;
    seed = sdb.accounts[0]!;
    const noScheduler = {
      scheduleMany: async (_c: unknown, faxes: readonly unknown[]) => {
        if (faxes.length > 0) assert.fail('nothing is scheduled here');
      },
    };
    gc = new GroupCommit<JobWrite>(sdb.api, { maxBatch: 50, concurrency: 1 }, intakeFlush(noScheduler));
    await broker.start();
  });
  after(async () => {
    await broker.close();
    await deleteTopology(prefix);
    await sdb.close();
  });

  const job = (): NewJob => jobFixture(seed.account_id);
  /** Commits jobs concurrently, as concurrent HTTP sends do (they share batches); returns them with lotId. */
  const commit = (n: number): Promise<NewJob[]> =>
    Promise.all(
      Array.from({ length: n }, () => {
        const j = job();
        return gc.run(seed.account_id, async () => ({ write: { job: j, docs: [] }, value: j }));
      }),
    );
  const queued = async (): Promise<string[]> => {
    const conn = await amqp.connect(AMQP_URL);
    try {
      const ch = await conn.createChannel();
      const ids: string[] = [];
      for (;;) {
        const m = await ch.get(broker.names.queue('send'), { noAck: true });
        if (!m) return ids.sort();
        ids.push((JSON.parse(m.content.toString()) as { job_id: string }).job_id);
      }
    } finally {
      await conn.close();
    }
  };
  const lotRows = async () =>
    (await owner.query<{ id: string; job_ids: string[] }>('SELECT id, job_ids FROM intake_lots')).rows;

  it('each batch writes one lot for its accepted jobs, which are recorded as dispatched', async () => {
    const jobs = await commit(6);
    const lots = await lotRows();
    assert.ok(lots.length >= 1 && lots.length < 6, `${lots.length} lots: batches were shared`);
    for (const j of jobs) {
      const holding = lots.filter((l) => l.job_ids.includes(j.id));
      assert.equal(holding.length, 1, 'every job is in exactly one lot');
      assert.equal(holding[0]!.id, j.lotId);
    }
    assert.equal(lots.flatMap((l) => l.job_ids).length, 6);
    const marked = await owner.query(
      'SELECT count(*)::int AS n FROM fax_jobs WHERE id = ANY($1::uuid[]) AND dispatched_at IS NOT NULL',
      [jobs.map((j) => j.id)],
    );
    assert.equal(marked.rows[0].n, 6, 'no per-job update after the confirm is needed');
    await owner.query('DELETE FROM intake_lots');
  });

  it('a sweep claims the lots it takes (concurrent sweeps never share one) and takes accounts in turn', async () => {
    const [a, b] = [sdb.accounts[0]!.account_id, sdb.accounts[1]!.account_id];
    // Account A: five old lots (a flood of parked commands); account B: one, newer than all of them.
    const lots = [a, a, a, a, a, b].map((account, i) => ({ id: randomUUID(), account, age: 600 - i }));
    for (const l of lots)
      await owner.query(
        `INSERT INTO intake_lots (id, account_id, job_ids, created_at, parked)
         VALUES ($1, $2, ARRAY[$3::uuid], now() - make_interval(secs => $4), $5)`,
        [l.id, l.account, randomUUID(), l.age, l.account === a],
      );
    const first = await findStaleLots(owner, 60, 2);
    assert.deepEqual(
      first.map((l) => l.id).sort(),
      [lots[0]!.id, lots[5]!.id].sort(),
      'the oldest lot of each account, not the two oldest of the flood',
    );
    const [x, y] = await Promise.all([findStaleLots(owner, 60, 10), findStaleLots(owner, 60, 10)]);
    const ids = [...x, ...y].map((l) => l.id);
    assert.equal(new Set(ids).size, ids.length, 'no lot taken by both sweeps');
    assert.deepEqual(
      ids.sort(),
      lots
        .slice(1, 5)
        .map((l) => l.id)
        .sort(),
      'every other stale lot taken once',
    );
    assert.deepEqual(
      await findStaleLots(owner, 60, 10),
      [],
      'claimed lots are not stale again within the grace',
    );
    await owner.query('DELETE FROM intake_lots');
  });

  it('the sweep republishes a dead lot’s still-accepted jobs, then forgets the lot', async () => {
    // The process "died" between COMMIT and confirm: nothing was published.
    const jobs = await commit(3);
    await owner.query(`UPDATE fax_jobs SET state = 'preparing' WHERE id = $1`, [jobs[0]!.id]);
    const publisher = new CommandPublisher(owner, broker, log);
    assert.equal(await publisher.sweep(30), 0, 'a lot younger than the grace period is left alone');
    assert.equal(await publisher.sweep(0), 2);
    await publisher.stop(); // records the confirm: the lot goes
    assert.deepEqual(await queued(), [jobs[1]!.id, jobs[2]!.id].sort());
    assert.deepEqual(await lotRows(), []);
    assert.equal(await new CommandPublisher(owner, broker, log).sweep(0), 0, 'nothing left to republish');
    assert.deepEqual(await queued(), []);
  });

  it('a confirmed lot is forgotten, and its jobs can no longer be removed as unconfirmed', async () => {
    const [unconfirmed] = await commit(1);
    const jobs = await commit(2);
    const publisher = new CommandPublisher(owner, broker, log);
    await publisher.publishMany(
      jobs.map((j) => ({ type: 'send' as const, job_id: j.id, account_id: j.accountId })),
      { mark: [], lots: [...new Set(jobs.map((j) => j.lotId!))] },
    );
    await publisher.stop();
    assert.deepEqual(
      (await lotRows()).map((l) => l.id),
      [unconfirmed!.lotId],
    );
    // As the API after a failed publish: removable only while unconfirmed.
    const scoped = async (id: string) => {
      const c = await owner.connect();
      try {
        await c.query('BEGIN');
        const r = await deleteUndispatched(c, id);
        await c.query('COMMIT');
        return r;
      } finally {
        c.release();
      }
    };
    assert.equal(await scoped(jobs[0]!.id), false);
    assert.equal(await scoped(unconfirmed!.id), true);
    assert.deepEqual((await queued()).sort(), jobs.map((j) => j.id).sort());
    await owner.query('DELETE FROM intake_lots');
  });
});
