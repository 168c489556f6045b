// Webhooks against a local receiver: Standard Webhooks signatures that verify with the
// `standardwebhooks` library, retries after a 500 and after a timeout, per-job order, no delivery to
// internal addresses unless allow-listed, and the delivery log the customer reads.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { faxEvent, type FaxEvent } from '../src/events/schema.ts';
import {
  AddressRefused,
  addressCheck,
  isInternalAddress,
  literalAddressRefusal,
} from '../src/webhooks/address.ts';
import {
  BREAKER_FAILURES,
  endpointPauseSeconds,
  nextAttemptAt,
  retryDelaySeconds,
} from '../src/webhooks/backoff.ts';
import { createEndpoint } from '../src/webhooks/repo.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

interface Received {
  url: string | undefined;
  headers: http.IncomingHttpHeaders;
  body: string;
  answered: number | 'hang';
}

/** A receiver whose answers are scripted per request: a status code or 'hang' (never answers). */
async function receiver(script: (n: number) => number | 'hang') {
  const got: Received[] = [];
  const hanging: http.ServerResponse[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const answer = script(got.length);
      got.push({
        url: req.url,
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
        answered: answer,
      });
      if (answer === 'hang') hanging.push(res);
      else res.writeHead(answer).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    got,
    port,
    url: `http://127.0.0.1:${port}/hooks/faxline`,
    close: () => {
      for (const r of hanging) r.destroy();
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe('webhook policy (pure)', () => {
  it('backs off exponentially and keeps retrying for more than a day', () => {
    const p = { baseSeconds: 30, maxSeconds: 4 * 3600, giveUpHours: 30 };
    assert.deepEqual(
      [1, 2, 3, 4].map((n) => retryDelaySeconds(n, p)),
      [30, 60, 120, 240],
    );
    assert.equal(retryDelaySeconds(20, p), 4 * 3600);
    const created = new Date('2026-11-26T00:00:00Z');
    let now = created;
    let attempt = 1;
    for (;;) {
      const next = nextAttemptAt(now, created, attempt, p);
      if (!next) break;
      now = next;
      attempt++;
    }
    assert.ok(
      now.getTime() - created.getTime() > 24 * 3_600_000,
      'last attempt more than a day after the first',
    );
    assert.ok(attempt >= 10 && attempt <= 20, `attempts: ${attempt}`);
  });

  it('pauses an endpoint after attempts in a row without an answer, longer each time', () => {
    const p = { baseSeconds: 30, maxSeconds: 4 * 3600, giveUpHours: 30 };
    assert.equal(BREAKER_FAILURES, 5);
    assert.deepEqual(
      [1, 4, 5, 6, 7, 30].map((n) => endpointPauseSeconds(n, p)),
      [null, null, 30, 60, 120, 4 * 3600],
    );
  });

  it('refuses internal addresses unless allow-listed', async () => {
    for (const ip of [
      '127.0.0.1',
      '10.1.2.3',
      '172.16.0.1',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '::1',
      'fe80::1',
      'fd00::1',
      '::ffff:127.0.0.1',
      '224.0.0.1',
    ])
      assert.equal(isInternalAddress(ip), true, ip);
    for (const ip of ['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111'])
      assert.equal(isInternalAddress(ip), false, ip);
    const check = addressCheck(['127.0.0.1:9999']);
    const refused = (kind: string, detail: RegExp) => (err: unknown) =>
      err instanceof AddressRefused && err.message === kind && detail.test(err.detail);
    await assert.rejects(
      check(new URL('http://localhost:8080/')),
      refused('address not allowed', /localhost/),
    );
    await assert.rejects(
      check(new URL('http://127.0.0.1:8080/')),
      refused('address not allowed', /is internal \(.*\); not allowed/),
    );
    await assert.rejects(
      check(new URL('http://[::1]:8080/')),
      refused('address not allowed', /is internal \(.*\); not allowed/),
    );
    await assert.rejects(
      check(new URL('ftp://127.0.0.1:9999/')),
      refused('URL not allowed', /http or https/),
    );
    assert.deepEqual(await check(new URL('http://127.0.0.1:9999/x')), { address: '127.0.0.1', family: 4 });
  });

  it('refuses internal hosts in every spelling, at registration and at delivery (finding 6)', async () => {
    for (const url of [
      'http://localhost./hook',
      'http://LOCALHOST.:8080/hook',
      'http://api.localhost./hook',
      'http://metadata.google.internal./computeMetadata',
      'http://printer.local/hook',
      'http://rabbitmq:15672/api', // a single-label name: a service of the network we run in
      'http://2130706433/', // 127.0.0.1 in decimal
      'http://0x7f.1/',
      'http://127.0.0.1./',
      'http://[::ffff:127.0.0.1]/',
      'http://[0:0:0:0:0:ffff:a9fe:a9fe]/latest', // 169.254.169.254, IPv4-mapped
      'http://0251.0376.0251.0376/', // 169.254.169.254 in octal
    ]) {
      assert.equal(
        literalAddressRefusal(new URL(url), []),
        'url: must not point to an internal address',
        `registration of ${url}`,
      );
      await assert.rejects(
        addressCheck([])(new URL(url)),
        (err: unknown) => err instanceof AddressRefused && err.message === 'address not allowed',
        `delivery to ${url}`,
      );
    }
    for (const url of ['https://hooks.example.com/x', 'https://hooks.example.com./x', 'http://8.8.8.8/'])
      assert.equal(literalAddressRefusal(new URL(url), []), null, url);
    // The operator's allow-list still opens a host, with or without its trailing dot.
    assert.equal(literalAddressRefusal(new URL('http://localhost.:8080/'), ['localhost:8080']), null);
  });
});

describe('webhooks', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let rx: Awaited<ReturnType<typeof receiver>>;
  let internal: Awaited<ReturnType<typeof receiver>>;
  let db: pg.Client;
  let token: string;
  let accountId: string;
  let closedPort: number;
  let flaky: Awaited<ReturnType<typeof receiver>>;

  before(async () => {
    // 1st request: 500; 2nd: no answer (timeout); then 200.
    rx = await receiver((n) => (n === 0 ? 500 : n === 1 ? 'hang' : 200));
    internal = await receiver(() => 200);
    // Holds its first BREAKER_FAILURES requests (each times out), then answers.
    flaky = await receiver((n) => (n < BREAKER_FAILURES ? 'hang' : 200));
    // A port nothing listens on: bound, noted, closed.
    const probe = http.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    closedPort = (probe.address() as AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    s = await startService({
      env: {
        // The test receiver and the closed port only; `internal` stays forbidden.
        WEBHOOK_ALLOW: `127.0.0.1:${rx.port},127.0.0.1:${closedPort},127.0.0.1:${flaky.port}`,
        WEBHOOK_ENDPOINTS_PER_ACCOUNT: '3',
        WEBHOOK_RETRY_BASE_SECONDS: '0.1',
        WEBHOOK_TIMEOUT_MS: '400',
        EVENTS_POLL_MS: '50',
      },
    });
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    const seed = await seedAccount(s);
    accountId = seed.account_id;
    token = await tokenFor(s.url, seed.api_key);
  });
  after(async () => {
    await db?.end();
    await s?.dropAll();
    await rx?.close();
    await internal?.close();
    await flaky?.close();
  });

  it('delivers signed events in order, retrying after a 500 and a timeout, and logs every attempt', async () => {
    const created = await call(s.url, 'POST', '/v1/webhooks', { token, body: { url: rx.url } });
    assert.equal(created.http, 200);
    assert.equal(created.body.message, 'Webhook created');
    const { webhook_id, secret } = created.body.data as { webhook_id: string; secret: string };
    assert.match(secret, /^whsec_/);

    const sent = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.pdf', file_data: await makePdfBase64(1) }],
      },
    });
    const jobId = sent.body.data.job_id as string;

    const ok = await eventually(async () => {
      const good = rx.got.filter((g) => g.answered === 200);
      return good.length >= 7 ? good : null;
    }, 20_000);
    const wh = new Webhook(secret);
    const events: FaxEvent[] = ok.map((g) => {
      const headers = {
        'webhook-id': String(g.headers['webhook-id']),
        'webhook-timestamp': String(g.headers['webhook-timestamp']),
        'webhook-signature': String(g.headers['webhook-signature']),
      };
      const payload = wh.verify(g.body, headers); // throws unless the signature is right
      const e = faxEvent.parse(payload);
      assert.equal(headers['webhook-id'], e.id, 'webhook-id is the event id (stable across retries)');
      return e;
    });
    assert.ok(events.every((e) => e.job_id === jobId && e.account_id === accountId));
    assert.deepEqual(
      events.map((e) => e.type),
      [
        'fax.accepted',
        'fax.preparing',
        'fax.queued',
        'fax.dialling',
        'fax.sending',
        'fax.page_sent',
        'fax.delivered',
      ],
      'one job’s events arrive in order, the first one after its retries',
    );
    // A forged signature does not verify.
    assert.throws(() =>
      wh.verify(ok[0]!.body.replace('fax.accepted', 'fax.delivered'), {
        'webhook-id': String(ok[0]!.headers['webhook-id']),
        'webhook-timestamp': String(ok[0]!.headers['webhook-timestamp']),
        'webhook-signature': String(ok[0]!.headers['webhook-signature']),
      }),
    );
    // The first event was tried three times with the same id.
    assert.deepEqual(
      rx.got.slice(0, 3).map((g) => [g.headers['webhook-id'], g.answered]),
      [
        [events[0]!.id, 500],
        [events[0]!.id, 'hang'],
        [events[0]!.id, 200],
      ],
    );

    const log = await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/webhooks/${webhook_id}/deliveries`, { token });
      const ds = r.body.data.deliveries as { state: string }[];
      return ds.length === 7 && ds.every((d) => d.state === 'delivered') ? r : null;
    });
    const first = (log.body.data.deliveries as any[]).find((d) => d.event_type === 'fax.accepted');
    assert.equal(first.attempts, 3);
    assert.deepEqual(
      first.attempt_log.map((a: any) => [a.attempt, a.http_status]),
      [
        [1, 500],
        [2, null],
        [3, 200],
      ],
    );
    assert.equal(first.attempt_log[0].error, 'receiver answered HTTP 500');
    assert.match(first.attempt_log[1].error, /no answer within 400 ms/);

    // Paged with opaque cursors, like the customer API's lists.
    const p1 = await call(s.url, 'GET', `/v1/webhooks/${webhook_id}/deliveries?limit=4`, { token });
    assert.equal(p1.body.data.deliveries.length, 4);
    assert.equal(p1.body.data.meta.has_more, true);
    const p2 = await call(
      s.url,
      'GET',
      `/v1/webhooks/${webhook_id}/deliveries?limit=4&cursor=${p1.body.data.meta.next_cursor}`,
      { token },
    );
    assert.equal(p2.body.data.deliveries.length, 3);
    assert.deepEqual(p2.body.data.meta, { next_cursor: null, has_more: false, limit: 4 });
    const bad = await call(s.url, 'GET', `/v1/webhooks/${webhook_id}/deliveries?cursor=abc`, { token });
    assert.deepEqual(bad.body, { status: 0, message: 'cursor: is not a cursor from a previous page' });

    // An SRE sees it in the metrics.
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    assert.match(metrics, /faxline_webhook_attempts_total\{outcome="failed"[^}]*\} 2/);
    assert.match(metrics, /faxline_events_published_total\{[^}]*\} \d+/);
    assert.match(metrics, /faxline_event_outbox_backlog\{[^}]*\} \d+/);

    // Another account sees neither the endpoint nor its log.
    const other = await seedAccount(s);
    const otherToken = await tokenFor(s.url, other.api_key);
    const hidden = await call(s.url, 'GET', `/v1/webhooks/${webhook_id}/deliveries`, { token: otherToken });
    assert.equal(hidden.http, 404);
    assert.deepEqual((await call(s.url, 'GET', '/v1/webhooks', { token: otherToken })).body.data, []);
  });

  it('never delivers to an internal address that is not allow-listed', async () => {
    const refused = await call(s.url, 'POST', '/v1/webhooks', {
      token,
      body: { url: 'http://169.254.169.254/latest' },
    });
    assert.equal(refused.http, 422);
    assert.deepEqual(refused.body, { status: 0, message: 'url: must not point to an internal address' });
    const refused2 = await call(s.url, 'POST', '/v1/webhooks', { token, body: { url: internal.url } });
    assert.equal(refused2.http, 422);

    // Host names are checked when delivering (DNS can change): registered behind the API's back.
    const other = await seedAccount(s);
    const otherToken = await tokenFor(s.url, other.api_key);
    const e = await createEndpoint(db, other.account_id, `http://localhost:${internal.port}/hook`, [
      'fax.accepted',
    ]);
    const sent = await call(s.url, 'POST', '/v1/faxes/send', {
      token: otherToken,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.pdf', file_data: await makePdfBase64(1) }],
      },
    });
    assert.equal(sent.body.status, 1);
    const log = await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/webhooks/${e.id}/deliveries`, { token: otherToken });
      const d = (r.body.data?.deliveries ?? [])[0];
      return d && d.attempts >= 2 ? d : null;
    });
    assert.equal(log.event_type, 'fax.accepted', 'only the subscribed type');
    // The customer reads a generic reason, not the addresses or names of our network (finding 6).
    assert.equal(log.last_error, 'address not allowed');
    assert.ok(
      log.attempt_log.every((a: { error: string }) => a.error === 'address not allowed'),
      JSON.stringify(log.attempt_log),
    );
    assert.equal(internal.got.length, 0, 'the internal receiver was never contacted');
  });

  it('refuses localhost. (trailing dot) at registration', async () => {
    for (const url of [
      `http://localhost.:${internal.port}/hook`,
      `http://2130706433:${internal.port}/hook`,
    ]) {
      const r = await call(s.url, 'POST', '/v1/webhooks', { token, body: { url } });
      assert.equal(r.http, 422, url);
      assert.deepEqual(r.body, { status: 0, message: 'url: must not point to an internal address' });
    }
    assert.equal(internal.got.length, 0);
  });

  it('tells the customer "connection refused", never the address it resolved to', async () => {
    // An allow-listed receiver that is down: the socket error names 127.0.0.1:<port>.
    const acc = await seedAccount(s);
    const accToken = await tokenFor(s.url, acc.api_key);
    const created = await call(s.url, 'POST', '/v1/webhooks', {
      token: accToken,
      body: { url: `http://127.0.0.1:${closedPort}/hook`, event_types: ['fax.accepted'] },
    });
    assert.equal(created.http, 200, JSON.stringify(created.body));
    const id = created.body.data.webhook_id as string;
    await call(s.url, 'POST', '/v1/faxes/send', {
      token: accToken,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.pdf', file_data: await makePdfBase64(1) }],
      },
    });
    const d = await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/webhooks/${id}/deliveries`, { token: accToken });
      const x = (r.body.data?.deliveries ?? [])[0];
      return x && x.attempts >= 1 && x.last_error ? x : null;
    });
    assert.equal(d.last_error, 'connection refused');
    assert.doesNotMatch(JSON.stringify(d), /127\.0\.0\.1|ECONNREFUSED/);
  });

  it('pauses an endpoint that keeps timing out, and resumes it after a success', async () => {
    const acc = await seedAccount(s);
    const accToken = await tokenFor(s.url, acc.api_key);
    const created = await call(s.url, 'POST', '/v1/webhooks', {
      token: accToken,
      body: { url: flaky.url, event_types: ['fax.accepted'] },
    });
    assert.equal(created.http, 200);
    assert.equal(created.body.data.paused_until, null);
    const id = created.body.data.webhook_id as string;
    await call(s.url, 'POST', '/v1/faxes/send', {
      token: accToken,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.pdf', file_data: await makePdfBase64(1) }],
      },
    });
    // After the BREAKER_FAILURES-th timeout in a row the endpoint shows a pause …
    const paused = await eventually(async () => {
      const r = await call(s.url, 'GET', '/v1/webhooks', { token: accToken });
      const e = (r.body.data as { webhook_id: string; paused_until: string | null }[]).find(
        (w) => w.webhook_id === id,
      );
      return e?.paused_until ? e : null;
    });
    assert.ok(flaky.got.length >= BREAKER_FAILURES);
    assert.ok(Date.parse(paused.paused_until!) > 0);
    // … and the next answer closes the breaker.
    const done = await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/webhooks/${id}/deliveries`, { token: accToken });
      return r.body.data.deliveries[0]?.state === 'delivered' ? r.body.data : null;
    });
    assert.equal(done.deliveries[0].attempts, BREAKER_FAILURES + 1);
    assert.equal(done.webhook.paused_until, null);
  });

  it("holds a paused endpoint's deliveries until its pause ends", async () => {
    const acc = await seedAccount(s);
    const accToken = await tokenFor(s.url, acc.api_key);
    const created = await call(s.url, 'POST', '/v1/webhooks', {
      token: accToken,
      body: { url: `${rx.url}/paused`, event_types: ['fax.accepted'] },
    });
    const id = created.body.data.webhook_id as string;
    const { rows } = await db.query<{ paused_until: Date }>(
      `UPDATE webhook_endpoints SET failures_in_row = $2, paused_until = now() + interval '1.5 seconds'
        WHERE id = $1 RETURNING paused_until`,
      [id, BREAKER_FAILURES],
    );
    await call(s.url, 'POST', '/v1/faxes/send', {
      token: accToken,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.pdf', file_data: await makePdfBase64(1) }],
      },
    });
    const got = await eventually(async () =>
      rx.got.find((g) => g.headers['webhook-id'] && g.url === '/hooks/faxline/paused'),
    );
    // The attempt is recorded once the receiver has answered, so a moment after it saw the request.
    const at = await eventually(async () => {
      const r = await db.query<{ started: Date }>(
        `SELECT a.at - make_interval(secs => a.duration_ms / 1000.0) AS started
           FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.endpoint_id = $1`,
        [id],
      );
      return r.rows.length > 0 ? r : null;
    });
    assert.ok(got);
    assert.equal(at.rows.length, 1, 'delivered at the first attempt after the pause');
    assert.ok(
      at.rows[0]!.started.getTime() >= rows[0]!.paused_until.getTime() - 50,
      `attempt started ${at.rows[0]!.started.toISOString()}, pause until ${rows[0]!.paused_until.toISOString()}`,
    );
  });

  it('caps the endpoints of one account (finding 4), also under concurrent registrations', async () => {
    const acc = await seedAccount(s);
    const accToken = await tokenFor(s.url, acc.api_key);
    const register = (n: number) =>
      call(s.url, 'POST', '/v1/webhooks', { token: accToken, body: { url: `${rx.url}/${n}` } });
    // Five at once against a cap of three: exactly three pass.
    const first = await Promise.all([1, 2, 3, 4, 5].map(register));
    assert.deepEqual(first.map((r) => r.http).sort(), [200, 200, 200, 422, 422]);
    const over = first.find((r) => r.http === 422)!;
    assert.deepEqual(over.body, {
      status: 0,
      message: 'Webhook limit reached: an account may have at most 3 webhooks; delete one first',
    });
    const list = await call(s.url, 'GET', '/v1/webhooks', { token: accToken });
    assert.equal(list.body.data.length, 3);
    // Deleting one makes room for one.
    const gone = await call(s.url, 'DELETE', `/v1/webhooks/${list.body.data[0].webhook_id}`, {
      token: accToken,
    });
    assert.equal(gone.http, 200);
    assert.equal((await register(6)).http, 200);
    assert.equal((await register(7)).http, 422);
    // Another account has its own allowance.
    const other = await seedAccount(s);
    const otherToken = await tokenFor(s.url, other.api_key);
    const r = await call(s.url, 'POST', '/v1/webhooks', { token: otherToken, body: { url: rx.url } });
    assert.equal(r.http, 200);
  });
});

