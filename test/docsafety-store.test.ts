// Document storage: privacy deletion on demand (the admin CLI, as an operator runs it) and the
// retention purge, against the real PostgreSQL behind a running service.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { newId } from '../src/domain/ids.ts';
import { DeleteRefused, deleteDocuments } from '../src/admin/delete-documents.ts';
import { PgDocumentStore } from '../src/documents/store.ts';
import { retentionPass } from '../src/accounts/retention.ts';
import { insertJob } from '../src/jobs/repo.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { makePdf, makePdfBase64 } from './support/pdf.ts';
import { jobFixture } from './support/jobs.ts';

type Service = Awaited<ReturnType<typeof startService>>;

function admin(s: Service, args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, ['src/admin/cli.ts', ...args], {
    env: { ...process.env, DATABASE_URL: s.cfg.DATABASE_URL, LOG_LEVEL: 'silent', ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: r.status, out: r.stdout.trim() ? JSON.parse(r.stdout) : null, err: r.stderr };
}

describe('document store: deletion on demand and retention', () => {
  let s: Service;
  let db: pg.Pool;
  let token: string;
  let accountId: string;
  before(async () => {
    s = await startService();
    db = new pg.Pool({ connectionString: s.cfg.DATABASE_URL, max: 2 });
    db.on('error', () => undefined); // teardown drops the database
    const seed = await seedAccount(s);
    accountId = seed.account_id;
    token = await tokenFor(s.url, seed.api_key);
  });
  after(async () => {
    await db.end();
    await s.dropAll();
  });

  async function finished(id: string) {
    return eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${id}`, { token });
      return ['delivered', 'failed'].includes(r.body.data?.state) ? r.body.data : null;
    });
  }

  /** A job recorded straight in the database, in the given state, finished `daysAgo` days ago. */
  async function job(
    state: string,
    daysAgo: number | null,
    sourceJobId: string | null = null,
  ): Promise<string> {
    const id = newId();
    await insertJob(
      db,
      jobFixture(accountId, {
        id,
        kind: sourceJobId ? 'forward' : 'send',
        sourceJobId,
        state: state as never,
        dispatched: true,
      }),
      sourceJobId ? [] : [{ fileName: 'private.pdf', fileUrl: null, content: await makePdf(1) }],
    );
    if (daysAgo !== null)
      await db.query(`UPDATE fax_jobs SET completed_at = now() - make_interval(days => $2) WHERE id = $1`, [
        id,
        daysAgo,
      ]);
    return id;
  }

  async function docs(jobId: string) {
    return (
      await db.query<{ content: Buffer | null; file_name: string; deleted_reason: string | null }>(
        'SELECT content, file_name, deleted_reason FROM fax_documents WHERE job_id = $1',
        [jobId],
      )
    ).rows;
  }

  it('delete-documents removes a sent fax’s documents for it and its forwards; a later forward fails', async () => {
    const sent = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'patient-record.pdf', file_data: await makePdfBase64(1) }],
      },
    });
    const original = sent.body.data.job_id as string;
    assert.equal((await finished(original)).state, 'delivered');
    const fwd = await call(s.url, 'POST', '/v1/faxes/forward', {
      token,
      body: { job_id: original, fax_number: '+15557654321' },
    });
    const forward = fwd.body.data.job_id as string;
    assert.equal((await finished(forward)).state, 'delivered');
    const renders = async () =>
      Number(
        (
          await db.query<{ n: string }>(
            'SELECT count(*) AS n FROM fax_renders WHERE job_id = ANY($1::uuid[])',
            [[original, forward]],
          )
        ).rows[0]!.n,
      );
    assert.equal(await renders(), 2, 'both faxes were rendered');

    const r = admin(s, ['delete-documents', '--job', forward]);
    assert.equal(r.status, 0, r.err);
    assert.equal(r.out.documents, 1);
    assert.deepEqual([...r.out.jobs].sort(), [original, forward].sort());
    const [d] = await docs(original);
    assert.equal(d!.content, null);
    assert.equal(d!.file_name, '(deleted)');
    assert.equal(d!.deleted_reason, 'request');
    assert.equal(await renders(), 0, 'the rendered fax images are deleted with the documents');
    assert.equal(admin(s, ['delete-documents', '--job', original]).out.documents, 0, 'idempotent');

    // The job itself stays readable; a forward of it has nothing left to send.
    assert.equal((await call(s.url, 'GET', `/v1/faxes/${original}`, { token })).body.data.state, 'delivered');
    const again = await call(s.url, 'POST', '/v1/faxes/forward', {
      token,
      body: { job_id: original, fax_number: '+15557654321' },
    });
    const failed = await finished(again.body.data.job_id as string);
    assert.equal(failed.failure.code, 'document_missing');
  });

  it('refuses to delete under a fax still in progress unless forced, and says why', async () => {
    const active = await job('accepted', null);
    const refused = admin(s, ['delete-documents', '--job', active]);
    assert.equal(refused.status, 1);
    assert.match(
      refused.err,
      new RegExp(`job ${active} is accepted: cancel it or wait until it ends, or pass --force`),
    );
    assert.notEqual((await docs(active))[0]!.content, null);
    const store = new PgDocumentStore(db);
    assert.equal((await deleteDocuments(db, store, { jobId: active, force: true })).documents, 1);
    assert.equal((await docs(active))[0]!.content, null);

    await assert.rejects(deleteDocuments(db, store, { jobId: 'nope' }), DeleteRefused);
    await assert.rejects(deleteDocuments(db, store, { jobId: newId() }), /no job/);
    await assert.rejects(deleteDocuments(db, store, {}), /name a job/);
  });

  it('purges documents of faxes finished before the retention period, waiting for their forwards', async () => {
    const old = await job('delivered', 40);
    const recent = await job('failed', 5);
    const oldWithActiveForward = await job('delivered', 40);
    await job('accepted', null, oldWithActiveForward);
    const oldWithRecentForward = await job('delivered', 40);
    await job('delivered', 2, oldWithRecentForward);
    const oldWithOldForward = await job('delivered', 40);
    await job('delivered', 35, oldWithOldForward);
    const unfinished = await job('preparing', null);

    const r = admin(s, ['purge-documents'], { DOCUMENT_RETENTION_DAYS: '30' });
    assert.equal(r.status, 0, r.err);
    assert.ok(r.out.purged >= 2);
    const purged = async (id: string) => (await docs(id))[0]!.content === null;
    assert.equal(await purged(old), true);
    assert.equal((await docs(old))[0]!.deleted_reason, 'retention');
    assert.equal(await purged(oldWithOldForward), true);
    assert.equal(await purged(recent), false);
    assert.equal(await purged(oldWithActiveForward), false);
    assert.equal(await purged(oldWithRecentForward), false);
    assert.equal(await purged(unfinished), false);
  });

  it('the retention pass purges with the installation default', async () => {
    const old = await job('cancelled', 3);
    const r = await retentionPass(db, { now: new Date(), defaultDays: 1, auditDays: 2192 });
    assert.ok(r.faxes >= 1);
    assert.equal((await docs(old))[0]!.content, null);
  });

  it('delete-documents --account removes every remaining document of an account', async () => {
    const a = await job('delivered', 1);
    const b = await job('failed', 0);
    const r = await deleteDocuments(db, new PgDocumentStore(db), { accountId, force: true });
    assert.ok(r.documents >= 2);
    assert.equal((await docs(a))[0]!.content, null);
    assert.equal((await docs(b))[0]!.content, null);
    const left = await db.query('SELECT 1 FROM fax_documents WHERE account_id = $1 AND content IS NOT NULL', [
      accountId,
    ]);
    assert.equal(left.rowCount, 0);
  });
});
