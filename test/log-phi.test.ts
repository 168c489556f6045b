// Logs without PHI (issue 32, part 5): with LOG_PHI unset, a full run at info level (a fax sent and
// delivered, a fax whose document is refused, an inbound call answered) writes no fax number, caller
// id, name, subject or file name. With LOG_PHI=true the same line about an inbound call keeps its
// number: the switch is what censors it.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import { createLogger, scrubLine } from '../src/log.ts';
import { PgReceivedFaxSink } from '../src/receive/sink.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, LogCapture, startService } from './support/harness.ts';

const NUMBER = '+15558810234';
const names = { sender: 'Dr Ottoline Brisk', recipient: 'Wendell Farthingale' };
const subject = 'Biopsy report Farthingale';
const fileName = 'farthingale-biopsy.pdf';

async function pdfBase64(text: string): Promise<string> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  doc.addPage([612, 792]).drawText(text, { x: 72, y: 700, size: 14, font });
  return Buffer.from(await doc.save()).toString('base64');
}

describe('logs without PHI', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let pool: pg.Pool;
  before(async () => {
    s = await startService({ env: { LOG_LEVEL: 'info' } });
    pool = new pg.Pool({ connectionString: s.cfg.DATABASE_URL, max: 2 });
  });
  after(async () => {
    await pool.end();
    await s.dropAll();
  });

  it('writes no fax number, caller id, name, subject or file name at info level by default', async () => {
    assert.equal(s.cfg.LOG_PHI, false, 'LOG_PHI is off unless set');
    const seed = await seedAccount(s);
    const callerId = seed.numbers[0]!;
    const token = await tokenFor(s.url, seed.api_key);
    const body = {
      fax_number: NUMBER,
      subject,
      sender_name: names.sender,
      recipient_name: names.recipient,
      fax_data: [{ file_name: fileName, file_data: await pdfBase64('Farthingale biopsy') }],
    };
    const sent = await call(s.url, 'POST', '/v1/faxes/send', { token, body });
    assert.equal(sent.http, 200);
    const broken = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        ...body,
        fax_data: [{ file_name: fileName, file_data: Buffer.from('%PDF-1.7 no').toString('base64') }],
      },
    });
    assert.equal(broken.http, 200);
    for (const [id, state] of [
      [sent.body.data.job_id, 'delivered'],
      [broken.body.data.job_id, 'failed'],
    ])
      await eventually(async () => {
        const r = await call(s.url, 'GET', `/v1/faxes/${id}`, { token });
        return r.body.data?.state === state;
      });
    // An inbound call to the account's number, answered by the service's own logger.
    const sink = new PgReceivedFaxSink({ db: pool, log: s.running.log });
    await sink.begin({
      accountId: seed.account_id,
      numberId: null,
      to: callerId,
      from: NUMBER,
      stationId: callerId,
      callId: 'call-phi-1',
    });
    await eventually(async () => s.logs.text.includes('inbound fax call answered'));

    const text = s.logs.text;
    assert.ok(text.includes(sent.body.data.job_id), 'the fax was logged (by its id)');
    for (const n of [NUMBER, callerId])
      for (const form of [n, n.slice(1), n.slice(2)])
        assert.ok(!text.includes(form), `number ${form} in the log`);
    for (const w of [names.sender, names.recipient, 'Farthingale', subject, fileName, 'farthingale'])
      assert.ok(!text.includes(w), `"${w}" in the log`);
  });

  it('keeps them with LOG_PHI=true, and the line scrubber censors numbers and SIP users in free text', async () => {
    const cap = new LogCapture();
    const log = createLogger('info', cap, { phi: true });
    const sink = new PgReceivedFaxSink({ db: pool, log });
    const seed = await seedAccount(s);
    await sink.begin({
      accountId: seed.account_id,
      numberId: null,
      to: seed.numbers[0]!,
      from: null,
      stationId: seed.numbers[0]!,
      callId: 'call-phi-2',
    });
    assert.ok(cap.text.includes(seed.numbers[0]!), 'LOG_PHI=true writes the called number');
    assert.equal(
      scrubLine(
        '{"err":"INVITE sip:+15551234567@10.0.0.1;user=phone refused by <sip:alice@x>, size 10485760"}',
      ),
      '{"err":"INVITE sip:[redacted]@10.0.0.1;user=phone refused by <sip:[redacted]@x>, size 10485760"}',
    );
  });
});
