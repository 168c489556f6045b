// The mail gateway (issue 30) over real SMTP on loopback: swaks (Debian) sends to the listener, the
// faxes run on the simulated line, and what faxline mails back arrives at a capture server (SMTP_RELAY).
// Allowed and unknown senders, broadcast, TIFF, the Message-ID as idempotency key, refusals with a
// reason, RCPT of another domain, limits (messages per minute, size), received faxes by mail, the
// settings API, and the outgoing queue surviving a restart with the relay down.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { openJobOptions } from '../src/db/sealed-columns.ts';
import { entriesFor, faxNumberOf, senderEntry, subjectWithoutToken } from '../src/domain/mail.ts';
import { createLogger } from '../src/log.ts';
import { PgReceivedFaxSink } from '../src/receive/sink.ts';
import { twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { makeFaxTiff } from './support/faxtiff.ts';
import { createDatabase, eventually, startService } from './support/harness.ts';
import { lastReply, startCapture, swaks, type Capture } from './support/mail.ts';
import { makePdf } from './support/pdf.ts';

const DOMAIN = 'fax.test';
const dir = mkdtempSync(join(tmpdir(), 'faxline-mail-'));
const file = (name: string, data: Buffer) => {
  const p = join(dir, name);
  writeFileSync(p, data);
  return p;
};

describe('mail addresses (pure)', () => {
  it('reads the number of <number>@<fax domain> written as people write numbers', () => {
    const cases: [string, string | null][] = [
      ['+15550100000@fax.test', '+15550100000'],
      ['15550100000@FAX.test', '+15550100000'],
      ['+1 555-010.0000@fax.test', '+15550100000'],
      ['(1) 555 010 0000@fax.test', '+15550100000'],
      ['frontdesk@fax.test', null],
      ['+15550100000@other.test', null],
      ['+0555@fax.test', null],
      ['+1234567890123456@fax.test', null],
    ];
    for (const [a, want] of cases) assert.equal(faxNumberOf(a, 'fax.test'), want, a);
  });
  it('matches a sender by its address, then by *@domain; keeps entries lower-case', () => {
    assert.deepEqual(entriesFor('Doctor@Clinic.test'), ['doctor@clinic.test', '*@clinic.test']);
    assert.equal(senderEntry(' *@Clinic.Example '), '*@clinic.example');
    assert.equal(senderEntry('doctor@clinic'), null);
    assert.equal(senderEntry('a*b@clinic.example'), null);
  });
  it('takes the subject token out of the subject, or refuses a subject without it', () => {
    assert.equal(subjectWithoutToken('[k7Qx9pLm2] Lab results', '[k7Qx9pLm2]'), 'Lab results');
    assert.equal(subjectWithoutToken('Lab results', 'k7Qx9pLm2'), null);
    assert.equal(subjectWithoutToken('Lab results', null), 'Lab results');
  });
});

describe('mail gateway: email to fax and fax to email', () => {
  let t: TwoAccounts;
  let capture: Capture;
  let port: number;
  let pdf: string;

  before(async () => {
    capture = await startCapture();
    t = await twoAccounts({
      SMTP_LISTEN: '127.0.0.1:0',
      MAIL_DOMAIN: DOMAIN,
      SMTP_RELAY: `smtp://127.0.0.1:${capture.port}`,
      MAIL_POLL_MS: '100',
      MAIL_MESSAGES_PER_MINUTE: '6',
      SMTP_MAX_BYTES: String(2 * 1024 * 1024),
    });
    port = t.s.running.smtp!.port;
    pdf = file('letter.pdf', await makePdf(1));
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

  const send = (from: string, to: string[], extra: string[] = []) =>
    swaks([
      '--server',
      `127.0.0.1:${port}`,
      '--from',
      from,
      `--to=${to.join(',')}`,
      '--header',
      'Subject: Lab results',
      '--body',
      'Please see the attached results.',
      ...extra,
    ]);
  const jobsOf = async (messageId: string) => {
    const rows = (
      await t.owner.query<{
        id: string;
        account_id: string;
        state: string;
        fax_number: string;
        broadcast_id: string | null;
        options: any;
      }>(
        `SELECT id, account_id, state, fax_number, broadcast_id, options FROM fax_jobs WHERE options->>'message_id' = $1
          ORDER BY broadcast_position NULLS FIRST`,
        [messageId],
      )
    ).rows;
    // The cover fields are sealed in the row (docs/encryption.md): opened as the service reads them.
    for (const r of rows) r.options = await openJobOptions(t.owner, r.account_id, r.id, r.options);
    return rows;
  };
  /** Account A's audit events of sends by mail, newest first. */
  const mailAudit = async () =>
    (await t.api('GET', '/v1/audit-events?actor_type=mail_sender', t.tokenA)).body.data as {
      action: string;
      result: string;
      actor_id: string;
      ip: string;
      object_type: string | null;
      object_id: string | null;
    }[];
  const senderId = async (address: string) =>
    (await t.owner.query<{ id: string }>('SELECT id FROM mail_senders WHERE address = $1', [address])).rows[0]
      ?.id;
  const mailsAbout = (needle: string) =>
    capture.messages.filter((m) => `${m.mail.subject} ${m.mail.text}`.includes(needle));

  it('refuses RCPT of another domain and of a local part that is no number (no open relay)', async () => {
    const other = await send('doctor@clinic.test', ['someone@elsewhere.test'], ['--attach', `@${pdf}`]);
    assert.notEqual(other.code, 0);
    assert.match(other.out, /550 5\.7\.1 Relaying denied/);
    const word = await send('doctor@clinic.test', [`frontdesk@${DOMAIN}`], ['--attach', `@${pdf}`]);
    assert.match(word.out, /550 5\.1\.1 Not a fax number/);
  });

  it('an allowed sender’s PDF becomes a delivered fax; the receipt and the result with its report arrive', async () => {
    const r = await send(
      'doctor@clinic.test',
      [`1-555-010-0000@${DOMAIN}`],
      [
        '--header',
        'Message-Id: <pdf-1@clinic.test>',
        '--attach-type',
        'application/pdf',
        '--attach',
        `@${pdf}`,
      ],
    );
    assert.equal(r.code, 0, r.out);
    assert.match(lastReply(r.out), /250 .*Accepted: 1 fax/);
    // 250 came after the commit: the job exists now.
    const [job] = await jobsOf('pdf-1@clinic.test');
    assert.ok(job, 'a job with the message id');
    assert.equal(job.fax_number, '+15550100000');
    assert.equal(job.options.source, 'email');
    assert.equal(job.options.subject, 'Lab results', 'body setting cover: the subject on the cover');
    // Visible in the API as well.
    const view = await t.api('GET', `/v1/faxes/${job.id}`, t.tokenA);
    assert.equal(view.body.data.options.source, 'email');
    assert.equal(view.body.data.options.message_id, 'pdf-1@clinic.test');
    // In the audit trail: a send by the allowed-sender entry, from the SMTP client's address.
    const sent = (await mailAudit()).find((e) => e.object_id === job.id);
    assert.ok(sent, 'an audit event for the fax sent by mail');
    assert.deepEqual(
      [sent.action, sent.result, sent.actor_id, sent.ip, sent.object_type],
      ['fax.send', 'ok', await senderId('doctor@clinic.test'), '127.0.0.1', 'fax'],
    );
    await eventually(async () => (await jobsOf('pdf-1@clinic.test'))[0]?.state === 'delivered');
    await eventually(async () => mailsAbout(job.id).length >= 2);
    const receipt = mailsAbout(job.id).find((m) => m.mail.subject?.startsWith('Fax accepted'));
    assert.ok(receipt, 'the receipt');
    assert.deepEqual(receipt.envelopeTo, ['doctor@clinic.test']);
    const result = mailsAbout(job.id).find((m) => m.mail.subject === 'Fax delivered to +15550100000');
    assert.ok(result, `the result mail; got ${capture.messages.map((m) => m.mail.subject).join(' | ')}`);
    assert.equal(result.mail.inReplyTo, '<pdf-1@clinic.test>');
    const report = result.mail.attachments.find((a) => a.mimeType === 'application/pdf');
    assert.ok(report, 'the report attached');
    assert.equal(
      Buffer.from(report.content as ArrayBuffer)
        .subarray(0, 5)
        .toString('latin1'),
      '%PDF-',
    );
  });

  it('the same message again (a retried DATA) makes no second fax and no second receipt', async () => {
    const before = capture.messages.length;
    const r = await send(
      'doctor@clinic.test',
      [`15550100000@${DOMAIN}`],
      [
        '--header',
        'Message-Id: <pdf-1@clinic.test>',
        '--attach-type',
        'application/pdf',
        '--attach',
        `@${pdf}`,
      ],
    );
    assert.match(lastReply(r.out), /250 /, r.out);
    assert.equal((await jobsOf('pdf-1@clinic.test')).length, 1);
    const queued = await t.owner.query(
      `SELECT count(*)::int AS n FROM mail_outbox WHERE message_id = 'pdf-1@clinic.test'`,
    );
    assert.equal(queued.rows[0].n, 2, 'one receipt and one result, as before');
    assert.equal(capture.messages.length, before);
  });

  it('an unknown sender gets 250 and nothing: no fax, no mail; counted and logged without content', async () => {
    const jobs = await t.owner.query('SELECT count(*)::int AS n FROM fax_jobs');
    const mails = await t.owner.query('SELECT count(*)::int AS n FROM mail_outbox');
    const r = await send(
      'stranger@spam.test',
      [`15550100000@${DOMAIN}`],
      ['--header', 'Message-Id: <unknown-1@spam.test>', '--attach', `@${pdf}`],
    );
    assert.match(lastReply(r.out), /250 /, r.out);
    assert.equal((await t.owner.query('SELECT count(*)::int AS n FROM fax_jobs')).rows[0].n, jobs.rows[0].n);
    assert.equal(
      (await t.owner.query('SELECT count(*)::int AS n FROM mail_outbox')).rows[0].n,
      mails.rows[0].n,
    );
    const line = t.s.logs.lines.find((l) => l.includes('"reason":"unknown_sender"'));
    assert.ok(line, 'logged');
    assert.doesNotMatch(line, /Lab results|stranger|attached results/, 'without content or address');
    const m = await fetch(`${t.s.url}/metrics`).then((res) => res.text());
    assert.match(m, /faxline_mail_messages_total\{[^}]*outcome="unknown_sender"[^}]*\} 1/);
  });

  it('two numbers make a broadcast; a TIFF attachment works; a *@domain entry sends for its account', async () => {
    const tif = makeFaxTiff(1, 'standard');
    const r = await send(
      'tech@lab.test',
      [`15550100000@${DOMAIN}`, `15550100008@${DOMAIN}`],
      ['--header', 'Message-Id: <bc-1@lab.test>', '--attach-type', 'image/tiff', '--attach', `@${tif}`],
    );
    assert.match(lastReply(r.out), /250 .*Accepted: 2 faxes/, r.out);
    const jobs = await jobsOf('bc-1@lab.test');
    assert.deepEqual(
      jobs.map((j) => j.fax_number),
      ['+15550100000', '+15550100008'],
    );
    assert.ok(jobs[0]!.broadcast_id && jobs[0]!.broadcast_id === jobs[1]!.broadcast_id, 'one broadcast');
    const acc = await t.owner.query('SELECT account_id FROM fax_jobs WHERE id = $1', [jobs[0]!.id]);
    assert.equal(acc.rows[0].account_id, t.b.account_id);
    await eventually(async () => (await jobsOf('bc-1@lab.test')).every((j) => j.state === 'delivered'));
    for (const j of jobs)
      await eventually(async () =>
        mailsAbout(j.id).some((m) => m.mail.subject === `Fax delivered to ${j.fax_number}`),
      );
  });

  it('an allowed sender’s message that cannot be a fax gets one mail saying why', async () => {
    const txt = file('notes.txt', Buffer.from('plain words, not a document'));
    const r = await send(
      'doctor@clinic.test',
      [`15550100000@${DOMAIN}`],
      ['--header', 'Message-Id: <txt-1@clinic.test>', '--attach', `@${txt}`],
    );
    assert.match(lastReply(r.out), /250 /, r.out);
    assert.equal((await jobsOf('txt-1@clinic.test')).length, 0);
    await eventually(async () => capture.messages.some((m) => m.mail.inReplyTo === '<txt-1@clinic.test>'));
    const m = capture.messages.find((x) => x.mail.inReplyTo === '<txt-1@clinic.test>')!;
    assert.match(m.mail.subject ?? '', /^Fax not sent/);
    assert.match(m.mail.text ?? '', /"notes\.txt" .* is not a PDF, TIFF, JPEG or PNG file/);
    // The refusal is in the audit trail too, without its reason (it quotes the file name).
    const refused = (await mailAudit()).filter((e) => e.result === 'refused');
    assert.ok(refused.length >= 1, 'a refused send by mail in the audit trail');
    assert.equal(refused[0]!.actor_id, await senderId('doctor@clinic.test'));
    assert.doesNotMatch(JSON.stringify(refused), /notes/);
  });

  it('limits per account: messages per minute (451, retried later) and size (552)', async () => {
    const big = file('big.pdf', Buffer.concat([await makePdf(1), Buffer.alloc(3 * 1024 * 1024, 0x20)]));
    const r = await send('doctor@clinic.test', [`15550100000@${DOMAIN}`], ['--attach', `@${big}`]);
    assert.match(r.out, /552 5\.3\.4 Message larger than/);
    // Account B's bucket (6 a minute): each message takes a token, refused or not.
    for (let i = 0; i < 2; i++) {
      const x = await send(
        'tech@lab.test',
        [`15550100000@${DOMAIN}`],
        ['--header', `Message-Id: <rate-${i}@lab.test>`],
      );
      assert.match(lastReply(x.out), /250 /, x.out);
    }
    const bucket = await t.owner.query('SELECT tokens FROM mail_buckets WHERE account_id = $1', [
      t.b.account_id,
    ]);
    assert.ok(bucket.rows[0].tokens < 5, `two tokens taken: ${bucket.rows[0].tokens}`);
    // An account that used up its allowance (far below zero, so no refill during a slow send): 451.
    await t.owner.query('UPDATE mail_buckets SET tokens = -1000, at = now() WHERE account_id = $1', [
      t.b.account_id,
    ]);
    const over = await send(
      'tech@lab.test',
      [`15550100000@${DOMAIN}`],
      ['--header', 'Message-Id: <rate-x@lab.test>'],
    );
    assert.match(lastReply(over.out), /451 4\.7\.1 Too many messages/, over.out);
    // Account A is not limited by B's bucket.
    const a = await send(
      'doctor@clinic.test',
      [`15550100000@${DOMAIN}`],
      ['--header', 'Message-Id: <rate-a@clinic.test>'],
    );
    assert.match(lastReply(a.out), /250 /, a.out);
  });

  it('the settings API: senders list and delete, another account’s ids answer 404, a taken address 409', async () => {
    const list = await t.api('GET', '/v1/mail-senders', t.tokenA);
    assert.equal(list.http, 200);
    assert.deepEqual(
      list.body.data.map((s: { address: string }) => s.address),
      ['doctor@clinic.test'],
    );
    const id = list.body.data[0].id;
    assert.equal((await t.api('DELETE', `/v1/mail-senders/${id}`, t.tokenB)).http, 404);
    const taken = await t.api('POST', '/v1/mail-senders', t.tokenB, { address: 'Doctor@Clinic.test' });
    assert.equal(taken.http, 409, JSON.stringify(taken.body));
    const bad = await t.api('POST', '/v1/mail-senders', t.tokenA, { address: 'not an address' });
    assert.equal(bad.http, 422);
    const s = await t.api('PATCH', '/v1/mail-settings', t.tokenA, { receipts: 'failures', body: 'page' });
    assert.equal(s.http, 200, JSON.stringify(s.body));
    assert.equal(s.body.data.receipts, 'failures');
    assert.equal((await t.api('GET', '/v1/mail-settings', t.tokenB)).body.data.receipts, 'all');
    assert.equal((await t.api('PATCH', '/v1/mail-settings', t.tokenA, { receipts: 'sometimes' })).http, 422);
    await t.api('PATCH', '/v1/mail-settings', t.tokenA, { receipts: 'all', body: 'cover' });
  });

  it('a received fax on a number with email_to arrives as a mail with the PDF', async () => {
    const numbers = await t.api('GET', '/v1/numbers?limit=5', t.tokenA);
    const n = numbers.body.data[3];
    const patch = await t.api('PATCH', `/v1/numbers/${n.id}`, t.tokenA, {
      email_to: ['frontdesk@clinic.test'],
      email_attach: 'pdf',
    });
    assert.equal(patch.http, 200, JSON.stringify(patch.body));
    assert.deepEqual(patch.body.data.email_to, ['frontdesk@clinic.test']);
    const pool = new pg.Pool({ connectionString: t.s.cfg.DATABASE_URL, max: 2 });
    try {
      const sink = new PgReceivedFaxSink({ db: pool, log: createLogger('silent') });
      const rec = await sink.begin({
        accountId: t.a.account_id,
        numberId: n.id,
        to: n.number,
        from: '+15550001111',
        stationId: n.number,
        callId: 'mail-rx-1@test',
      });
      await rec.complete(
        {
          ok: true,
          code: 0,
          text: 'OK',
          pages: 2,
          bitRate: 14400,
          ecm: true,
          remoteIdent: '+15550001111',
          transport: 't38',
          durationMs: 20_000,
        },
        makeFaxTiff(2, 'standard'),
      );
      await eventually(async () =>
        capture.messages.some((m) => m.envelopeTo.includes('frontdesk@clinic.test')),
      );
      const m = capture.messages.find((x) => x.envelopeTo.includes('frontdesk@clinic.test'))!;
      assert.equal(m.mail.subject, 'Fax from +15550001111, 2 pages');
      const att = m.mail.attachments.find((a) => a.mimeType === 'application/pdf');
      assert.ok(att, 'the PDF attached');
      assert.equal(
        Buffer.from(att.content as ArrayBuffer)
          .subarray(0, 5)
          .toString('latin1'),
        '%PDF-',
      );
    } finally {
      await pool.end();
    }
  });
});

describe('mail gateway: the outgoing queue survives a restart with the relay down', () => {
  it('mail queued while the relay is down arrives after the service is started again', async () => {
    const db = await createDatabase({ migrated: true });
    const capture0 = await startCapture();
    const relayPort = capture0.port;
    await capture0.close(); // the relay is down: nothing listens on its port now
    const env = {
      SMTP_RELAY: `smtp://127.0.0.1:${relayPort}`,
      MAIL_POLL_MS: '100',
      MAIL_RETRY_SECONDS: '1',
    };
    const first = await startService({ databaseUrl: db.url, env });
    let capture: Capture | null = null;
    try {
      const owner = new pg.Client({ connectionString: db.url });
      await owner.connect();
      try {
        const { enqueueMail } = await import('../src/accounts/mail.ts');
        const id = await enqueueMail(owner, {
          to: 'new.user@clinic.test',
          subject: 'Invitation',
          text: 'Welcome',
        });
        // Tried and refused by the dead relay (the attempt is counted), then the service stops.
        await eventually(async () => {
          const r = await owner.query('SELECT attempts, sent_at FROM mail_outbox WHERE id = $1', [id]);
          return r.rows[0].attempts >= 1 && r.rows[0].sent_at === null;
        });
        await first.stop();
        capture = await startCapture(relayPort);
        const second = await startService({ databaseUrl: db.url, env, prefix: first.cfg.QUEUE_PREFIX });
        try {
          await eventually(async () => capture!.messages.some((m) => m.mail.subject === 'Invitation'));
          await eventually(
            async () =>
              (await owner.query('SELECT sent_at FROM mail_outbox WHERE id = $1', [id])).rows[0].sent_at,
          );
        } finally {
          await second.dropAll();
        }
      } finally {
        await owner.end();
      }
    } finally {
      await first.stop();
      await capture?.close();
      await db.drop();
    }
  });
});
