// Group commit against the real PostgreSQL as the API role: requests of several accounts share a
// transaction, a refusal affects only its request, and a failing write rolls the batch back and
// retries the others one by one (each lands exactly once, in its own account).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { DemoSeed } from '../src/admin/seed.ts';
import { ApiError } from '../src/api/envelope.ts';
import { GroupCommit } from '../src/intake/group-commit.ts';
import { intakeFlush, type JobWrite } from '../src/intake/send.ts';
import { jobFixture, seededDatabase, type SeededDatabase } from './support/jobs.ts';

describe('group commit', () => {
  let sdb: SeededDatabase;
  let owner: pg.Pool;
  let api: pg.Pool;
  let a: DemoSeed;
  let b: DemoSeed;

  before(async () => {
    sdb = await seededDatabase(2);
    ({ owner, api } = sdb);
    [a, b] = sdb.accounts as [DemoSeed, DemoSeed];
  });
  after(() => sdb.close());

  const job = jobFixture;
  const noScheduler = { schedule: async () => assert.fail('nothing is scheduled here') };

  it('commits many requests of two accounts together; a refusal only refuses its own', async () => {
    const gc = new GroupCommit<JobWrite>(api, { maxBatch: 50, concurrency: 1 }, intakeFlush(noScheduler));
    const reqs = Array.from({ length: 30 }, (_, i) => {
      const acc = i % 2 ? a.account_id : b.account_id;
      const j = job(acc);
      return gc
        .run(acc, async (c) => {
          // A read under row-level security: only this account's Fax Defaults are visible.
          const fd = await c.query('SELECT account_id FROM fax_defaults');
          assert.ok(fd.rows.every((r: { account_id: string }) => r.account_id === acc));
          if (i % 7 === 5) throw new ApiError(422, `refused ${i}`);
          return { write: { job: j, docs: [] }, value: j.id };
        })
        .then(
          (id) => ({ i, acc, id, err: null as unknown }),
          (err: unknown) => ({ i, acc, id: null, err }),
        );
    });
    const res = await Promise.all(reqs);
    for (const r of res) {
      if (r.i % 7 === 5) {
        assert.ok(r.err instanceof ApiError && r.err.message === `refused ${r.i}`);
        continue;
      }
      assert.equal(r.err, null);
      const row = await owner.query('SELECT account_id FROM fax_jobs WHERE id = $1', [r.id]);
      assert.equal(row.rows[0]?.account_id, r.acc);
    }
    assert.ok(gc.stats.batches < 30, `requests shared transactions (${gc.stats.batches} batches)`);
    assert.equal(gc.stats.items, 26);
  });

  it('a failing write rolls back its batch; the others are retried alone and land once', async () => {
    const gc = new GroupCommit<JobWrite>(api, { maxBatch: 50, concurrency: 1 }, intakeFlush(noScheduler));
    const before = (await owner.query('SELECT count(*)::int AS n FROM fax_jobs')).rows[0].n as number;
    const bad = new Set([3, 8]);
    const reqs = Array.from({ length: 12 }, (_, i) => {
      // 3 violates a CHECK constraint; 8 tries to write a row for another account (RLS WITH CHECK).
      const j =
        i === 3
          ? job(a.account_id, { faxQuality: 'ultra' as 'hd' })
          : i === 8
            ? job(b.account_id)
            : job(a.account_id);
      return gc
        .run(a.account_id, async () => ({ write: { job: j, docs: [] }, value: j.id }))
        .then(
          (id) => ({ i, id, err: null as unknown }),
          (err: unknown) => ({ i, id: null, err }),
        );
    });
    const res = await Promise.all(reqs);
    for (const r of res) {
      if (bad.has(r.i)) {
        assert.ok(r.err instanceof Error, `request ${r.i} fails`);
        assert.match((r.err as Error).message, r.i === 3 ? /check constraint/ : /row-level security/);
      } else assert.equal(r.err, null, `request ${r.i}: ${String(r.err)}`);
    }
    const after = (await owner.query('SELECT count(*)::int AS n FROM fax_jobs')).rows[0].n as number;
    assert.equal(after - before, 10);
    const ids = res.filter((r) => r.id).map((r) => r.id);
    const found = await owner.query('SELECT count(*)::int AS n FROM fax_jobs WHERE id = ANY($1::uuid[])', [
      ids,
    ]);
    assert.equal(found.rows[0].n, 10);
  });
});
