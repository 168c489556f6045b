// Postfix (Debian) in front of the mail gateway as the MX (issue 30): Postfix takes the message from
// the sending host, relays the fax domain to the gateway's listener and passes the original client
// with XFORWARD, so that SPF judges the sending host, not Postfix. The sender's SPF record allows
// 127.0.0.5 only; swaks sends from 127.0.0.5 (fax made) and from 127.0.0.6 (dropped, enforce).
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { dnsTable, lastReply, swaks } from './support/mail.ts';
import { makePdf } from './support/pdf.ts';
import { startPostfix, type Postfix } from './support/postfix.ts';

const DOMAIN = 'fax.test';

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

describe('mail gateway behind Postfix (XFORWARD)', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let postfix: Postfix;
  let pdf: string;
  let owner: pg.Client;

  before(async () => {
    s = await startService({
      env: { SMTP_LISTEN: '127.0.0.1:0', MAIL_DOMAIN: DOMAIN, SMTP_XFORWARD_FROM: '127.0.0.1' },
      mailResolver: dnsTable({ 'clinic.test': 'v=spf1 ip4:127.0.0.5 -all' }),
    });
    owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await owner.connect();
    const a = await seedAccount(s);
    const token = await tokenFor(s.url, a.api_key);
    const made = await call(s.url, 'POST', '/v1/mail-senders', { token, body: { address: '*@clinic.test' } });
    assert.equal(made.http, 200, JSON.stringify(made.body));
    const set = await call(s.url, 'PATCH', '/v1/mail-settings', { token, body: { sender_auth: 'enforce' } });
    assert.equal(set.http, 200, JSON.stringify(set.body));
    postfix = await startPostfix({ port: await freePort(), domain: DOMAIN, gateway: s.running.smtp!.port });
    const dir = mkdtempSync(join(tmpdir(), 'faxline-mail-pf-'));
    pdf = join(dir, 'letter.pdf');
    writeFileSync(pdf, await makePdf(1));
  });
  after(async () => {
    await postfix?.stop();
    await owner?.end();
    await s?.dropAll();
  });

  const sendFrom = (client: string, messageId: string) =>
    swaks([
      '--server',
      `127.0.0.1:${postfix.port}`,
      '--local-interface',
      client,
      '--from',
      'doctor@clinic.test',
      '--to',
      `15550100000@${DOMAIN}`,
      '--header',
      `Message-Id: <${messageId}>`,
      '--attach-type',
      'application/pdf',
      '--attach',
      `@${pdf}`,
    ]);
  const jobs = async (messageId: string) =>
    (await owner.query(`SELECT id FROM fax_jobs WHERE options->>'message_id' = $1`, [messageId])).rowCount;
  const authLines = () => s.logs.lines.filter((l) => l.includes('mail: sender authentication'));

  it('Postfix relays to the gateway, which judges SPF on the forwarded client address', async () => {
    const r = await sendFrom('127.0.0.5', 'xf-ok@clinic.test');
    assert.match(lastReply(r.out), /250 .*queued/, r.out);
    // Postfix delivers to the gateway on its own time: wait for the fax the message makes.
    await eventually(async () => (await jobs('xf-ok@clinic.test')) === 1, 90_000).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}\npostfix log:\n${postfix.log().slice(-3000)}`);
    });
    const line = authLines().find((l) => l.includes('"client":"127.0.0.5"'));
    assert.ok(line, `the gateway saw the forwarded address: ${authLines().join('\n')}`);
    assert.match(line, /"spf":"pass"/);
  });

  it('a sending host the SPF record does not allow is judged fail, and with enforce nothing is made', async () => {
    const r = await sendFrom('127.0.0.6', 'xf-bad@clinic.test');
    assert.match(lastReply(r.out), /250 .*queued/, r.out);
    await eventually(async () => authLines().some((l) => l.includes('"client":"127.0.0.6"')), 90_000);
    assert.match(
      authLines().find((l) => l.includes('"client":"127.0.0.6"'))!,
      /"spf":"fail"/,
    );
    await eventually(async () => s.logs.lines.some((l) => l.includes('"reason":"sender_auth_failed"')));
    assert.equal(await jobs('xf-bad@clinic.test'), 0);
    const m = await fetch(`${s.url}/metrics`).then((res) => res.text());
    assert.match(m, /faxline_mail_auth_total\{[^}]*spf="pass"[^}]*\} 1/);
    assert.match(m, /faxline_mail_auth_total\{[^}]*spf="fail"[^}]*\} 1/);
  });
});
