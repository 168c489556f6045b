// Security review: the shared render of a broadcast's documents (document_renders) is read by the
// job that holds the documents AND its account, so a key naming another account's job never hands
// that account's pages to this one (defence in depth: the key is built from our own job row today).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PgSharedRenders, type SharedBody } from '../src/documents/render/shared.ts';
import { insertJob } from '../src/jobs/repo.ts';
import { jobFixture, seededDatabase, type SeededDatabase } from './support/jobs.ts';

const body = (byte: number): SharedBody => ({
  documentPages: 1,
  pages: [{ data: new Uint8Array([byte, byte, byte]), width: 1728, height: 3 }],
});

describe('document_renders: one account never reuses another account render', () => {
  let db: SeededDatabase;
  before(async () => {
    db = await seededDatabase(2);
  });
  after(async () => {
    await db.close();
  });

  it('reads a stored render only under its own account', async () => {
    const [a, b] = db.accounts;
    const job = jobFixture(a!.account_id);
    await insertJob(db.owner, job, []);
    const renders = new PgSharedRenders(db.owner);
    const signal = AbortSignal.timeout(10_000);
    const first = await renders.once(
      { jobId: job.id, accountId: a!.account_id, quality: 'standard' },
      async () => body(1),
      signal,
    );
    assert.equal(first.reused, false);
    const again = await renders.once(
      { jobId: job.id, accountId: a!.account_id, quality: 'standard' },
      async () => body(2),
      signal,
    );
    assert.equal(again.reused, true);
    assert.deepEqual([...again.pages[0]!.data], [1, 1, 1]);
    // Another account naming the same job: account A's pages are not returned.
    const other = await renders.once(
      { jobId: job.id, accountId: b!.account_id, quality: 'standard' },
      async () => body(9),
      signal,
    );
    assert.equal(other.reused, false);
    assert.deepEqual([...other.pages[0]!.data], [9, 9, 9]);
  });
});
