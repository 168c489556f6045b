// The web console over HTTP (issue 29): the first user from the admin CLI, sign-in and its throttle,
// CSRF on every state-changing request, sign-out and the idle/absolute timeouts (injected clock),
// disabled users, roles, another account's ids, escaping of what customers and far ends typed,
// security headers and cached assets. The browser walk-through is test/console-browser.test.ts.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { PDFDocument } from 'pdf-lib';
import pg from 'pg';
import type { DemoSeed } from '../src/admin/seed.ts';
import { createUser } from '../src/auth/console-users.ts';
import { ManualClock } from '../src/clock.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { ConsoleClient, seedReceived } from './support/console.ts';
import { eventually, startService } from './support/harness.ts';
import { makePdf } from './support/pdf.ts';

const PW = 'correct horse battery';
const XSS = '<script>alert(1)</script>';
const FILE_XSS = '<img src=x onerror=alert(1)>.pdf';

describe('web console over HTTP', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let a: DemoSeed;
  let b: DemoSeed;
  let owner: pg.Client;
  const clock = new ManualClock(Date.now());
  const user = (accountId: string, email: string, role: 'owner' | 'admin' | 'sender' | 'viewer') =>
    createUser(owner, { accountId, email, role, password: PW });
  const signedIn = async (email: string) => {
    const c = new ConsoleClient(s.url);
    const r = await c.signIn(email, PW);
    assert.equal(r.status, 303, r.text.slice(0, 400));
    return c;
  };

  before(async () => {
    s = await startService({
      clock,
      env: {
        CONSOLE_SIGNIN_FAILURES_PER_EMAIL: '3',
        CONSOLE_SESSION_IDLE_MINUTES: '30',
        CONSOLE_SESSION_MAX_HOURS: '2',
      },
    });
    a = await seedAccount(s);
    b = await seedAccount(s);
    owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await owner.connect();
  });
  after(async () => {
    await owner.end();
    await s.dropAll();
  });

  it('the admin CLI creates the first owner from a password on stdin; sign-in works, wrong ones get one message', async () => {
    const run = (args: string[], input: string) =>
      new Promise<{ code: number; out: string; err: string }>((resolve) => {
        const child = execFile(
          process.execPath,
          ['src/admin/cli.ts', ...args],
          { env: { ...process.env, DATABASE_URL: s.cfg.DATABASE_URL }, timeout: 60_000 },
          (err, out, errText) =>
            resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out, err: errText }),
        );
        child.stdin!.end(input);
      });
    const ok = await run(
      [
        'create-user',
        '--account',
        a.account_id,
        '--email',
        'First@Example.com',
        '--role',
        'owner',
        '--password-stdin',
      ],
      `${PW}\n`,
    );
    assert.equal(ok.code, 0, ok.err);
    assert.equal(JSON.parse(ok.out).email, 'first@example.com');
    const short = await run(
      [
        'create-user',
        '--account',
        a.account_id,
        '--email',
        'x@example.com',
        '--role',
        'owner',
        '--password-stdin',
      ],
      'short\n',
    );
    assert.equal(short.code, 2);
    assert.match(short.err, /at least 10 characters/);
    const hash = await owner.query('SELECT password_hash FROM console_users WHERE email = $1', [
      'first@example.com',
    ]);
    assert.match(hash.rows[0].password_hash, /^scrypt\$32768\$8\$3\$/);
    assert.ok(!hash.rows[0].password_hash.includes(PW));

    const c = new ConsoleClient(s.url);
    const good = await c.signIn('first@example.com', PW);
    assert.equal(good.status, 303);
    const cookie = good.headers.get('set-cookie')!;
    assert.match(cookie, /HttpOnly/);
    assert.match(cookie, /SameSite=Lax/);
    assert.match(cookie, /Path=\/console/);
    assert.match(cookie, /Secure/, 'loopback host: Secure (browsers accept it on localhost)');
    const stored = await owner.query(
      'SELECT count(*)::int AS n FROM console_sessions WHERE id_hash = sha256($1::bytea)',
      [Buffer.from(c.cookie.split('=')[1]!)],
    );
    assert.equal(stored.rows[0].n, 1, 'only the hash of the cookie is stored');
    const wrong = await new ConsoleClient(s.url).signIn('first@example.com', 'not the password');
    const unknown = await new ConsoleClient(s.url).signIn('nobody@example.com', 'not the password');
    assert.equal(wrong.status, 401);
    assert.equal(unknown.status, 401);
    const msg = (p: { text: string }) => /<p class="alert"[^>]*>([^<]*)</.exec(p.text)?.[1];
    assert.equal(msg(wrong), msg(unknown));
  });

  it('sign-in is throttled per email (in PostgreSQL) even with the right password afterwards', async () => {
    await user(a.account_id, 'throttled@example.com', 'sender');
    for (let i = 0; i < 3; i++)
      assert.equal(
        (await new ConsoleClient(s.url).signIn('throttled@example.com', 'wrong password!')).status,
        401,
      );
    const r = await new ConsoleClient(s.url).signIn('throttled@example.com', PW);
    assert.equal(r.status, 429);
    assert.ok(Number(r.headers.get('retry-after')) > 0);
    const rows = await owner.query(
      "SELECT failures FROM console_signin_failures WHERE bucket = 'email:throttled@example.com'",
    );
    assert.equal(rows.rows[0].failures, 3);
  });

  it('every state-changing request needs the session CSRF token and a same-site Origin', async () => {
    await user(a.account_id, 'csrf@example.com', 'sender');
    const c = await signedIn('csrf@example.com');
    const token = await c.csrf();
    const count = async () =>
      (await owner.query("SELECT count(*)::int AS n FROM contacts WHERE name = 'CSRF probe'")).rows[0]
        .n as number;
    const form = { name: 'CSRF probe', fax_number: '+15550001111' };
    assert.equal((await c.post('/console/contacts', form)).status, 403, 'no token');
    assert.equal(
      (await c.post('/console/contacts', form, { csrf: 'x'.repeat(43) })).status,
      403,
      'wrong token',
    );
    const other = await signedIn('csrf@example.com'); // another session of the same user: another token
    assert.notEqual(await other.csrf(), token);
    assert.equal(
      (await c.post('/console/contacts', form, { csrf: await other.csrf() })).status,
      403,
      "another session's token",
    );
    assert.equal(
      (await c.post('/console/contacts', form, { csrf: token, origin: 'https://evil.example' })).status,
      403,
      'cross-site Origin',
    );
    assert.equal((await c.post('/console/sign-out', {})).status, 403, 'sign-out too');
    const sendNoToken = await c.post(
      '/console/send',
      { to: '+15551234567', action: 'send' },
      {
        files: [{ field: 'document', name: 'a.pdf', data: await makePdf(1) }],
      },
    );
    assert.equal(sendNoToken.status, 403, 'multipart send without token');
    assert.equal(await count(), 0);
    assert.equal((await c.post('/console/contacts', form, { csrf: token, origin: s.url })).status, 303);
    assert.equal(await count(), 1);
  });

  it('sign-out ends the session server-side; the old cookie is refused', async () => {
    await user(a.account_id, 'out@example.com', 'sender');
    const c = await signedIn('out@example.com');
    const old = c.cookie;
    const token = await c.csrf();
    const r = await c.post('/console/sign-out', {}, { csrf: token });
    assert.equal(r.status, 200);
    assert.match(r.text, /You are signed out/);
    const replay = new ConsoleClient(s.url);
    replay.cookie = old;
    const page = await replay.get('/console/outbox');
    assert.equal(page.status, 303);
    assert.equal(page.location, '/console/sign-in');
    assert.equal(
      (await replay.post('/console/contacts', { name: 'after', fax_number: '+15550002222' }, { csrf: token }))
        .status,
      401,
    );
    assert.equal(
      (await replay.get('/console/outbox/status?id=00000000-0000-4000-8000-000000000000')).status,
      401,
    );
  });

  it('a session ends when idle too long, and past its absolute timeout however busy', async () => {
    await user(a.account_id, 'idle@example.com', 'viewer');
    const c = await signedIn('idle@example.com');
    clock.advance(29 * 60_000);
    assert.equal((await c.get('/console/outbox')).status, 200, 'used within the idle timeout');
    clock.advance(31 * 60_000);
    assert.equal((await c.get('/console/outbox')).status, 303, 'idle 31 minutes: ended');

    const busy = await signedIn('idle@example.com');
    for (let i = 0; i < 5; i++) {
      clock.advance(20 * 60_000);
      assert.equal((await busy.get('/console/outbox')).status, 200, `busy at ${(i + 1) * 20} min`);
    }
    clock.advance(21 * 60_000); // 2 h 1 min after sign-in, used 21 minutes ago
    assert.equal((await busy.get('/console/outbox')).status, 303, 'absolute timeout');
  });

  it('a disabled user is signed out at once and cannot sign in', async () => {
    await user(a.account_id, 'boss@example.com', 'admin');
    const target = await user(a.account_id, 'leaver@example.com', 'sender');
    const leaver = await signedIn('leaver@example.com');
    const boss = await signedIn('boss@example.com');
    const r = await boss.post(
      `/console/users/${target.id}`,
      { disabled: 'true' },
      { csrf: await boss.csrf() },
    );
    assert.equal(r.status, 303, r.text.slice(0, 300));
    assert.equal((await leaver.get('/console/outbox')).status, 303);
    assert.equal((await new ConsoleClient(s.url).signIn('leaver@example.com', PW)).status, 401);
    // An admin may not touch an owner.
    const own = await owner.query("SELECT id FROM console_users WHERE email = 'first@example.com'");
    assert.equal(
      (await boss.post(`/console/users/${own.rows[0].id}`, { role: 'viewer' }, { csrf: await boss.csrf() }))
        .status,
      403,
    );
  });

  it('a viewer has no "New fax" and the server refuses its send; a sender sends, attributed to them', async () => {
    await user(a.account_id, 'viewer@example.com', 'viewer');
    const v = await signedIn('viewer@example.com');
    const page = await v.get('/console/outbox');
    assert.doesNotMatch(page.text, />New fax</);
    assert.match(page.text, />Outbox</);
    assert.equal((await v.get('/console/send')).status, 403);
    const before = (
      await owner.query('SELECT count(*)::int AS n FROM fax_jobs WHERE account_id = $1', [a.account_id])
    ).rows[0].n;
    const refused = await v.post(
      '/console/send',
      { to: '+15551234567', action: 'send' },
      {
        csrf: await v.csrf(),
        files: [{ field: 'document', name: 'a.pdf', data: await makePdf(1) }],
      },
    );
    assert.equal(refused.status, 403);
    assert.equal(
      (await owner.query('SELECT count(*)::int AS n FROM fax_jobs WHERE account_id = $1', [a.account_id]))
        .rows[0].n,
      before,
    );

    await user(a.account_id, 'sender@example.com', 'sender');
    const snd = await signedIn('sender@example.com');
    const bad = await snd.post(
      '/console/send',
      { to: '+0123', action: 'send' },
      {
        csrf: await snd.csrf(),
        files: [{ field: 'document', name: 'a.pdf', data: await makePdf(1) }],
      },
    );
    assert.equal(bad.status, 422);
    assert.match(bad.text, /id="to-error">fax_number: &quot;\+0123&quot; is not an E\.164 number/);
    const sent = await snd.post(
      '/console/send',
      { to: '+15551234567', action: 'send', subject: 'Referral' },
      {
        csrf: await snd.csrf(),
        files: [{ field: 'document', name: 'a.pdf', data: await makePdf(1) }],
      },
    );
    assert.equal(sent.status, 303, sent.text.slice(0, 500));
    const jobId = sent.location!.split('/').pop()!;
    const fax = await snd.get(`/console/outbox/${jobId}`);
    assert.match(fax.text, /<dt>Sent by<\/dt>\s*<dd>sender@example\.com<\/dd>/);
    await eventually(async () =>
      /data-state="delivered"/.test((await snd.get(`/console/outbox/${jobId}`)).text),
    );
    const status = JSON.parse((await snd.get(`/console/outbox/status?id=${jobId}`)).text);
    assert.equal(status.states[jobId], 'delivered');
  });

  it("a user's sign-ins, failed sign-ins and actions are in the account's audit trail, attributed to the user", async () => {
    const u = await user(a.account_id, 'audited@example.com', 'sender');
    const failed = await new ConsoleClient(s.url).signIn('audited@example.com', 'not the password');
    assert.equal(failed.status, 401);
    const c = await signedIn('audited@example.com');
    const created = await c.post(
      '/console/contacts',
      { name: 'Lab', fax_number: '+15557654321' },
      { csrf: await c.csrf() },
    );
    assert.equal(created.status, 303, created.text.slice(0, 400));
    const sent = await c.post(
      '/console/send',
      { to: '+15551234567', action: 'send' },
      { csrf: await c.csrf(), files: [{ field: 'document', name: 'a.pdf', data: await makePdf(1) }] },
    );
    assert.equal(sent.status, 303, sent.text.slice(0, 400));
    const events = (
      await owner.query<{ action: string; result: string; object_id: string | null; ip: string | null }>(
        `SELECT action, result, object_id, ip FROM audit_events
          WHERE account_id = $1 AND actor_type = 'user' AND actor_id = $2 ORDER BY created_at`,
        [a.account_id, u.id],
      )
    ).rows;
    assert.deepEqual(
      events.map((e) => `${e.action} ${e.result}`),
      ['console.sign_in refused', 'console.sign_in ok', 'contact.create ok', 'fax.send ok'],
    );
    assert.ok(
      events.every((e) => e.ip),
      'each event names the address',
    );
    // One event per action: the console calls the intake service, not the API route and its hook.
    assert.equal(
      (
        await owner.query(
          `SELECT count(*)::int AS n FROM audit_events WHERE account_id = $1 AND action = 'fax.send' AND actor_id = $2`,
          [a.account_id, u.id],
        )
      ).rows[0].n,
      1,
    );
  });

  it("another account's user sees none of it: its ids answer like missing ones", async () => {
    await user(b.account_id, 'other@example.com', 'owner');
    const o = await signedIn('other@example.com');
    const aJob = (await owner.query('SELECT id FROM fax_jobs WHERE account_id = $1 LIMIT 1', [a.account_id]))
      .rows[0].id;
    const aReceived = await seedReceived(s.cfg.DATABASE_URL, { accountId: a.account_id, to: a.numbers[0]! });
    const none = '00000000-0000-4000-8000-000000000000';
    for (const [theirs, missing] of [
      [`/console/outbox/${aJob}`, `/console/outbox/${none}`],
      [`/console/inbox/${aReceived}`, `/console/inbox/${none}`],
      [`/console/inbox/${aReceived}/pdf`, `/console/inbox/${none}/pdf`],
    ] as const) {
      const t = await o.get(theirs);
      const m = await o.get(missing);
      assert.equal(t.status, 404, theirs);
      assert.equal(m.status, 404);
      assert.equal(t.text, m.text);
    }
    assert.doesNotMatch((await o.get('/console/outbox')).text, new RegExp(aJob));
    assert.doesNotMatch((await o.get('/console/inbox')).text, new RegExp(aReceived));
    assert.deepEqual(JSON.parse((await o.get(`/console/outbox/status?id=${aJob}`)).text).states, {});
    const aUser = (await owner.query("SELECT id FROM console_users WHERE email = 'sender@example.com'"))
      .rows[0].id;
    assert.equal(
      (await o.post(`/console/users/${aUser}`, { disabled: 'true' }, { csrf: await o.csrf() })).status,
      404,
    );
    assert.equal(
      (await owner.query("SELECT disabled_at FROM console_users WHERE email = 'sender@example.com'")).rows[0]
        .disabled_at,
      null,
    );
  });

  it('a script in a contact name, a file name or a remote CSID shows as text', async () => {
    await user(a.account_id, 'xss@example.com', 'sender');
    const c = await signedIn('xss@example.com');
    const added = await c.post(
      '/console/contacts',
      { name: XSS, fax_number: '+15550003333' },
      { csrf: await c.csrf() },
    );
    assert.equal(added.status, 303, added.text.slice(0, 300));
    const escaped = '&lt;script&gt;alert(1)&lt;/script&gt;';
    const contacts = await c.get('/console/contacts');
    assert.ok(contacts.text.includes(escaped));
    assert.ok(!contacts.text.includes(XSS));

    const preview = await c.post(
      '/console/send',
      { to: '+15551234567', action: 'preview' },
      {
        csrf: await c.csrf(),
        // A browser sends only the base name of a file (no "/"): markup that fits one.
        files: [{ field: 'document', name: FILE_XSS, data: await makePdf(2) }],
      },
    );
    assert.equal(preview.status, 200, preview.text.slice(0, 500));
    assert.match(preview.text, /2\s+page\(s\)/);
    assert.ok(preview.text.includes('&lt;img src=x onerror=alert(1)&gt;.pdf'));
    assert.ok(!preview.text.includes('<img src=x'));

    const id = await seedReceived(s.cfg.DATABASE_URL, {
      accountId: a.account_id,
      to: a.numbers[0]!,
      remoteIdent: '<script>x</script>',
    });
    const row = await owner.query('SELECT remote_csid FROM received_faxes WHERE id = $1', [id]);
    assert.equal(
      row.rows[0].remote_csid,
      '<script>x</script>',
      'the far end sent markup and it was stored as sent',
    );
    for (const p of ['/console/inbox', `/console/inbox/${id}`]) {
      const page = await c.get(p);
      assert.ok(page.text.includes('&lt;script&gt;x&lt;/script&gt;'), p);
      assert.ok(!page.text.includes('<script>x'), p);
    }
  });

  it('pages carry a strict CSP and friends; assets are cached by hashed name and ETag', async () => {
    const c = await signedIn('sender@example.com');
    const p = await c.get('/console/inbox');
    const csp = p.headers.get('content-security-policy')!;
    assert.match(csp, /default-src 'self'/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.doesNotMatch(csp, /unsafe-inline/);
    assert.equal(p.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(p.headers.get('cache-control'), 'no-store');
    assert.doesNotMatch(p.text, /<script>|style=/, 'no inline script or style');
    const css = /href="(\/console\/assets\/console\.[0-9a-f]{12}\.css)"/.exec(p.text)![1]!;
    const r = await fetch(s.url + css);
    assert.equal(r.status, 200);
    assert.match(r.headers.get('cache-control')!, /immutable/);
    const again = await fetch(s.url + css, { headers: { 'if-none-match': r.headers.get('etag')! } });
    assert.equal(again.status, 304);
    await r.text();
    assert.match(p.text, /<span class="badge"[^>]*>\d+<\/span>/, 'the unread badge');
  });
  /** The account's audit events of `action` by console user `userId`, oldest first. */
  const auditOf = async (accountId: string, userId: string, action: string) =>
    (
      await owner.query<{ result: string; object_type: string | null; object_id: string | null }>(
        `SELECT result, object_type, object_id FROM audit_events
          WHERE account_id = $1 AND actor_type = 'user' AND actor_id = $2 AND action = $3 ORDER BY created_at`,
        [accountId, userId, action],
      )
    ).rows;

  it("a fax's transmission report and sent image come through the session, audited; purged content answers 410", async () => {
    const u = await user(a.account_id, 'proof@example.com', 'sender');
    const c = await signedIn('proof@example.com');
    const sent = await c.post(
      '/console/send',
      { to: '+15551234567', action: 'send' },
      { csrf: await c.csrf(), files: [{ field: 'document', name: 'a.pdf', data: await makePdf(1) }] },
    );
    assert.equal(sent.status, 303, sent.text.slice(0, 400));
    const jobId = sent.location!.split('/').pop()!;
    await eventually(async () =>
      /data-state="delivered"/.test((await c.get(`/console/outbox/${jobId}`)).text),
    );
    const page = await c.get(`/console/outbox/${jobId}`);
    assert.ok(page.text.includes(`href="/console/outbox/${jobId}/report"`));
    assert.doesNotMatch(page.text, /GET \/v1\/faxes/, 'no API paths named any more');

    const report = await fetch(`${s.url}/console/outbox/${jobId}/report`, { headers: { cookie: c.cookie } });
    assert.equal(report.status, 200);
    assert.equal(report.headers.get('content-type'), 'application/pdf');
    assert.equal(
      Buffer.from(await report.arrayBuffer())
        .subarray(0, 5)
        .toString(),
      '%PDF-',
    );
    const tiff = await fetch(`${s.url}/console/outbox/${jobId}/image?format=tiff`, {
      headers: { cookie: c.cookie },
    });
    assert.equal(tiff.status, 200);
    assert.equal(tiff.headers.get('content-type'), 'image/tiff');
    const tiffBytes = Buffer.from(await tiff.arrayBuffer());
    // The same bytes as the API's download.
    const token = await tokenFor(s.url, a.api_key);
    const api = await fetch(`${s.url}/v1/faxes/${jobId}/image?format=tiff`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.ok(tiffBytes.equals(Buffer.from(await api.arrayBuffer())));
    const pdf = await fetch(`${s.url}/console/outbox/${jobId}/image?format=pdf`, {
      headers: { cookie: c.cookie },
    });
    assert.equal(pdf.headers.get('content-type'), 'application/pdf');
    await pdf.arrayBuffer();
    assert.deepEqual(
      (await auditOf(a.account_id, u.id, 'fax.report_download')).map((e) => `${e.result} ${e.object_id}`),
      [`ok ${jobId}`],
    );
    assert.equal((await auditOf(a.account_id, u.id, 'fax.image_download')).length, 2);

    // Another account's user: like a missing fax.
    await user(b.account_id, 'proof-other@example.com', 'owner');
    const o = await signedIn('proof-other@example.com');
    const none = '00000000-0000-4000-8000-000000000000';
    for (const tail of ['report', 'image?format=tiff']) {
      const t = await o.get(`/console/outbox/${jobId}/${tail}`);
      const m = await o.get(`/console/outbox/${none}/${tail}`);
      assert.equal(t.status, 404, tail);
      assert.equal(t.text, m.text);
    }

    // Content deleted through the API: the console answers 410 as the API does.
    const del = await call(s.url, 'DELETE', `/v1/faxes/${jobId}/content`, { token });
    assert.equal(del.http, 200, del.body.message);
    const gone = await c.get(`/console/outbox/${jobId}/image?format=tiff`);
    assert.equal(gone.status, 410);
    assert.match(gone.text, /Fax image not available: it was deleted with the documents/);
    assert.equal(
      (await auditOf(a.account_id, u.id, 'fax.image_download')).length,
      2,
      'a refusal sends nothing',
    );
  });

  it("Webhooks: owners and admins only; the secret shown once; CSRF; another account's ids like missing; a URL with markup shows as text", async () => {
    const adm = await user(a.account_id, 'hooks-admin@example.com', 'admin');
    await user(a.account_id, 'hooks-sender@example.com', 'sender');
    const snd = await signedIn('hooks-sender@example.com');
    assert.doesNotMatch((await snd.get('/console/outbox')).text, />Webhooks</);
    assert.equal((await snd.get('/console/webhooks')).status, 403);
    const hooksOf = async (accountId: string) =>
      (await owner.query('SELECT id, url FROM webhook_endpoints WHERE account_id = $1', [accountId])).rows;
    const url = 'https://example.com/hook?<script>alert(1)</script>';
    assert.equal(
      (await snd.post('/console/webhooks', { url }, { csrf: await snd.csrf() })).status,
      403,
      'a sender may not add one',
    );

    const c = await signedIn('hooks-admin@example.com');
    assert.match((await c.get('/console/outbox')).text, /href="\/console\/webhooks"/);
    assert.equal((await c.post('/console/webhooks', { url })).status, 403, 'no CSRF token');
    assert.equal((await hooksOf(a.account_id)).length, 0);

    const bad = await c.post('/console/webhooks', { url: 'ftp://example.com/' }, { csrf: await c.csrf() });
    assert.equal(bad.status, 422);
    assert.match(bad.text, /id="w-url-error">url: must be an http or https URL without credentials/);
    const local = await c.post(
      '/console/webhooks',
      { url: 'http://127.0.0.1:9/x' },
      { csrf: await c.csrf() },
    );
    assert.equal(local.status, 422, "the API's address rules apply");

    const made = await c.post(
      '/console/webhooks',
      { url, event_types: 'fax.delivered' },
      { csrf: await c.csrf() },
    );
    assert.equal(made.status, 200, made.text.slice(0, 400));
    const secret = /id="webhook-secret">(whsec_[^<]+)</.exec(made.text)?.[1];
    assert.ok(secret, 'the secret is shown');
    const list = await c.get('/console/webhooks');
    assert.ok(!list.text.includes(secret), 'and only once');
    assert.ok(list.text.includes('https://example.com/hook?&lt;script&gt;alert(1)&lt;/script&gt;'));
    assert.ok(!list.text.includes('<script>alert(1)'));
    assert.match(list.text, /fax\.delivered/);
    const [hook] = await hooksOf(a.account_id);
    assert.equal(hook.url, url);

    // Another account's owner cannot delete it: answered like a missing one.
    await user(b.account_id, 'hooks-other@example.com', 'owner');
    const o = await signedIn('hooks-other@example.com');
    const none = '00000000-0000-4000-8000-000000000000';
    const theirs = await o.post(`/console/webhooks/${hook.id}/delete`, {}, { csrf: await o.csrf() });
    const missing = await o.post(`/console/webhooks/${none}/delete`, {}, { csrf: await o.csrf() });
    assert.equal(theirs.status, 404);
    assert.equal(theirs.text, missing.text);
    assert.equal((await hooksOf(a.account_id)).length, 1);
    assert.doesNotMatch((await o.get('/console/webhooks')).text, /example\.com\/hook/);

    assert.equal((await c.post(`/console/webhooks/${hook.id}/delete`, {})).status, 403, 'no CSRF token');
    const del = await c.post(`/console/webhooks/${hook.id}/delete`, {}, { csrf: await c.csrf() });
    assert.equal(del.status, 303);
    assert.equal((await hooksOf(a.account_id)).length, 0);
    assert.deepEqual(
      [
        ...(await auditOf(a.account_id, adm.id, 'webhook.create')),
        ...(await auditOf(a.account_id, adm.id, 'webhook.delete')),
      ].map((e) => `${e.object_type} ${e.object_id}`),
      [`webhook ${hook.id}`, `webhook ${hook.id}`],
    );
  });

  it("Mail senders: owners and admins only; the API's rules; CSRF; another account's ids like missing; markup shows as text", async () => {
    const own = await user(a.account_id, 'senders-owner@example.com', 'owner');
    await user(a.account_id, 'senders-viewer@example.com', 'viewer');
    const v = await signedIn('senders-viewer@example.com');
    assert.equal((await v.get('/console/mail-senders')).status, 403);
    assert.equal(
      (await v.post('/console/mail-senders', { address: 'x@clinic.example' }, { csrf: await v.csrf() }))
        .status,
      403,
    );
    const sendersOf = async (accountId: string) =>
      (
        await owner.query('SELECT id, address, caller_id FROM mail_senders WHERE account_id = $1', [
          accountId,
        ])
      ).rows;
    const c = await signedIn('senders-owner@example.com');
    assert.equal((await c.post('/console/mail-senders', { address: '*@clinic.example' })).status, 403);
    assert.equal((await sendersOf(a.account_id)).length, 0);

    const markup = '<script>alert(1)</script>';
    const bad = await c.post('/console/mail-senders', { address: markup }, { csrf: await c.csrf() });
    assert.equal(bad.status, 422);
    assert.match(bad.text, /id="m-address-error">address: must be an email address/);
    assert.ok(
      bad.text.includes('value="&lt;script&gt;alert(1)&lt;/script&gt;"'),
      'the draft is kept, as text',
    );
    assert.ok(!bad.text.includes(markup));
    const badCaller = await c.post(
      '/console/mail-senders',
      { address: 'doctor@clinic.example', caller_id: '+15550009999' },
      { csrf: await c.csrf() },
    );
    assert.equal(badCaller.status, 422, "a caller id not the account's");
    assert.match(badCaller.text, /id="m-caller-error">caller_id: /);

    for (const address of ['*@clinic.example', 'Doctor@Clinic.example']) {
      const r = await c.post(
        '/console/mail-senders',
        { address, caller_id: address.startsWith('*') ? a.numbers[0]! : '' },
        { csrf: await c.csrf() },
      );
      assert.equal(r.status, 303, r.text.slice(0, 400));
    }
    const rows = await sendersOf(a.account_id);
    assert.deepEqual(rows.map((r) => `${r.address} ${r.caller_id}`).sort(), [
      `*@clinic.example ${a.numbers[0]}`,
      'doctor@clinic.example null',
    ]);
    const page = await c.get('/console/mail-senders');
    assert.match(page.text, /\*@clinic\.example/);
    const taken = await c.post(
      '/console/mail-senders',
      { address: '*@clinic.example' },
      { csrf: await c.csrf() },
    );
    assert.equal(taken.status, 409);

    await user(b.account_id, 'senders-other@example.com', 'owner');
    const o = await signedIn('senders-other@example.com');
    const none = '00000000-0000-4000-8000-000000000000';
    const theirs = await o.post(`/console/mail-senders/${rows[0]!.id}/delete`, {}, { csrf: await o.csrf() });
    const missing = await o.post(`/console/mail-senders/${none}/delete`, {}, { csrf: await o.csrf() });
    assert.equal(theirs.status, 404);
    assert.equal(theirs.text, missing.text);
    assert.equal((await sendersOf(a.account_id)).length, 2);

    assert.equal(
      (await c.post(`/console/mail-senders/${rows[0]!.id}/delete`, {})).status,
      403,
      'no CSRF token',
    );
    const del = await c.post(`/console/mail-senders/${rows[0]!.id}/delete`, {}, { csrf: await c.csrf() });
    assert.equal(del.status, 303);
    assert.equal((await sendersOf(a.account_id)).length, 1);
    assert.equal((await auditOf(a.account_id, own.id, 'mail_sender.create')).length, 2);
    assert.deepEqual(
      (await auditOf(a.account_id, own.id, 'mail_sender.delete')).map((e) => e.object_id),
      [rows[0]!.id],
    );
  });

  it("contacts are deleted through the contacts service: another account's contact answers like a missing one", async () => {
    await user(a.account_id, 'contacts-del@example.com', 'sender');
    const c = await signedIn('contacts-del@example.com');
    const added = await c.post(
      '/console/contacts',
      { name: 'To delete', fax_number: '+15550004444' },
      { csrf: await c.csrf() },
    );
    assert.equal(added.status, 303);
    const id = (
      await owner.query("SELECT id FROM contacts WHERE account_id = $1 AND name = 'To delete'", [
        a.account_id,
      ])
    ).rows[0].id;
    await user(b.account_id, 'contacts-other@example.com', 'owner');
    const o = await signedIn('contacts-other@example.com');
    const none = '00000000-0000-4000-8000-000000000000';
    const theirs = await o.post(`/console/contacts/${id}/delete`, {}, { csrf: await o.csrf() });
    const missing = await o.post(`/console/contacts/${none}/delete`, {}, { csrf: await o.csrf() });
    assert.equal(theirs.status, 404);
    assert.equal(theirs.text, missing.text);
    assert.equal((await c.post(`/console/contacts/${id}/delete`, {})).status, 403, 'no CSRF token');
    const del = await c.post(`/console/contacts/${id}/delete`, {}, { csrf: await c.csrf() });
    assert.equal(del.status, 303);
    assert.equal((await owner.query('SELECT 1 FROM contacts WHERE id = $1', [id])).rowCount, 0);
  });
  it("Fax Defaults: every role sees them, owners and admins edit them by the API's rules; CSRF; another account's like missing; markup as text", async () => {
    const adm = await user(a.account_id, 'defaults-admin@example.com', 'admin');
    await user(a.account_id, 'defaults-sender@example.com', 'sender');
    const snd = await signedIn('defaults-sender@example.com');
    const seen = await snd.get('/console/fax-defaults');
    assert.equal(seen.status, 200);
    assert.match(seen.text, /href="\/console\/fax-defaults"/, 'in the navigation');
    assert.doesNotMatch(seen.text, /Add a Fax Default/);
    assert.equal(
      (
        await snd.post(
          '/console/fax-defaults',
          { name: 'x', fax_as: a.numbers[0]! },
          { csrf: await snd.csrf() },
        )
      ).status,
      403,
    );
    const countOf = async () =>
      (await owner.query('SELECT count(*)::int AS n FROM fax_defaults WHERE account_id = $1', [a.account_id]))
        .rows[0].n;
    const before = await countOf();

    const c = await signedIn('defaults-admin@example.com');
    const markup = '<script>alert(1)</script>';
    const form = {
      name: 'Referrals',
      fax_as: a.numbers[0]!,
      fax_quality: 'hd',
      cover_page: 'true',
      is_default: 'false',
      sender_name: 'Dr <b>Who</b>',
      cover_footer: markup,
      sender_email: '',
    };
    assert.equal((await c.post('/console/fax-defaults', form)).status, 403, 'no CSRF token');
    const notOurs = await c.post(
      '/console/fax-defaults',
      { ...form, fax_as: b.numbers[0]! },
      { csrf: await c.csrf() },
    );
    assert.equal(notOurs.status, 422, "another account's number as fax_as: the API's caller id rule");
    assert.match(notOurs.text, /id="n-fax_as-error">fax_as: /);
    const badMail = await c.post(
      '/console/fax-defaults',
      { ...form, sender_email: 'nope' },
      { csrf: await c.csrf() },
    );
    assert.equal(badMail.status, 422);
    assert.match(badMail.text, /id="n-sender_email-error">sender_email: must be an e-mail address/);
    assert.ok(badMail.text.includes('Dr &lt;b&gt;Who&lt;/b&gt;'), 'the draft kept, as text');
    assert.equal(await countOf(), before);

    const made = await c.post('/console/fax-defaults', form, { csrf: await c.csrf() });
    assert.equal(made.status, 303, made.text.slice(0, 500));
    const row = (
      await owner.query(
        "SELECT id, fax_quality, sender_name, cover_footer, sender_email FROM fax_defaults WHERE account_id = $1 AND name = 'Referrals'",
        [a.account_id],
      )
    ).rows[0];
    assert.deepEqual(
      { q: row.fax_quality, n: row.sender_name, f: row.cover_footer, e: row.sender_email },
      { q: 'hd', n: 'Dr <b>Who</b>', f: markup, e: null },
    );
    const list = await c.get('/console/fax-defaults');
    assert.ok(list.text.includes('Dr &lt;b&gt;Who&lt;/b&gt;'));
    const edit = await c.get(`/console/fax-defaults/${row.id}`);
    assert.equal(edit.status, 200);
    assert.ok(edit.text.includes('&lt;script&gt;alert(1)&lt;/script&gt;</textarea'));
    assert.ok(!edit.text.includes(markup));
    assert.equal((await snd.get(`/console/fax-defaults/${row.id}`)).status, 403, 'a sender does not edit');

    const saved = await c.post(
      `/console/fax-defaults/${row.id}`,
      { ...form, name: 'Referrals 2', cover_footer: '' },
      { csrf: await c.csrf() },
    );
    assert.equal(saved.status, 303, saved.text.slice(0, 500));
    const after = (await owner.query('SELECT name, cover_footer FROM fax_defaults WHERE id = $1', [row.id]))
      .rows[0];
    assert.deepEqual(after, { name: 'Referrals 2', cover_footer: null }, 'an emptied field is cleared');
    // The sender chooses it on New fax.
    assert.match((await snd.get('/console/send')).text, /Referrals 2/);

    await user(b.account_id, 'defaults-other@example.com', 'owner');
    const o = await signedIn('defaults-other@example.com');
    const none = '00000000-0000-4000-8000-000000000000';
    for (const [method, tail] of [
      ['get', ''],
      ['post', ''],
      ['post', '/delete'],
    ] as const) {
      const go = (id: string) =>
        method === 'get'
          ? o.get(`/console/fax-defaults/${id}${tail}`)
          : o.csrf().then((t) => o.post(`/console/fax-defaults/${id}${tail}`, form, { csrf: t }));
      const theirs = await go(row.id);
      const missing = await go(none);
      assert.equal(theirs.status, 404, `${method} ${tail}`);
      assert.equal(theirs.text, missing.text);
    }
    assert.doesNotMatch((await o.get('/console/fax-defaults')).text, /Referrals/);

    assert.equal((await c.post(`/console/fax-defaults/${row.id}/delete`, {})).status, 403, 'no CSRF token');
    const del = await c.post(`/console/fax-defaults/${row.id}/delete`, {}, { csrf: await c.csrf() });
    assert.equal(del.status, 303);
    assert.equal((await owner.query('SELECT 1 FROM fax_defaults WHERE id = $1', [row.id])).rowCount, 0);
    assert.deepEqual(
      [
        ...(await auditOf(a.account_id, adm.id, 'fax_default.create')),
        ...(await auditOf(a.account_id, adm.id, 'fax_default.update')),
        ...(await auditOf(a.account_id, adm.id, 'fax_default.delete')),
      ].map((e) => e.object_id),
      [row.id, row.id, row.id],
    );
  });
  it("Cover pages: uploaded through the API's sandbox by owners and admins; CSRF; another account's like missing; markup as text", async () => {
    const own = await user(a.account_id, 'covers-owner@example.com', 'owner');
    await user(a.account_id, 'covers-viewer@example.com', 'viewer');
    const doc = await PDFDocument.create();
    const p = doc.addPage([612, 792]);
    doc.getForm().createTextField('to_name').addToPage(p, { x: 100, y: 600, width: 300, height: 20 });
    const pdf = Buffer.from(await doc.save());
    const markup = '<script>alert(1)</script>';
    const liveOf = async (accountId: string) =>
      (
        await owner.query(
          'SELECT id, name FROM smart_templates WHERE account_id = $1 AND deleted_at IS NULL',
          [accountId],
        )
      ).rows;
    const before = (await liveOf(a.account_id)).length;

    const v = await signedIn('covers-viewer@example.com');
    const seen = await v.get('/console/cover-pages');
    assert.equal(seen.status, 200);
    assert.doesNotMatch(seen.text, /Upload a cover page/);
    const files = [{ field: 'file', name: 'cover.pdf', data: pdf }];
    assert.equal(
      (await v.post('/console/cover-pages', { name: 'x' }, { csrf: await v.csrf(), files })).status,
      403,
    );

    const c = await signedIn('covers-owner@example.com');
    assert.equal(
      (await c.post('/console/cover-pages', { name: markup }, { files })).status,
      403,
      'no CSRF token',
    );
    const notPdf = await c.post(
      '/console/cover-pages',
      { name: 'Broken' },
      { csrf: await c.csrf(), files: [{ field: 'file', name: 'x.pdf', data: Buffer.from('not a pdf') }] },
    );
    assert.equal(notPdf.status, 422, 'the API sandbox refuses it');
    assert.match(notPdf.text, /id="cp-file-error">file_data/);
    assert.equal((await liveOf(a.account_id)).length, before);

    const up = await c.post('/console/cover-pages', { name: markup }, { csrf: await c.csrf(), files });
    assert.equal(up.status, 303, up.text.slice(0, 500));
    const made = (await liveOf(a.account_id)).find((r) => r.name === markup);
    assert.ok(made);
    const list = await c.get('/console/cover-pages');
    assert.ok(list.text.includes('&lt;script&gt;alert(1)&lt;/script&gt;'));
    assert.ok(!list.text.includes(markup));
    assert.match(list.text, /to_name \(to_name\)/, 'its fields, read by the sandbox');

    await user(b.account_id, 'covers-other@example.com', 'owner');
    const o = await signedIn('covers-other@example.com');
    const none = '00000000-0000-4000-8000-000000000000';
    const theirs = await o.post(`/console/cover-pages/${made.id}/delete`, {}, { csrf: await o.csrf() });
    const missing = await o.post(`/console/cover-pages/${none}/delete`, {}, { csrf: await o.csrf() });
    assert.equal(theirs.status, 404);
    assert.equal(theirs.text, missing.text);
    assert.equal((await c.post(`/console/cover-pages/${made.id}/delete`, {})).status, 403, 'no CSRF token');
    const del = await c.post(`/console/cover-pages/${made.id}/delete`, {}, { csrf: await c.csrf() });
    assert.equal(del.status, 303);
    assert.equal((await liveOf(a.account_id)).length, before);
    assert.deepEqual(
      [
        ...(await auditOf(a.account_id, own.id, 'smart_template.create')),
        ...(await auditOf(a.account_id, own.id, 'smart_template.delete')),
      ].map((e) => e.object_id),
      [made.id, made.id],
    );
  });
  it("Audit: owners only; the account's events newest first, filters, cursor pages, CSV; markup in a filter as text", async () => {
    const own = await user(a.account_id, 'audit-owner@example.com', 'owner');
    await user(a.account_id, 'audit-admin@example.com', 'admin');
    const adm = await signedIn('audit-admin@example.com');
    assert.doesNotMatch((await adm.get('/console/outbox')).text, /href="\/console\/audit"/);
    assert.equal((await adm.get('/console/audit')).status, 403);
    assert.equal((await adm.get('/console/audit.csv')).status, 403);

    const c = await signedIn('audit-owner@example.com');
    // Three actions of this owner, newest last.
    for (const n of ['1', '2', '3']) {
      const r = await c.post(
        '/console/contacts',
        { name: `Audited ${n}`, fax_number: `+1555000700${n}` },
        { csrf: await c.csrf() },
      );
      assert.equal(r.status, 303);
    }
    await user(b.account_id, 'audit-other@example.com', 'owner');
    const o = await signedIn('audit-other@example.com');
    await o.post(
      '/console/contacts',
      { name: 'Other', fax_number: '+15550007009' },
      { csrf: await o.csrf() },
    );
    const other = (await owner.query("SELECT id FROM console_users WHERE email = 'audit-other@example.com'"))
      .rows[0].id;

    const page = await c.get('/console/audit');
    assert.equal(page.status, 200);
    assert.match(page.text, /href="\/console\/audit"/, 'in the navigation');
    assert.match(page.text, /audit-owner@example\.com/, 'actors by email');
    assert.ok(!page.text.includes(other), 'no event of another account');

    const rowsOf = (text: string) => [
      ...text.matchAll(/<td>(contact\.create)<\/td>\s*<td>contact ([^<\s]+)<\/td>/g),
    ];
    const first = await c.get(`/console/audit?action=contact.create&actor=${own.id}&limit=2`);
    const ids = (
      await owner.query(
        `SELECT object_id FROM audit_events WHERE account_id = $1 AND actor_id = $2 AND action = 'contact.create'
          ORDER BY created_at DESC, id DESC`,
        [a.account_id, own.id],
      )
    ).rows.map((r) => r.object_id);
    assert.equal(ids.length, 3);
    assert.deepEqual(
      rowsOf(first.text).map((m) => m[2]),
      ids.slice(0, 2),
      'newest first, 2 a page',
    );
    const older = /<a href="([^"]+)">Older events<\/a>/.exec(first.text)?.[1]?.replace(/&amp;/g, '&');
    assert.ok(older, 'a link to the next page');
    const second = await c.get(older);
    assert.deepEqual(
      rowsOf(second.text).map((m) => m[2]),
      ids.slice(2),
      'the cursor continues',
    );
    assert.doesNotMatch(second.text, /Older events/);

    const dated = await c.get('/console/audit?action=contact.create&from=2000-01-01&to=2000-01-02');
    assert.match(dated.text, /No events\./, 'the date filter');
    const badDate = await c.get('/console/audit?from=yesterday');
    assert.equal(badDate.status, 422);
    assert.match(
      badDate.text,
      /id="a-from-error">from: must be a date or date-time/,
      "the API's message, by its field",
    );

    const csvLink = /<a href="([^"]+)" download>/.exec(first.text)![1]!.replace(/&amp;/g, '&');
    const csv = await c.get(csvLink);
    assert.equal(csv.status, 200);
    assert.match(csv.headers.get('content-type')!, /^text\/csv/);
    const lines = csv.text.trim().split('\r\n');
    assert.match(lines[0]!, /^created_at,id,actor_type,actor_id,action/);
    assert.equal(lines.length, 3, 'header and the 2 events of the page');
    assert.ok(lines.slice(1).every((l) => l.includes('"contact.create"')));

    const x = await c.get(`/console/audit?action=${encodeURIComponent('<script>alert(1)</script>')}`);
    assert.equal(x.status, 200);
    assert.ok(x.text.includes('value="&lt;script&gt;alert(1)&lt;/script&gt;"'));
    assert.ok(!x.text.includes('<script>alert(1)'));
    assert.ok((await auditOf(a.account_id, own.id, 'audit_event.list')).length >= 5, 'reading it is audited');
  });
});
