// faxline/client: its generated types match the /openapi.json of the running service (and the
// comparison notices a changed schema), it works against the real service (sends with an
// Idempotency-Key, cursor iteration, typed refusals), and its transport rules (token renewal, 401,
// 429/503 with Retry-After, bounded) against a scripted HTTP server.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { OpenAPI3 } from 'openapi-typescript';
import { clientTypesSource, generatedPath, openapiDocument } from '../scripts/client-generate.ts';
import type { DemoSeed } from '../src/admin/seed.ts';
import { FaxlineClient, FaxlineError } from '../src/client/index.ts';
import { seedAccount } from './support/client.ts';
import { startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

describe('faxline/client against the running service', { timeout: 300_000 }, () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let seed: DemoSeed;
  let served: OpenAPI3;
  before(async () => {
    s = await startService();
    seed = await seedAccount(s);
    served = (await (await fetch(`${s.url}/openapi.json`)).json()) as OpenAPI3;
  });
  after(async () => {
    await s?.dropAll();
  });

  it('src/client/openapi.ts is what `npm run client:generate` makes of the served /openapi.json', async () => {
    const checkedIn = readFileSync(generatedPath, 'utf8');
    assert.ok(
      (await clientTypesSource(served)) === checkedIn,
      'src/client/openapi.ts is stale: run `npm run client:generate` and commit it',
    );
    // The script builds the document in-process: the same document the service serves.
    assert.deepEqual(await openapiDocument(), served);
  });

  it('the comparison notices a route whose schema changed without regenerating', async () => {
    const changed = structuredClone(served) as OpenAPI3 & { paths: Record<string, any> };
    const body =
      changed.paths['/v1/faxes/cancel-schedule'].post.requestBody.content['application/json'].schema;
    body.properties.reason = { type: 'string' };
    assert.notEqual(await clientTypesSource(changed), readFileSync(generatedPath, 'utf8'));
  });

  it('sends with an Idempotency-Key (the same key answers the same job), reads the fax back, iterates a list by cursor', async () => {
    const c = new FaxlineClient({ baseUrl: s.url, apiKey: seed.api_key });
    const pdf = await makePdfBase64(1);
    const body = {
      fax_number: '+15550100000',
      fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
      client_reference: 'client-test',
    };
    const first = await c.sendFax(body, { idempotencyKey: 'client-test-1' });
    const again = await c.sendFax(body, { idempotencyKey: 'client-test-1' });
    assert.equal(again.job_id, first.job_id, 'the same key and body answer the first job');
    const generated = await c.sendFax(body);
    assert.notEqual(generated.job_id, first.job_id);
    assert.match(generated.idempotency_key, /^[0-9a-f-]{36}$/);
    const fax = await c.getFax(first.job_id);
    assert.equal(fax.client_reference, 'client-test');
    const pages: string[] = [];
    for await (const f of c.faxes({ client_reference: 'client-test', limit: 1 })) pages.push(f.job_id);
    assert.deepEqual(pages.sort(), [first.job_id, generated.job_id].sort(), 'two pages of one, by cursor');
  });

  it('refusals throw FaxlineError with the envelope and the field named', async () => {
    const c = new FaxlineClient({ baseUrl: s.url, apiKey: seed.api_key });
    const e = await c
      .sendFax({ fax_number: '12', fax_data: [{ file_name: 'a.pdf', file_url: 'ftp://x' }] })
      .then(
        () => assert.fail('accepted'),
        (err: unknown) => err,
      );
    assert.ok(e instanceof FaxlineError, String(e));
    assert.equal(e.http, 422);
    assert.equal(e.status, 0);
    assert.equal(e.field, 'fax_number');
    assert.ok(e.issues.length >= 2, e.message);
    const nf = await c.getFax('00000000-0000-4000-8000-000000000000').catch((err: unknown) => err);
    assert.ok(nf instanceof FaxlineError);
    assert.deepEqual([nf.http, nf.message, nf.field], [404, 'Fax not found', undefined]);
    const bad = new FaxlineClient({ baseUrl: s.url, apiKey: 'fxl_key_wrong' });
    const ae = await bad.getFax(seed.account_id).catch((err: unknown) => err);
    assert.ok(ae instanceof FaxlineError && ae.isAuth);
    assert.equal(ae.message, 'API Secret Key is invalid.');
  });
});

