// The entry points as real processes: `npm start`'s all-in-one process serves and sends, and SIGTERM
// drains it (a fax in the middle of its call still completes) and exits 0.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { AMQP_URL, createDatabase, deleteTopology, eventually, queuePrefix } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';
import { startProcess } from './support/process.ts';
import { query } from './support/transmission.ts';
import type { TestService } from './support/harness.ts';

describe('processes', () => {
  let db: Awaited<ReturnType<typeof createDatabase>>;
  const prefix = queuePrefix('p');
  before(async () => {
    db = await createDatabase();
  });
  after(async () => {
    await deleteTopology(prefix);
    await db.drop();
  });

  it('all-in-one process sends a fax and drains on SIGTERM', async () => {
    const p = startProcess('src/main.ts', {
      DATABASE_URL: db.url,
      AMQP_URL,
      QUEUE_PREFIX: prefix,
      PORT: '0',
      HOST: '127.0.0.1',
      // About 2 s of line time for one page, so SIGTERM lands mid-call.
      SIM_SPEEDUP: '8',
      LOG_LEVEL: 'info',
    });
    try {
      const started = await p.waitFor(/"msg":"faxline started"/);
      const url = (JSON.parse(started) as { address: string }).address;
      const svc = { cfg: { DATABASE_URL: db.url } } as TestService;
      const seed = await seedAccount(svc);
      const token = await tokenFor(url, seed.api_key);
      const r = await call(url, 'POST', '/v1/faxes/send', {
        token,
        body: {
          fax_number: '+15551110000',
          fax_data: [{ file_name: 'a.pdf', file_data: await makePdfBase64(1) }],
        },
      });
      assert.equal(r.http, 200);
      const jobId = r.body.data.job_id as string;
      // One page is about 2.9 s of line time at SIM_SPEEDUP=8: SIGTERM lands mid-call, once the
      // call is on the line.
      await eventually(async () => {
        const rows = await query<{ state: string }>(db.url, 'SELECT state FROM fax_jobs WHERE id = $1', [
          jobId,
        ]);
        return ['dialling', 'sending'].includes(rows[0]?.state ?? '');
        // Its first preparation starts the process's render and check processes: on a busy machine
        // (CI under load) that alone took more than 10 s.
      }, 60_000);
      assert.ok(!p.lines.some((l) => l.includes(jobId) && l.includes('fax delivered')), 'not yet delivered');
      p.child.kill('SIGTERM');
      const exit = await p.exited;
      assert.equal(exit.code, 0, p.lines.slice(-10).join('\n'));
      assert.ok(p.lines.some((l) => l.includes('"msg":"stopped"')));
      // The call in progress completed before the process left.
      const delivered = p.lines.find((l) => l.includes(jobId) && l.includes('"msg":"fax delivered"'));
      assert.ok(delivered, 'the in-flight fax was delivered during the drain');
    } finally {
      if (p.child.exitCode === null) p.child.kill('SIGKILL');
    }
  });
});
