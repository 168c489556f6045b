// DKIM and DMARC of messages to the mail gateway (issue 30; docs/mail.md "Settings per account"):
// swaks composes a message, mailauth signs it with a key made here, and the gateway's DNS answers come
// from the test's table (startService's mailResolver): the key under sel._domainkey.clinic.test, a
// DMARC record p=reject, and an SPF record that passes no host (so DMARC rests on the DKIM signature).
// sender_auth enforce takes a good signature and drops a bad one (altered after signing); record
// takes the bad one and records it (dkim not pass, dmarc fail); off does not check at all.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { dkimSign } from 'mailauth';
import pg from 'pg';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { startService } from './support/harness.ts';
import { dnsTable, lastReply, swaks } from './support/mail.ts';
import { makePdf } from './support/pdf.ts';

const DOMAIN = 'fax.test';

describe('mail gateway: DKIM and DMARC per sender_auth setting', () => {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-mail-auth-'));
  const pdf = join(dir, 'letter.pdf');
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const dkimKey = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
  let s: Awaited<ReturnType<typeof startService>>;
  let owner: pg.Client;
  let token: string;

  before(async () => {
    writeFileSync(pdf, await makePdf(1));
    s = await startService({
      env: { SMTP_LISTEN: '127.0.0.1:0', MAIL_DOMAIN: DOMAIN },
      mailResolver: dnsTable({
        'clinic.test': 'v=spf1 -all',
        '_dmarc.clinic.test': 'v=DMARC1; p=reject',
        'sel._domainkey.clinic.test': `v=DKIM1; k=rsa; p=${dkimKey}`,
      }),
    });
    owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await owner.connect();
    const a = await seedAccount(s);
    token = await tokenFor(s.url, a.api_key);
    const made = await call(s.url, 'POST', '/v1/mail-senders', { token, body: { address: '*@clinic.test' } });
    assert.equal(made.http, 200, JSON.stringify(made.body));
  });
  after(async () => {
    await owner?.end();
    await s?.dropAll();
  });

  const setAuth = async (mode: 'enforce' | 'record' | 'off') => {
    const r = await call(s.url, 'PATCH', '/v1/mail-settings', { token, body: { sender_auth: mode } });
    assert.equal(r.http, 200, JSON.stringify(r.body));
  };
  /** A message composed by swaks and signed by clinic.test; `tamper` alters its body after signing. */
  const signed = async (messageId: string, tamper: boolean): Promise<string> => {
    const dump = execFileSync(
      'swaks',
      [
        '--dump-mail',
        '--server',
        '127.0.0.1:1',
        '--from',
        'doctor@clinic.test',
        '--to',
        `15550100000@${DOMAIN}`,
        '--header',
        `Message-Id: <${messageId}>`,
        '--header',
        'Subject: Referral',
        '--body',
        'Please fax the attached referral.',
        '--attach-type',
        'application/pdf',
        '--attach',
        `@${pdf}`,
      ],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] },
    ).replace(/\r?\n/g, '\r\n');
    const key = { signingDomain: 'clinic.test', selector: 'sel' };
    const sig = await dkimSign(dump, {
      ...key,
      privateKey: '',
      // mailauth signs with the entries of signatureData (its top-level key alone signs nothing).
      signatureData: [{ ...key, privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }) }],
    });
    assert.match(sig.signatures, /^DKIM-Signature: /);
    const body = tamper ? dump.replace('Please fax the attached referral.', 'Please fax this, too.') : dump;
    const file = join(dir, `${messageId}.eml`);
    writeFileSync(file, sig.signatures + body);
    return file;
  };
  const send = async (file: string) => {
    const r = await swaks([
      '--server',
      `127.0.0.1:${s.running.smtp!.port}`,
      '--from',
      'doctor@clinic.test',
      '--to',
      `15550100000@${DOMAIN}`,
      '--data',
      `@${file}`,
    ]);
    assert.equal(r.code, 0, r.out);
    return lastReply(r.out);
  };
  const jobs = async (messageId: string) =>
    (
      await owner.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM fax_jobs WHERE options->>'message_id' = $1`,
        [messageId],
      )
    ).rows[0]!.n;
  const authLines = () => s.logs.lines.filter((l) => l.includes('mail: sender authentication'));
  const metric = async (re: RegExp) => {
    const m = await fetch(`${s.url}/metrics`).then((res) => res.text());
    const line = m.split('\n').find((l) => re.test(l));
    return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
  };

  it('enforce: a good signature (DKIM and DMARC pass) makes a fax; one altered after signing is dropped', async () => {
    await setAuth('enforce');
    assert.match(await send(await signed('good-1@clinic.test', false)), /250 .*Accepted: 1 fax/);
    assert.equal(await jobs('good-1@clinic.test'), 1);
    const pass = authLines().at(-1)!;
    assert.match(pass, /"dkim":"pass"/);
    assert.match(pass, /"dmarc":"pass"/);
    assert.match(pass, /"spf":"fail"/, 'SPF fails for every host: DMARC passed on DKIM alone');

    const dropped = await metric(/^faxline_mail_messages_total\{outcome="sender_auth_failed"/);
    const reply = await send(await signed('bad-1@clinic.test', true));
    assert.match(reply, /250 /, 'dropped without telling (no backscatter)');
    assert.doesNotMatch(reply, /Accepted: 1 fax/);
    assert.equal(await jobs('bad-1@clinic.test'), 0);
    const fail = authLines().at(-1)!;
    // mailauth says "neutral" for a body that does not match its signed hash (RFC 6376 6.3), "fail" for a bad signature.
    assert.match(fail, /"dkim":"(neutral|fail)"/);
    assert.match(fail, /"dmarc":"fail"/);
    assert.equal(await metric(/^faxline_mail_messages_total\{outcome="sender_auth_failed"/), dropped + 1);
  });

  it('record: a bad signature still makes a fax, and its dkim neutral, dmarc fail is logged and counted', async () => {
    await setAuth('record');
    const counted = await metric(/^faxline_mail_auth_total\{spf="fail",dmarc="fail"/);
    assert.match(await send(await signed('bad-2@clinic.test', true)), /250 .*Accepted: 1 fax/);
    assert.equal(await jobs('bad-2@clinic.test'), 1);
    const line = authLines().at(-1)!;
    assert.match(line, /"dkim":"(neutral|fail)"/);
    assert.match(line, /"dmarc":"fail"/);
    assert.equal(await metric(/^faxline_mail_auth_total\{spf="fail",dmarc="fail"/), counted + 1);
  });

  it('off: a bad signature makes a fax and is not checked at all', async () => {
    await setAuth('off');
    const before = authLines().length;
    assert.match(await send(await signed('bad-3@clinic.test', true)), /250 .*Accepted: 1 fax/);
    assert.equal(await jobs('bad-3@clinic.test'), 1);
    assert.equal(authLines().length, before, 'no check, nothing recorded');
  });
});