describe('faxline/client transport, against a scripted server', () => {
  /** What the server answers; null: no answer, the connection is reset. */
  type Handler = (
    req: http.IncomingMessage,
    body: string,
  ) => { http: number; body: unknown; headers?: Record<string, string> } | null;
  let server: http.Server;
  let base: string;
  let handler: Handler;
  const seen: {
    method: string;
    url: string;
    auth: string | undefined;
    idem: string | undefined;
    at: number;
  }[] = [];
  before(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c));
      req.on('end', () => {
        seen.push({
          method: req.method!,
          url: req.url!,
          auth: req.headers.authorization,
          idem: req.headers['idempotency-key'] as string | undefined,
          at: Date.now(),
        });
        const r = handler(req, body);
        if (r === null) {
          req.socket.resetAndDestroy();
          return;
        }
        res
          .writeHead(r.http, { 'content-type': 'application/json', ...r.headers })
          .end(JSON.stringify(r.body));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  let tokens = 0;
  const auth = (expiresIn = 86400) => ({
    http: 200,
    body: {
      status: 1,
      message: 'Token Generate Successfully',
      data: { access_token: `t${++tokens}`, token_type: 'Bearer', expires_in: expiresIn },
    },
  });
  const fax = (id: string) => ({ http: 200, body: { status: 1, message: 'ok', data: { job_id: id } } });

  it('429 waits Retry-After, then succeeds; 503 is retried at most `retries` times, then thrown', async () => {
    seen.length = 0;
    let n = 0;
    handler = (req) => {
      if (req.url === '/v1/auth') return auth();
      n++;
      if (n === 1)
        return {
          http: 429,
          body: { status: 0, message: 'Too many requests', data: { retry_after: 1 } },
          headers: { 'retry-after': '1' },
        };
      return fax('f1');
    };
    const retries: number[] = [];
    const c = new FaxlineClient({ baseUrl: base, apiKey: 'k', onRetry: (r) => retries.push(r.delayMs) });
    assert.equal((await c.getFax('f1')).job_id, 'f1');
    assert.deepEqual(retries, [1000]);
    const calls = seen.filter((x) => x.url === '/v1/faxes/f1');
    assert.equal(calls.length, 2);
    assert.ok(
      calls[1]!.at - calls[0]!.at >= 950,
      `waited ${calls[1]!.at - calls[0]!.at} ms for Retry-After: 1`,
    );

    seen.length = 0;
    handler = (req) =>
      req.url === '/v1/auth' ? auth() : { http: 503, body: { status: 0, message: 'Service unavailable' } };
    const c2 = new FaxlineClient({ baseUrl: base, apiKey: 'k', retries: 2, retryBaseDelayMs: 10 });
    const e = await c2.getFax('f2').catch((err: unknown) => err);
    assert.ok(e instanceof FaxlineError);
    assert.deepEqual([e.http, e.message], [503, 'Service unavailable']);
    assert.equal(seen.filter((x) => x.url === '/v1/faxes/f2').length, 3, 'one try and two retries');
  });

  it('the token is fetched once, renewed before it expires, and once more after a 401', async () => {
    seen.length = 0;
    let now = 1_000_000;
    let expire = false;
    handler = (req) => {
      if (req.url === '/v1/auth') return auth(100);
      if (expire) {
        expire = false;
        return {
          http: 401,
          body: { status: 401, message: 'UNAUTHORIZED', data: 'Access token has expired.' },
        };
      }
      return fax('f3');
    };
    const c = new FaxlineClient({ baseUrl: base, apiKey: 'k', now: () => now });
    await c.getFax('f3');
    await c.getFax('f3');
    const authsAt = () => seen.filter((x) => x.url === '/v1/auth').length;
    assert.equal(authsAt(), 1, 'one token for both requests');
    now += 91_000; // within the last tenth of its 100 s life, not yet expired: renewed
    await c.getFax('f3');
    assert.equal(authsAt(), 2, 'renewed before expiry');
    expire = true;
    assert.equal((await c.getFax('f3')).job_id, 'f3');
    assert.equal(authsAt(), 3, 'a 401 gets a new token and one retry');
    const used = seen.filter((x) => x.url === '/v1/faxes/f3').map((x) => x.auth);
    assert.equal(used.at(-1), `Bearer t${tokens}`);
    assert.ok(
      seen.filter((x) => x.url === '/v1/auth').every((x) => x.auth === undefined),
      'the key goes to /v1/auth only, with no bearer',
    );
  });

  it('a retried send carries the same Idempotency-Key each time', async () => {
    seen.length = 0;
    let n = 0;
    handler = (req) => {
      if (req.url === '/v1/auth') return auth();
      return ++n < 3
        ? { http: 503, body: { status: 0, message: 'down' }, headers: { 'retry-after': '0' } }
        : fax('f4');
    };
    const c = new FaxlineClient({ baseUrl: base, apiKey: 'k' });
    const r = await c.sendFax({
      fax_number: '+15550100000',
      fax_data: [{ file_name: 'a.pdf', file_url: 'https://x/a.pdf' }],
    });
    const keys = seen.filter((x) => x.url === '/v1/faxes/send').map((x) => x.idem);
    assert.equal(keys.length, 3);
    assert.ok(
      keys.every((k) => k === r.idempotency_key),
      JSON.stringify(keys),
    );
  });

  it('a request that got no answer is sent again when that is harmless, and only then', async () => {
    // The first token request, the first read and the first send are reset without an answer (as a
    // kept-alive connection closed by the server just as it is reused): each is sent again.
    seen.length = 0;
    const resets = new Set(['/v1/auth', '/v1/faxes/f5', '/v1/faxes/send']);
    handler = (req) => {
      if (resets.delete(req.url!)) return null;
      if (req.url === '/v1/auth') return auth();
      if (req.url === '/v1/faxes/cancel-schedule') return null;
      return fax('f5');
    };
    const retried: string[] = [];
    const c = new FaxlineClient({
      baseUrl: base,
      apiKey: 'k',
      retryBaseDelayMs: 10,
      onRetry: (r) => retried.push(`${r.method} ${r.path} ${r.http}`),
    });
    assert.equal((await c.getFax('f5')).job_id, 'f5');
    const sent = await c.sendFax({
      fax_number: '+15550100000',
      fax_data: [{ file_name: 'a.pdf', file_url: 'https://x/a.pdf' }],
    });
    assert.equal(sent.job_id, 'f5');
    assert.deepEqual(retried, ['POST /v1/auth 0', 'GET /v1/faxes/f5 0', 'POST /v1/faxes/send 0']);
    const keys = seen.filter((x) => x.url === '/v1/faxes/send').map((x) => x.idem);
    assert.deepEqual(keys, [sent.idempotency_key, sent.idempotency_key], 'the same key both times');

    // A POST without an Idempotency-Key may have been carried out before the reset: not repeated.
    seen.length = 0;
    retried.length = 0;
    const e = await c.api
      .POST('/v1/faxes/cancel-schedule', { body: { job_id: 'f5' } })
      .catch((err: unknown) => err);
    assert.ok(e instanceof FaxlineError, String(e));
    assert.equal(e.http, 0);
    assert.match(e.message, /cannot reach/);
    assert.equal(seen.filter((x) => x.url === '/v1/faxes/cancel-schedule').length, 1, 'sent once');
    assert.deepEqual(retried, []);

    // Bounded: a read that is never answered is tried 1 + `retries` times, then thrown.
    seen.length = 0;
    handler = (req) => (req.url === '/v1/auth' ? auth() : null);
    const c2 = new FaxlineClient({ baseUrl: base, apiKey: 'k', retries: 2, retryBaseDelayMs: 10 });
    const e2 = await c2.getFax('f6').catch((err: unknown) => err);
    assert.ok(e2 instanceof FaxlineError, String(e2));
    assert.equal(e2.http, 0);
    assert.equal(seen.filter((x) => x.url === '/v1/faxes/f6').length, 3, 'one try and two retries');
  });
});
