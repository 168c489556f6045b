// The bad-input corpus: hostile and malformed requests against the API. Each must get a clear error
// in the envelope (4xx, status 0 or 401, a message naming the problem, no stack trace, nothing
// secret), the process must stay up, and a good request right after must still work.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { call, seedAccount, tokenFor, type Reply } from './support/client.ts';
import { startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

interface Case {
  name: string;
  method?: string;
  path?: string;
  token?: 'good' | 'none' | 'apikey' | 'revoked' | 'expired' | 'other' | string;
  body?: unknown;
  raw?: string;
  headers?: Record<string, string>;
}

describe('bad-input corpus', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  before(async () => {
    s = await startService({
      env: { MAX_REQUEST_BYTES: String(2 * 1024 * 1024), MAX_DOCUMENT_BYTES: String(512 * 1024) },
    });
  });
  after(async () => {
    await s.dropAll();
  });

  it('answers every case with a clear error in the envelope and keeps serving', async () => {
    const seed = await seedAccount(s);
    const good = await tokenFor(s.url, seed.api_key);
    const revokedSeed = await seedAccount(s);
    const revoked = await tokenFor(s.url, revokedSeed.api_key);
    const expiredSeed = await seedAccount(s);
    const expired = await tokenFor(s.url, expiredSeed.api_key);
    const db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    await db.query('UPDATE api_keys SET revoked_at = now() WHERE account_id = $1', [revokedSeed.account_id]);
    await db.query(
      `UPDATE access_tokens SET expires_at = now() - interval '1 second' WHERE account_id = $1`,
      [expiredSeed.account_id],
    );
    await db.end();

    const pdf = await makePdfBase64(1);
    const doc = (over: Record<string, unknown> = {}) => ({ file_name: 'a.pdf', file_data: pdf, ...over });
    const send = (over: Record<string, unknown>): Case => ({
      name: `send ${JSON.stringify(over).slice(0, 60)}`,
      body: { fax_number: '+15551234567', fax_data: [doc()], ...over },
    });
    const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);

    const cases: Case[] = [
      // malformed JSON and wrong framing
      { name: 'truncated JSON', raw: '{"fax_number": "+1555' },
      { name: 'trailing garbage', raw: '{"fax_number":"+15551234567"} xyz' },
      { name: 'not JSON at all', raw: 'fax_number=+15551234567' },
      { name: 'JSON array body', raw: '[1,2,3]' },
      { name: 'JSON string body', raw: '"hello"' },
      { name: 'JSON null body', raw: 'null' },
      { name: 'empty body', raw: '' },
      { name: 'deep nesting 5000', raw: `{"fax_data":${deep(5000)}}` },
      {
        name: 'deep nesting 5000 under an Idempotency-Key',
        raw: `{"fax_data":${deep(5000)}}`,
        headers: { 'idempotency-key': 'deep-5000' },
      },
      {
        name: 'deep objects 5000 under an Idempotency-Key',
        raw: `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`,
        headers: { 'idempotency-key': 'deep-objects' },
      },
      { name: 'deep nesting 40 (over the depth limit)', raw: `{"fax_data":${deep(40)}}` },
      {
        name: '__proto__ pollution',
        raw: '{"__proto__":{"admin":true},"fax_number":"+15551234567","fax_data":[]}',
      },
      { name: 'constructor pollution', raw: '{"constructor":{"prototype":{"x":1}}}' },
      { name: 'text/plain content type', raw: '{}', headers: { 'content-type': 'text/plain' } },
      {
        name: 'form content type',
        raw: 'a=b',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      },
      {
        name: 'body over the request limit',
        raw: JSON.stringify({ fax_number: 'x'.repeat(3 * 1024 * 1024) }),
      },
      // wrong types
      send({ fax_number: 15551234567 }),
      send({ fax_number: null }),
      send({ fax_number: ['+15551234567'] }),
      send({ fax_data: 'a.pdf' }),
      send({ fax_data: [] }),
      send({ fax_data: [1] }),
      send({ fax_data: [null] }),
      send({ fax_data: [{ file_name: 5, file_data: pdf }] }),
      send({ fax_data: [doc({ file_url: 'https://example.org/a.pdf' })] }),
      send({ fax_data: [{ file_name: 'a.pdf' }] }),
      send({ fax_priority: 'urgent' }),
      send({ fax_priority: 1 }),
      send({ fax_quality: 'ultra' }),
      send({ scheduled_date: 'tomorrow' }),
      send({ scheduled_date: '2026-13-45T99:99:99Z' }),
      send({ scheduled_date: 1767225600 }),
      send({ approval_required: 'yes' }),
      send({ caller_id: '5551234567' }),
      send({ template_id: 'x', smart_document_id: 'y' }),
      send({ template_id: '00000000-0000-0000-0000-000000000000' }),
      send({ template_id: "' OR 1=1 --" }),
      send({ smart_document_id: '../../etc/passwd' }),
      // E.164 edge cases and unicode
      send({ fax_number: '+0123456789' }),
      send({ fax_number: '+1' }),
      send({ fax_number: '+1234567890123456' }),
      send({ fax_number: '+1555 123 4567' }),
      send({ fax_number: '+1555\u200b1234567' }),
      send({ fax_number: '\uff0b\uff11\uff15\uff15\uff15\uff11\uff12\uff13\uff14\uff15\uff16\uff17' }),
      send({ fax_number: '+1555123456\u0000' }),
      send({ fax_number: '\u202e7654321555+' }),
      send({ fax_number: '\ud800' }),
      // huge strings and arrays
      send({ subject: 's'.repeat(100_000) }),
      send({ message: 'm'.repeat(1_000_000) }),
      send({ fax_data: [doc({ file_name: 'n'.repeat(10_000) })] }),
      send({
        fax_data: Array.from({ length: 5000 }, () => ({
          file_name: 'a.pdf',
          file_url: 'https://a.example/a.pdf',
        })),
      }),
      // bad documents
      send({ fax_data: [doc({ file_data: '!!!not base64!!!' })] }),
      send({ fax_data: [doc({ file_data: 'abc' })] }),
      send({ fax_data: [doc({ file_data: '' })] }),
      send({ fax_data: [doc({ file_data: Buffer.from('hello, not a pdf').toString('base64') })] }),
      send({
        fax_data: [doc({ file_data: Buffer.from('%PDF-' + 'A'.repeat(600 * 1024)).toString('base64') })],
      }),
      send({ fax_data: [{ file_name: 'a.pdf', file_url: 'file:///etc/passwd' }] }),
      send({ fax_data: [{ file_name: 'a.pdf', file_url: 'javascript:alert(1)' }] }),
      send({ fax_data: [{ file_name: 'a.pdf', file_url: 'gopher://127.0.0.1:25/' }] }),
      send({ fax_data: [{ file_name: 'a.pdf', file_url: 'ftp://example.org/a.pdf' }] }),
      send({ fax_data: [{ file_name: 'a.pdf', file_url: 'not a url' }] }),
      // authentication
      { ...send({}), name: 'no Authorization header', token: 'none' },
      { ...send({}), name: 'API key as Bearer', token: 'apikey' },
      { ...send({}), name: 'revoked key token', token: 'revoked' },
      { ...send({}), name: 'expired token', token: 'expired' },
      { ...send({}), name: 'random token', token: 'fxl_at_' + 'A'.repeat(43) },
      { ...send({}), name: 'huge token', token: 'x'.repeat(8000) },
      { ...send({}), name: 'lowercase bearer', headers: { authorization: `bearer ${good}` }, token: 'none' },
      { ...send({}), name: 'two spaces', headers: { authorization: `Bearer  ${good}` }, token: 'none' },
      {
        ...send({}),
        name: 'Basic auth',
        headers: { authorization: 'Basic Z3Vlc3Q6Z3Vlc3Q=' },
        token: 'none',
      },
      // auth endpoint
      { name: 'auth wrong key', path: '/v1/auth', token: 'none', body: { api_secret_key: 'fxl_key_nope' } },
      { name: 'auth key as number', path: '/v1/auth', token: 'none', body: { api_secret_key: 12345 } },
      { name: 'auth missing key', path: '/v1/auth', token: 'none', body: {} },
      {
        name: 'auth key 1MB',
        path: '/v1/auth',
        token: 'none',
        body: { api_secret_key: 'k'.repeat(1_000_000) },
      },
      // other endpoints
      {
        name: 'forward unknown job',
        path: '/v1/faxes/forward',
        body: { job_id: 'nope', fax_number: '+15551234567' },
      },
      { name: 'forward bad number', path: '/v1/faxes/forward', body: { job_id: 'nope', fax_number: '12' } },
      { name: 'cancel missing job_id', path: '/v1/faxes/cancel-schedule', body: {} },
      { name: 'cancel job_id object', path: '/v1/faxes/cancel-schedule', body: { job_id: { $ne: null } } },
      { name: 'get fax path traversal', method: 'GET', path: '/v1/faxes/..%2F..%2Fetc%2Fpasswd' },
      { name: 'get fax sql', method: 'GET', path: "/v1/faxes/1'%20OR%20'1'='1" },
      { name: 'unknown route', method: 'GET', path: '/v1/nothing-here' },
      { name: 'wrong method', method: 'DELETE', path: '/v1/faxes/send' },
    ];

    const tokens: Record<string, string | undefined> = {
      good,
      none: undefined,
      apikey: seed.api_key,
      revoked,
      expired,
    };
    const failures: string[] = [];
    let handled = 0;
    for (const c of cases) {
      const t = c.token === undefined ? good : c.token in tokens ? tokens[c.token] : c.token;
      let r: Reply;
      try {
        r = await call(s.url, c.method ?? 'POST', c.path ?? '/v1/faxes/send', {
          ...(t ? { token: t } : {}),
          ...(c.body !== undefined ? { body: c.body } : {}),
          ...(c.raw !== undefined ? { raw: c.raw } : {}),
          ...(c.headers ? { headers: c.headers } : {}),
        });
      } catch (err) {
        failures.push(`${c.name}: request failed: ${(err as Error).message}`);
        continue;
      }
      const problems: string[] = [];
      if (r.http < 400 || r.http >= 500) problems.push(`HTTP ${r.http}`);
      if (r.body.status !== 0 && r.body.status !== 401) problems.push(`status ${r.body.status}`);
      if (typeof r.body.message !== 'string' || r.body.message.length < 3) problems.push('no message');
      const text = JSON.stringify(r.body);
      if (/node_modules|\n\s+at |stack/i.test(text)) problems.push('stack trace in body');
      if (text.includes(seed.api_key) || text.includes(good)) problems.push('secret echoed');
      if (problems.length) failures.push(`${c.name}: ${problems.join(', ')} → ${text.slice(0, 200)}`);
      else handled++;
    }
    console.log(`bad-input: ${cases.length} cases tried, ${handled} handled`);
    assert.deepEqual(failures, []);
    assert.equal(handled, cases.length);

    // Still serving, and a good request works.
    assert.equal((await call(s.url, 'GET', '/healthz')).http, 200);
    const ok = await call(s.url, 'POST', '/v1/faxes/send', {
      token: good,
      body: { fax_number: '+15551234567', fax_data: [doc()] },
    });
    assert.equal(ok.http, 200, JSON.stringify(ok.body));
    // Nothing secret in the log either.
    assert.ok(!s.logs.text.includes(seed.api_key));
    assert.ok(!s.logs.text.includes(good));
  });

  it('refuses text PostgreSQL cannot store (NUL, unpaired surrogates) with 422 naming the field', async () => {
    // Issue 16, finding 2: a NUL in subject reached the database and came back as a 500.
    const seed = await seedAccount(s);
    const token = await tokenFor(s.url, seed.api_key);
    const pdf = await makePdfBase64(1);
    const body = { fax_number: '+15551234567', fax_data: [{ file_name: 'a.pdf', file_data: pdf }] };
    const json = (extra: string) =>
      `{"fax_number":"+15551234567","fax_data":[{"file_name":"a.pdf","file_data":"${pdf}"}],${extra}}`;
    const nul = /contains the character U\+0000 \(NUL\), which cannot be stored/;
    const lone = /contains an unpaired UTF-16 surrogate/;
    const cases: { name: string; path?: string; body?: unknown; raw?: string; message: RegExp }[] = [
      { name: 'NUL in subject', body: { ...body, subject: 'x\u0000y' }, message: /^subject: / },
      // JSON text with the escape itself, as a hostile client sends it.
      { name: 'lone high surrogate in subject', raw: json('"subject":"x\\ud800y"'), message: /^subject: / },
      { name: 'lone low surrogate in message', raw: json('"message":"\\udc00"'), message: /^message: / },
      {
        name: 'NUL in a file name',
        body: { ...body, fax_data: [{ file_name: 'a\u0000.pdf', file_data: pdf }] },
        message: /^fax_data\[0\]\.file_name: /,
      },
      { name: 'NUL in a property name', raw: json('"x\\u0000":1'), message: /^property name "x\\u0000" / },
      {
        name: 'NUL in a reject reason',
        path: '/v1/faxes/reject',
        body: { job_id: '00000000-0000-4000-8000-000000000000', reason: 'no\u0000' },
        message: /^reason: /,
      },
      {
        name: 'NUL in a webhook URL',
        path: '/v1/webhooks',
        body: { url: 'https://example.org/hook\u0000' },
        message: /^url: /,
      },
    ];
    for (const c of cases) {
      const r = await call(s.url, 'POST', c.path ?? '/v1/faxes/send', {
        token,
        ...(c.raw !== undefined ? { raw: c.raw } : { body: c.body }),
      });
      assert.equal(r.http, 422, `${c.name}: HTTP ${r.http} ${JSON.stringify(r.body)}`);
      assert.equal(r.body.status, 0, c.name);
      assert.match(r.body.message, c.message, c.name);
      assert.match(r.body.message, /surrogate/.test(c.name) ? lone : nul, c.name);
    }
    // The API key is only hashed, never stored: a key with a NUL is just a wrong key (the contract's 401).
    const key = await call(s.url, 'POST', '/v1/auth', { body: { api_secret_key: 'fxl_key_\u0000' } });
    assert.equal(key.http, 401);
    assert.deepEqual(key.body, { status: 0, message: 'API Secret Key is invalid.' });
    // Paired surrogates are ordinary text: an emoji in the subject is accepted and kept.
    const ok = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: { ...body, subject: 'hi \u{1F600}' },
    });
    assert.equal(ok.http, 200, JSON.stringify(ok.body));
    const got = await call(s.url, 'GET', `/v1/faxes/${ok.body.data.job_id as string}`, { token });
    assert.equal(got.body.data.options.subject, 'hi \u{1F600}');
  });
});

