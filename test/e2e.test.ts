// The first end-to-end path, against the real PostgreSQL and RabbitMQ: auth → send → RabbitMQ →
// worker → simulated line → delivered, readable at GET /v1/faxes/{job_id}, scoped to the account.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

describe('end-to-end: send a fax', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  before(async () => {
    s = await startService();
  });
  after(async () => {
    await s.dropAll();
  });

  it('delivers a one-page Base64 PDF and shows its state history', async () => {
    const seed = await seedAccount(s);
    const token = await tokenFor(s.url, seed.api_key);
    const file_data = await makePdfBase64(1);
    const sent = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: { fax_number: '+15551234567', fax_data: [{ file_name: 'letter.pdf', file_data }] },
      headers: { 'x-request-id': 'req-e2e-1' },
    });
    assert.equal(sent.http, 200);
    assert.equal(sent.body.status, 1);
    assert.equal(sent.body.message, 'Fax processed for sending');
    const jobId = sent.body.data.job_id as string;
    assert.match(jobId, /^[0-9a-f-]{36}$/);

    const done = await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${jobId}`, { token });
      return r.body.data?.state === 'delivered' ? r : null;
    });
    const job = done.body.data;
    assert.equal(job.page_count, 1);
    assert.equal(job.pages_sent, 1);
    assert.equal(job.attempts, 1);
    assert.equal(job.caller_id, seed.numbers[0], 'caller_id comes from the default Fax Default');
    assert.equal(job.fax_quality, 'standard');
    assert.deepEqual(
      job.history.map((h: { to: string }) => h.to),
      ['accepted', 'preparing', 'queued', 'dialling', 'sending', 'sending', 'delivered'],
    );
    assert.ok(job.completed_at);

    // The request id travels into the worker's log lines about this job.
    const workerLines = s.logs.lines.filter((l) => l.includes(jobId) && l.includes('send-worker'));
    assert.ok(workerLines.length > 0);
    assert.ok(workerLines.every((l) => l.includes('req-e2e-1')));

    // Another account cannot see it.
    const other = await seedAccount(s);
    const otherToken = await tokenFor(s.url, other.api_key);
    const hidden = await call(s.url, 'GET', `/v1/faxes/${jobId}`, { token: otherToken });
    assert.equal(hidden.http, 404);
    assert.deepEqual(hidden.body, { status: 0, message: 'Fax not found' });
  });

  it('fails a document that is not a readable PDF with a clear reason', async () => {
    const seed = await seedAccount(s);
    const token = await tokenFor(s.url, seed.api_key);
    const broken = Buffer.from('%PDF-1.7\nthis is not really a pdf').toString('base64');
    const sent = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: { fax_number: '+15551234567', fax_data: [{ file_name: 'broken.pdf', file_data: broken }] },
    });
    assert.equal(sent.http, 200);
    const job = await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${sent.body.data.job_id}`, { token });
      return r.body.data?.state === 'failed' ? r.body.data : null;
    });
    assert.equal(job.failure.code, 'pdf_broken');
    assert.match(job.failure.reason, /broken\.pdf/);
  });
});
