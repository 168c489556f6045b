// The web console over HTTP (issue 29): the first user from the admin CLI, sign-in and its throttle,
// CSRF on every state-changing request, sign-out and the idle/absolute timeouts (injected clock),
// disabled users, roles, another account's ids, escaping of what customers and far ends typed,
// security headers and cached assets. The browser walk-through is test/console-browser.test.ts.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { DemoSeed } from '../src/admin/seed.ts';
import { createUser } from '../src/auth/console-users.ts';
import { ManualClock } from '../src/clock.ts';
import { seedAccount } from './support/client.ts';
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
});
