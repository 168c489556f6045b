// The mail gateway's modes not covered by mail.test.ts (issue 30; docs/mail.md): a number's
// email_attach "link" (a link that carries no content and needs the account's sign-in) and "none";
// the body setting "page" (the mail's text is a first page of its own: the fax has one page more);
// receipts "failures" (no receipt, no success mail, a failure mail) and "none" (nothing at all).
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createLogger } from '../src/log.ts';
import { PgReceivedFaxSink } from '../src/receive/sink.ts';
import { openJobOptions } from '../src/db/sealed-columns.ts';
import { twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { makeFaxTiff } from './support/faxtiff.ts';
import { eventually } from './support/harness.ts';
import { lastReply, startCapture, swaks, type Capture } from './support/mail.ts';
import { makePdf } from './support/pdf.ts';

const DOMAIN = 'fax.test';

describe('mail gateway modes: fax to email as link or notice, body page, receipts failures and none', () => {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-mail-modes-'));
  const pdf = join(dir, 'letter.pdf');
  let t: TwoAccounts;
  let capture: Capture;
  let port: number;

  before(async () => {
    capture = await startCapture();
    writeFileSync(pdf, await makePdf(1));
    t = await twoAccounts({
      SMTP_LISTEN: '127.0.0.1:0',
      MAIL_DOMAIN: DOMAIN,
      SMTP_RELAY: `smtp://127.0.0.1:${capture.port}`,
      MAIL_POLL_MS: '100',
      MAIL_LINK_BASE: 'https://fax.clinic.test/',
    });
    port = t.s.running.smtp!.port;
    for (const [token, address] of [
      [t.tokenA, 'doctor@clinic.test'],
      [t.tokenB, '*@lab.test'],
    ] as const) {
      const r = await t.api('POST', '/v1/mail-senders', token, { address });
      assert.equal(r.http, 200, JSON.stringify(r.body));
    }
  });
  after(async () => {
    await t?.close();
    await capture?.close();
  });

  const receive = async (numberIndex: number, attach: 'link' | 'none', to: string) => {
    const numbers = await t.api('GET', '/v1/numbers?limit=5', t.tokenA);
    const n = numbers.body.data[numberIndex];
    const patch = await t.api('PATCH', `/v1/numbers/${n.id}`, t.tokenA, {
      email_to: [to],
      email_attach: attach,
    });
    assert.equal(patch.http, 200, JSON.stringify(patch.body));
    const pool = new pg.Pool({ connectionString: t.s.cfg.DATABASE_URL, max: 2 });
    try {
      const sink = new PgReceivedFaxSink({ db: pool, log: createLogger('silent') });
      const rec = await sink.begin({
        accountId: t.a.account_id,
        numberId: n.id,
        to: n.number,
        from: '+15550002222',
        stationId: n.number,
        callId: `mail-modes-${attach}@test`,
      });
      await rec.complete(
        {
          ok: true,
          code: 0,
          text: 'OK',
          pages: 1,
          bitRate: 14400,
          ecm: true,
          remoteIdent: '+15550002222',
          transport: 't38',
          durationMs: 10_000,
        },
        makeFaxTiff(1, 'standard'),
      );
    } finally {
      await pool.end();
    }
    await eventually(async () => capture.messages.some((m) => m.envelopeTo.includes(to)));
    return capture.messages.find((m) => m.envelopeTo.includes(to))!;
  };

  it('email_attach "link": a link to the received fax, no document; the link needs the account’s sign-in', async () => {
    const m = await receive(1, 'link', 'records@clinic.test');
    assert.equal(m.mail.subject, 'Fax from +15550002222, 1 page');
    assert.equal(m.mail.attachments.length, 0, 'no document in the mail');
    const link = /https:\/\/fax\.clinic\.test(\/v1\/received-faxes\/([0-9a-f-]{36}))\b/.exec(
      m.mail.text ?? '',
    );
    assert.ok(link, `a link under MAIL_LINK_BASE in: ${m.mail.text}`);
    assert.match(m.mail.text ?? '', /sign in required/);
    // The link's path on this service (MAIL_LINK_BASE names the public address): nothing without sign-in.
    const anonymous = await fetch(`${t.s.url}${link[1]}`);
    assert.equal(anonymous.status, 401, 'no content without sign-in');
    assert.doesNotMatch(await anonymous.text(), /%PDF|II\*/);
    const signedIn = await t.api('GET', `/v1/received-faxes/${link[2]}`, t.tokenA);
    assert.equal(signedIn.http, 200);
    assert.equal(signedIn.body.data.id, link[2]);
    const other = await t.api('GET', `/v1/received-faxes/${link[2]}`, t.tokenB);
    assert.equal(other.http, 404, 'another account’s key does not open it');
  });

  it('email_attach "none": only that a fax arrived, with its id', async () => {
    const m = await receive(2, 'none', 'notice@clinic.test');
    assert.equal(m.mail.attachments.length, 0);
    assert.match(m.mail.text ?? '', /Fax id: [0-9a-f-]{36}\./);
    assert.doesNotMatch(m.mail.text ?? '', /http/);
  });

  const send = (from: string, to: string[], messageId: string) =>
    swaks([
      '--server',
      `127.0.0.1:${port}`,
      '--from',
      from,
      `--to=${to.map((n) => `${n}@${DOMAIN}`).join(',')}`,
      '--header',
      'Subject: Discharge letter',
      '--header',
      `Message-Id: <${messageId}>`,
      '--body',
      'Dear colleague,\nplease find the discharge letter attached.',
      '--attach-type',
      'application/pdf',
      '--attach',
      `@${pdf}`,
    ]);
  const jobsOf = async (messageId: string) => {
    const rows = (
      await t.owner.query<{
        id: string;
        account_id: string;
        state: string;
        fax_number: string;
        page_count: number | null;
        options: any;
      }>(
        `SELECT id, account_id, state, fax_number, page_count, options FROM fax_jobs WHERE options->>'message_id' = $1
          ORDER BY broadcast_position NULLS FIRST`,
        [messageId],
      )
    ).rows;
    // The cover fields are sealed in the row (docs/encryption.md): opened as the service reads them.
    for (const r of rows) r.options = await openJobOptions(t.owner, r.account_id, r.id, r.options);
    return rows;
  };
  const final = (s: string) => ['delivered', 'failed', 'cancelled', 'rejected', 'unknown'].includes(s);
  /** Every mail queued for the message has been handled (sent, or found not wanted). */
  const outboxDone = async (messageId: string, atLeast: number) => {
    const r = await t.owner.query<{ n: number; open: number }>(
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE sent_at IS NULL)::int AS open
         FROM mail_outbox WHERE message_id = $1`,
      [messageId],
    );
    return r.rows[0]!.n >= atLeast && r.rows[0]!.open === 0;
  };
  const mailsTo = (messageId: string) =>
    capture.messages.filter((m) => m.mail.inReplyTo === `<${messageId}>`);

  it('body "page": the subject and text become a first page of their own (one page more), not the cover', async () => {
    const s = await t.api('PATCH', '/v1/mail-settings', t.tokenA, { body: 'page', receipts: 'none' });
    assert.equal(s.http, 200, JSON.stringify(s.body));
    const r = await send('doctor@clinic.test', ['15550100000'], 'page-1@clinic.test');
    assert.match(lastReply(r.out), /250 .*Accepted: 1 fax/, r.out);
    const [job] = await jobsOf('page-1@clinic.test');
    assert.ok(job);
    assert.equal(job.options.subject, undefined, 'not on the cover');
    const docs = await t.owner.query<{ file_name: string }>(
      'SELECT file_name FROM fax_documents WHERE job_id = $1 ORDER BY position',
      [job.id],
    );
    assert.deepEqual(
      docs.rows.map((d) => d.file_name),
      ['message.pdf', 'letter.pdf'],
    );
    await eventually(async () => final((await jobsOf('page-1@clinic.test'))[0]!.state), 180_000);
    const done = (await jobsOf('page-1@clinic.test'))[0]!;
    assert.equal(done.state, 'delivered');
    assert.equal(done.page_count, 2, 'the text page and the one-page letter');
  });

  it('receipts "none": neither a receipt nor a result, delivered or failed', async () => {
    const r = await send('doctor@clinic.test', ['15550100005'], 'none-1@clinic.test');
    assert.match(lastReply(r.out), /250 /, r.out);
    await eventually(async () => (await jobsOf('none-1@clinic.test')).every((j) => final(j.state)), 180_000);
    assert.equal((await jobsOf('none-1@clinic.test'))[0]!.state, 'failed');
    await eventually(() => outboxDone('none-1@clinic.test', 1));
    await eventually(() => outboxDone('page-1@clinic.test', 1));
    assert.deepEqual(mailsTo('none-1@clinic.test'), []);
    assert.deepEqual(mailsTo('page-1@clinic.test'), []);
  });

  it('receipts "failures": no receipt and no mail for the delivered fax, one for the failed one', async () => {
    const s = await t.api('PATCH', '/v1/mail-settings', t.tokenB, { receipts: 'failures' });
    assert.equal(s.http, 200, JSON.stringify(s.body));
    const r = await send('tech@lab.test', ['15550100000', '15550100005'], 'fail-1@lab.test');
    assert.match(lastReply(r.out), /250 .*Accepted: 2 faxes/, r.out);
    await eventually(async () => (await jobsOf('fail-1@lab.test')).every((j) => final(j.state)), 180_000);
    const jobs = await jobsOf('fail-1@lab.test');
    assert.deepEqual(
      jobs.map((j) => [j.fax_number, j.state]),
      [
        ['+15550100000', 'delivered'],
        ['+15550100005', 'failed'],
      ],
    );
    await eventually(() => outboxDone('fail-1@lab.test', 2));
    const mails = mailsTo('fail-1@lab.test');
    assert.deepEqual(
      mails.map((m) => m.mail.subject),
      ['Fax not delivered to +15550100005'],
    );
    assert.match(mails[0]!.mail.text ?? '', /Reason: /);
    assert.ok(
      mails[0]!.mail.attachments.some((a) => a.mimeType === 'application/pdf'),
      'the report',
    );
  });
});
