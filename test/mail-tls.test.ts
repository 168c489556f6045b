// STARTTLS on the mail gateway (issue 30; docs/mail.md "TLS"): with SMTP_TLS_CERT/SMTP_TLS_KEY (a
// self-signed certificate made here with Debian's openssl) the listener offers STARTTLS and swaks
// --tls submits a fax over it; with SMTP_REQUIRE_TLS a client that does not STARTTLS is refused 530
// at MAIL FROM and makes nothing.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { lastReply, swaks } from './support/mail.ts';
import { makePdf } from './support/pdf.ts';

const DOMAIN = 'fax.test';

describe('mail gateway over STARTTLS, required', () => {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-mail-tls-'));
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  const pdf = join(dir, 'letter.pdf');
  let t: TwoAccounts;
  let port: number;

  before(async () => {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:P-256',
        '-nodes',
        '-subj',
        `/CN=${DOMAIN}`,
        '-days',
        '2',
        '-keyout',
        key,
        '-out',
        cert,
      ],
      { stdio: 'ignore' },
    );
    writeFileSync(pdf, await makePdf(1));
    t = await twoAccounts({
      SMTP_LISTEN: '127.0.0.1:0',
      MAIL_DOMAIN: DOMAIN,
      SMTP_TLS_CERT: cert,
      SMTP_TLS_KEY: key,
      SMTP_REQUIRE_TLS: 'true',
    });
    port = t.s.running.smtp!.port;
    const r = await t.api('POST', '/v1/mail-senders', t.tokenA, { address: 'doctor@clinic.test' });
    assert.equal(r.http, 200, JSON.stringify(r.body));
  });
  after(async () => {
    await t?.close();
  });

  const send = (messageId: string, extra: string[]) =>
    swaks([
      '--server',
      `127.0.0.1:${port}`,
      '--from',
      'doctor@clinic.test',
      `--to=15550100000@${DOMAIN}`,
      '--header',
      `Message-Id: <${messageId}>`,
      '--header',
      'Subject: Referral',
      '--attach-type',
      'application/pdf',
      '--attach',
      `@${pdf}`,
      ...extra,
    ]);
  const jobs = async (messageId: string) =>
    (
      await t.owner.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM fax_jobs WHERE options->>'message_id' = $1`,
        [messageId],
      )
    ).rows[0]!.n;

  it('swaks --tls submits a fax over STARTTLS with the configured certificate', async () => {
    const r = await send('tls-1@clinic.test', ['--tls']);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /STARTTLS/);
    assert.match(r.out, /TLS started with cipher/, r.out);
    assert.match(lastReply(r.out), /250 .*Accepted: 1 fax/, r.out);
    assert.equal(await jobs('tls-1@clinic.test'), 1);
  });

  it('a client that does not STARTTLS is refused 530 at MAIL FROM and makes no fax', async () => {
    const r = await send('plain-1@clinic.test', []);
    assert.notEqual(r.code, 0, r.out);
    assert.match(r.out, /530 5\.7\.0 Must issue a STARTTLS command first/, r.out);
    assert.equal(await jobs('plain-1@clinic.test'), 0);
    const m = await fetch(`${t.s.url}/metrics`).then((res) => res.text());
    const refused = m.split('\n').filter((l) => l.startsWith('faxline_mail_rcpt_refused_total{'));
    assert.deepEqual(refused, ['faxline_mail_rcpt_refused_total{reason="tls_required",process="all"} 1']);
  });
});
