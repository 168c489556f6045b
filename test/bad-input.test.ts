// The bad-input corpus: hostile and malformed requests against the API. Each must get a clear error
// in the envelope (4xx, status 0 or 401, a message naming the problem, no stack trace, nothing
// secret), the process must stay up, and a good request right after must still work.
import assert from 'node:assert/strict';
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
