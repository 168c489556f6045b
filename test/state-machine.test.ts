// The job state machine is enforced where states are written: transition() moves a job along every
// edge of the state table (domain/states.ts) and refuses every other move, leaving the row as it was.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jobStates, canTransition } from '../src/domain/states.ts';
import { getJob, insertJob, transition } from '../src/jobs/repo.ts';
import { jobFixture, seededDatabase, type SeededDatabase } from './support/jobs.ts';

describe('job state machine', () => {
  let sdb: SeededDatabase;
  before(async () => {
    sdb = await seededDatabase();
  });
  after(async () => {
    await sdb.close();
  });

  it('every allowed edge moves the job; every other pair is refused and changes nothing', async () => {
    const account = sdb.accounts[0]!.account_id;
    let allowed = 0;
    let refused = 0;
    for (const from of jobStates) {
      for (const to of jobStates) {
        const job = jobFixture(account, { scheduledAt: new Date(Date.now() + 3_600_000) });
        await insertJob(sdb.owner, job, []);
        await sdb.owner.query('UPDATE fax_jobs SET state = $2 WHERE id = $1', [job.id, from]);
        if (canTransition(from, to)) {
          const row = await transition(sdb.owner, job.id, to, { from: [from] });
          assert.equal(row?.state, to, `${from} → ${to} is an edge: the job moves`);
          allowed++;
        } else {
          await assert.rejects(
            transition(sdb.owner, job.id, to, { from: [from] }),
            /not a transition of the state table/,
            `${from} → ${to} is not an edge: refused`,
          );
          assert.equal(
            (await getJob(sdb.owner, job.id))?.state,
            from,
            `${from} → ${to}: the row is unchanged`,
          );
          refused++;
        }
      }
    }
    assert.equal(allowed + refused, jobStates.length ** 2);
    assert.ok(allowed > 0 && refused > 0, `${allowed} edges, ${refused} refusals`);
  });

  it('a list of states to move from is narrowed to the edges of the table', async () => {
    const account = sdb.accounts[0]!.account_id;
    const job = jobFixture(account);
    await insertJob(sdb.owner, job, []);
    await sdb.owner.query(`UPDATE fax_jobs SET state = 'unknown' WHERE id = $1`, [job.id]);
    const from = ['dialling', 'sending', 'unknown'] as const;
    assert.equal(
      await transition(sdb.owner, job.id, 'retry_waiting', { from }),
      null,
      'unknown → retry_waiting is no edge',
    );
    assert.equal((await getJob(sdb.owner, job.id))?.state, 'unknown');
    assert.equal(
      (await transition(sdb.owner, job.id, 'failed', { from }))?.state,
      'failed',
      'unknown → failed is one',
    );
  });

  it('without `from`, a transition starts only from the states that lead to its target', async () => {
    const account = sdb.accounts[0]!.account_id;
    const job = jobFixture(account);
    await insertJob(sdb.owner, job, []);
    await sdb.owner.query(`UPDATE fax_jobs SET state = 'delivered' WHERE id = $1`, [job.id]);
    assert.equal(await transition(sdb.owner, job.id, 'queued'), null, 'delivered does not lead to queued');
    assert.equal((await getJob(sdb.owner, job.id))?.state, 'delivered');
  });
});