/** What the server sent on a raw connection, and whether it closed it. */
interface RawResult {
  text: string;
  closed: boolean;
  sent: number;
}

/**
 * Opens a connection to `base`, writes `head`, then writes `drip` one byte at a time every `everyMs`
 * until the server closes the connection or `drip` runs out (then waits `graceMs` more). Resolves
 * with what the server sent; every step is bounded by the drip's length.
 */
function rawExchange(
  base: string,
  head: string | Buffer,
  o: { drip?: string; everyMs?: number; graceMs?: number } = {},
): Promise<RawResult> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const sock = connect({ host: hostname, port: Number(port) });
    let text = '';
    let sent = 0;
    let closed = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = () => {
      clearTimeout(timer);
      sock.destroy();
      resolve({ text, closed, sent });
    };
    sock.on('error', (err: NodeJS.ErrnoException) => {
      // A reset after the server's answer still counts as closed by the server.
      if (err.code === 'ECONNRESET' || err.code === 'EPIPE') {
        closed = true;
        finish();
      } else reject(err);
    });
    sock.on('data', (b: Buffer) => {
      text += b.toString('latin1');
    });
    sock.on('close', () => {
      closed = true;
      finish();
    });
    sock.on('connect', () => {
      sock.write(head);
      sent += Buffer.byteLength(head);
      const drip = o.drip ?? '';
      let i = 0;
      const step = () => {
        if (closed) return;
        if (i >= drip.length) {
          timer = setTimeout(finish, o.graceMs ?? 10_000);
          return;
        }
        sock.write(drip[i++]!);
        sent++;
        timer = setTimeout(step, o.everyMs ?? 250);
      };
      step();
    });
  });
}

