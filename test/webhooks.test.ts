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
import { addressCheck, isInternalAddress } from '../src/webhooks/address.ts';
import { nextAttemptAt, retryDelaySeconds } from '../src/webhooks/backoff.ts';
import { createEndpoint } from '../src/webhooks/repo.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

interface Received {
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
      got.push({ headers: req.headers, body: Buffer.concat(chunks).toString(), answered: answer });
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
    await assert.rejects(check(new URL('http://localhost:8080/')), /is internal \(.*\); not allowed/);
    await assert.rejects(check(new URL('http://127.0.0.1:8080/')), /is internal \(.*\); not allowed/);
    await assert.rejects(check(new URL('http://[::1]:8080/')), /is internal \(.*\); not allowed/);
    await assert.rejects(check(new URL('ftp://127.0.0.1:9999/')), /http or https/);
    assert.deepEqual(await check(new URL('http://127.0.0.1:9999/x')), { address: '127.0.0.1', family: 4 });
  });
});

describe('webhooks', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let rx: Awaited<ReturnType<typeof receiver>>;
  let internal: Awaited<ReturnType<typeof receiver>>;
  let db: pg.Client;
  let token: string;
  let accountId: string;

  before(async () => {
    // 1st request: 500; 2nd: no answer (timeout); then 200.
    rx = await receiver((n) => (n === 0 ? 500 : n === 1 ? 'hang' : 200));
    internal = await receiver(() => 200);
    s = await startService({
      env: {
        WEBHOOK_ALLOW: `127.0.0.1:${rx.port}`, // the test receiver only; `internal` stays forbidden
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
    assert.match(
      log.last_error,
      /address (127\.0\.0\.1|::1) of localhost is internal \((loopback.*)\); not allowed/,
    );
    assert.equal(internal.got.length, 0, 'the internal receiver was never contacted');
  });
});