describe('webhook fairness between accounts (finding 4)', () => {
  const TIMEOUT_MS = 60_000; // B's receiver never answers; no attempt of B ends during the test
  const SHARE = 4; // WEBHOOK_ACCOUNT_CONCURRENCY
  const ENDPOINTS = 20; // B's endpoints: the default WEBHOOK_ENDPOINTS_PER_ACCOUNT
  let s: Awaited<ReturnType<typeof startService>>;
  let slow: Awaited<ReturnType<typeof receiver>>;
  let fast: Awaited<ReturnType<typeof receiver>>;
  let db: pg.Client;

  before(async () => {
    slow = await receiver(() => 'hang');
    fast = await receiver(() => 200);
    s = await startService({
      env: {
        WEBHOOK_ALLOW: `127.0.0.1:${slow.port},127.0.0.1:${fast.port}`,
        WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
        WEBHOOK_ACCOUNT_CONCURRENCY: String(SHARE),
        EVENTS_POLL_MS: '50',
      },
    });
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
  });
  after(async () => {
    await slow?.close(); // ends B's hanging attempts first, so the deliverer stops at once
    await fast?.close();
    await db?.end();
    await s?.dropAll();
  });

  it("one account's slow receivers hold only its own share; another account's delivery goes out at once", async () => {
    const fax = async (token: string) =>
      call(s.url, 'POST', '/v1/faxes/send', {
        token,
        body: {
          fax_number: '+15551234567',
          fax_data: [{ file_name: 'a.pdf', file_data: await makePdfBase64(1) }],
        },
      });
    // B: as many endpoints as the default cap allows, all on a receiver that holds every request.
    const b = await seedAccount(s);
    const bToken = await tokenFor(s.url, b.api_key);
    for (let i = 0; i < ENDPOINTS; i++) {
      const r = await call(s.url, 'POST', '/v1/webhooks', {
        token: bToken,
        body: { url: `${slow.url}/${i}` },
      });
      assert.equal(r.http, 200, JSON.stringify(r.body));
    }
    for (let i = 0; i < 3; i++) assert.equal((await fax(bToken)).body.status, 1);
    // B's backlog is due: at least one delivery per endpoint and fax, all heads of their order.
    await eventually(async () => {
      const r = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM webhook_deliveries WHERE account_id = $1 AND event_type = 'fax.accepted'`,
        [b.account_id],
      );
      return r.rows[0]!.n >= 3 * ENDPOINTS;
    });
    await eventually(async () => slow.got.length >= SHARE);

    // A: one endpoint on a receiver that answers at once, one fax.
    const a = await seedAccount(s);
    const aToken = await tokenFor(s.url, a.api_key);
    const ra = await call(s.url, 'POST', '/v1/webhooks', {
      token: aToken,
      body: { url: fast.url, event_types: ['fax.accepted'] },
    });
    assert.equal(ra.http, 200);
    assert.equal((await fax(aToken)).body.status, 1);

    // A's delivery arrives while every attempt of B is still hanging: well within B's timeout (the
    // unfair deliverer made A wait for B's whole batch to time out).
    await eventually(async () => fast.got.length >= 1, TIMEOUT_MS / 3);
    const ended = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM webhook_attempts t JOIN webhook_deliveries d ON d.id = t.delivery_id
        WHERE d.account_id = $1`,
      [b.account_id],
    );
    assert.equal(ended.rows[0]!.n, 0, "no attempt of B had ended when A's delivery arrived");
    assert.equal(slow.got.length, SHARE, `B holds exactly its share of ${SHARE} slots`);
    assert.equal(JSON.parse(fast.got[0]!.body).type, 'fax.accepted');
  });
});