/** Status and envelope of a raw HTTP/1.1 answer. */
function parseAnswer(text: string): { http: number; body: unknown; headers: string } {
  const end = text.indexOf('\r\n\r\n');
  assert.ok(end > 0, `no complete answer: ${JSON.stringify(text.slice(0, 200))}`);
  const headers = text.slice(0, end).toLowerCase();
  return {
    http: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]),
    body: JSON.parse(text.slice(end + 4)),
    headers,
  };
}

describe('HTTP edge: what a request costs before it is authenticated and complete', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let good: string;
  before(async () => {
    s = await startService({
      env: {
        MAX_REQUEST_BYTES: String(2 * 1024 * 1024),
        HTTP_REQUEST_TIMEOUT_SECONDS: '2',
        HTTP_HEADERS_TIMEOUT_SECONDS: '1',
      },
    });
    good = await tokenFor(s.url, (await seedAccount(s)).api_key);
  });
  after(async () => {
    await s.dropAll();
  });

  const post = (path: string, length: number, auth?: string) =>
    `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n` +
    `${auth ? `Authorization: ${auth}\r\n` : ''}\r\n`;

  it('a big body with no or a bad token: 401 after the headers, body never read, connection closed', async () => {
    const total = 1_500_000; // under MAX_REQUEST_BYTES: only the token can refuse it early
    const part = `{"fax_number":"+15551234567","fax_data":[{"file_name":"a.pdf","file_data":"${'A'.repeat(60_000)}`;
    for (const auth of [undefined, 'Bearer fxl_at_nope', `Bearer ${good}x`]) {
      // Headers and 60 KB of 1.5 MB; the rest is never sent: the answer must come without it.
      const r = await rawExchange(
        s.url,
        Buffer.concat([Buffer.from(post('/v1/faxes/send', total, auth)), Buffer.from(part)]),
        {
          graceMs: 10_000,
        },
      );
      assert.ok(r.sent < total / 10, 'the client never sent most of the body');
      const a = parseAnswer(r.text);
      assert.equal(a.http, 401, r.text.slice(0, 300));
      assert.equal((a.body as { message: string }).message, 'UNAUTHORIZED');
      assert.match(a.headers, /connection: close/);
      assert.ok(r.closed, 'the server closed the connection');
    }
    // /healthz answers meanwhile and after.
    assert.equal((await call(s.url, 'GET', '/healthz')).http, 200);
  });

  it('a body over a route’s limit is refused with 413 before it is read (/v1/auth takes 64 KiB)', async () => {
    const r = await rawExchange(s.url, post('/v1/auth', 1_000_000) + '{"api_secret_key":"fxl_key_', {
      graceMs: 10_000,
    });
    const a = parseAnswer(r.text);
    assert.equal(a.http, 413, r.text.slice(0, 300));
    assert.deepEqual(a.body, { status: 0, message: 'Request body is too large' });
    assert.ok(r.closed);
  });

  it('JSON nested 5,000 deep: 400 in the envelope with or without an Idempotency-Key, never a 500', async () => {
    const pdf = await makePdfBase64(1);
    const valid = `"fax_number":"+15551234567","fax_data":[{"file_name":"a.pdf","file_data":"${pdf}"}]`;
    const shapes = {
      arrays: `${'['.repeat(5000)}${']'.repeat(5000)}`,
      objects: `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`,
    };
    const answers: string[] = [];
    for (const [shape, deep] of Object.entries(shapes))
      for (const key of [undefined, `deep-${shape}`]) {
        // Valid but for an unknown property nested deep (unknown properties are otherwise ignored).
        const r = await call(s.url, 'POST', '/v1/faxes/send', {
          token: good,
          raw: `{${valid},"extra":${deep}}`,
          ...(key ? { headers: { 'idempotency-key': key } } : {}),
        });
        answers.push(`${shape}${key ? ' + Idempotency-Key' : ''}: ${r.http} ${r.body.message}`);
      }
    const refused = 'Request body nests arrays and objects more than 32 levels deep';
    assert.deepEqual(answers, [
      `arrays: 400 ${refused}`,
      `arrays + Idempotency-Key: 400 ${refused}`,
      `objects: 400 ${refused}`,
      `objects + Idempotency-Key: 400 ${refused}`,
    ]);
  });

  it('a body trickled a byte at a time is cut at the request timeout with 408 in the envelope', async () => {
    // 2 s allowed; the drip would last 30 s (120 bytes, one per 250 ms) if nothing cut it.
    const r = await rawExchange(s.url, post('/v1/faxes/send', 1000, `Bearer ${good}`), {
      drip: '{' + ' '.repeat(119),
      everyMs: 250,
      graceMs: 0,
    });
    assert.ok(
      r.closed && r.sent < post('/v1/faxes/send', 1000, `Bearer ${good}`).length + 120,
      'cut before the drip ended',
    );
    const a = parseAnswer(r.text);
    assert.equal(a.http, 408, r.text.slice(0, 300));
    assert.deepEqual(a.body, { status: 0, message: 'Request was not received in time' });
  });

  it('headers trickled a byte at a time are cut at the headers timeout with 408', async () => {
    const r = await rawExchange(s.url, 'GET /healthz HTTP/1.1\r\nHost: x\r\n', {
      drip: 'X-Slow: ' + 'a'.repeat(112),
      everyMs: 250,
      graceMs: 0,
    });
    assert.ok(r.closed, 'cut before the drip ended');
    assert.equal(parseAnswer(r.text).http, 408, r.text.slice(0, 300));
  });
});
