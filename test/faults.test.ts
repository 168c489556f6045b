// Fault suite: faults injected while faxes are flowing, each case ending with its ledger line.
// Private PostgreSQL and RabbitMQ instances and TCP proxies keep the shared servers untouched.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { AMQP_URL, eventually, startService } from './support/harness.ts';
import { ledgerLine, readLedger } from './support/ledger.ts';
import { makePdfBase64 } from './support/pdf.ts';
import { startPrivatePostgres, type PrivatePostgres } from './support/private-postgres.ts';
import { startProxy, type TcpProxy } from './support/tcp-proxy.ts';

type Svc = Awaited<ReturnType<typeof startService>>;

/** Sends faxes one after another for `ms`, running `faults` at their offsets; returns accepted ids. */
async function flow(
  s: Svc,
  token: string,
  ms: number,
  faults: { at: number; run: () => Promise<void> | void }[],
): Promise<{ accepted: string[]; refused: Map<number, number> }> {
  const file_data = await makePdfBase64(1);
  const accepted: string[] = [];
  const refused = new Map<number, number>();
  const t0 = Date.now();
  const pending = faults.map((f) => new Promise<void>((r) => setTimeout(r, f.at)).then(() => f.run()));
  while (Date.now() - t0 < ms) {
    const r = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: { fax_number: '+15552223333', fax_data: [{ file_name: 'f.pdf', file_data }] },
    }).catch(() => null);
    if (r?.http === 200) accepted.push(r.body.data.job_id);
    else {
      const code = r?.http ?? 0;
      refused.set(code, (refused.get(code) ?? 0) + 1);
      if (r) {
        assert.equal(r.body.status, 0, `refusal in the envelope: ${JSON.stringify(r.body)}`);
        assert.ok(
          [503].includes(r.http),
          `a refusal during a fault is 503, got ${r.http}: ${r.body.message}`,
        );
      }
      await new Promise((res) => setTimeout(res, 50));
    }
  }
  await Promise.all(pending);
  return { accepted, refused };
}

async function explain(s: Svc, url: string, ids: string[]) {
  const pg = (await import('pg')).default;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const r = await c.query(
    `SELECT id, state FROM fax_jobs WHERE id = ANY($1::uuid[]) AND state NOT IN ('delivered','failed','cancelled','unknown')`,
    [ids],
  );
  await c.end();
  for (const line of s.logs.lines.filter((x) => /"level":(40|50)/.test(x)).slice(0, 15))
    console.log('WARN', line.slice(0, 300));
  for (const row of r.rows) {
    console.log('STUCK', row.id, row.state);
    for (const line of s.logs.lines.filter((x) => x.includes(row.id))) console.log('   ', line.slice(0, 400));
  }
}

async function settle(databaseUrl: string, ids: string[], timeoutMs = 60_000) {
  return eventually(
    async () => {
      const l = await readLedger(databaseUrl, ids);
      return l.delivered + l.failed + l.cancelled + l.unknown + l.lost === ids.length && l.lost === 0
        ? l
        : null;
    },
    timeoutMs,
    250,
  ).catch(async () => readLedger(databaseUrl, ids));
}

describe('faults', () => {
  describe('PostgreSQL crash (immediate stop) and restart', () => {
    let pgi: PrivatePostgres;
    let s: Svc;
    before(async () => {
      pgi = await startPrivatePostgres();
      s = await startService({ databaseUrl: pgi.url, env: { SIM_SPEEDUP: '100', DB_POOL_SIZE: '5' } });
    });
    after(async () => {
      await s?.dropAll();
      await pgi?.stop();
    });

    it('loses nothing accepted and sends nothing twice', async () => {
      const seed = await seedAccount(s);
      const token = await tokenFor(s.url, seed.api_key);
      const { accepted, refused } = await flow(s, token, 6000, [
        { at: 1500, run: () => pgi.crash() },
        { at: 3500, run: () => pgi.start() },
      ]);
      assert.ok(accepted.length > 5, `some faxes accepted (${accepted.length})`);
      assert.ok((refused.get(503) ?? 0) > 0, 'sends were refused while the database was down');
      const l = await settle(pgi.url, accepted);
      console.log(ledgerLine('postgres-crash', l));
      if (l.lost > 0) await explain(s, pgi.url, accepted);
      assert.equal(l.lost, 0);
      assert.equal(l.duplicates, 0);
      assert.equal(l.delivered, accepted.length, JSON.stringify(l.byState));
    });
  });

  describe('connections to RabbitMQ and PostgreSQL cut and stalled', () => {
    let amqpProxy: TcpProxy;
    let pgProxy: TcpProxy;
    let s: Svc;
    let dbName: string;
    before(async () => {
      amqpProxy = await startProxy(5672);
      pgProxy = await startProxy(5432);
      // The service reaches both servers only through the proxies.
      const { createDatabase } = await import('./support/harness.ts');
      const db = await createDatabase();
      dbName = db.url;
      const viaProxy = new URL(db.url);
      viaProxy.port = String(pgProxy.port);
      s = await startService({
        databaseUrl: viaProxy.toString(),
        env: {
          AMQP_URL: AMQP_URL.replace(':5672', `:${amqpProxy.port}`),
          SIM_SPEEDUP: '100',
          DB_POOL_SIZE: '5',
        },
      });
      (s as { dropDb?: () => Promise<void> }).dropDb = db.drop;
    });
    after(async () => {
      await s?.dropAll();
      await (s as { dropDb?: () => Promise<void> }).dropDb?.();
      await amqpProxy?.close();
      await pgProxy?.close();
    });

    it('recovers from cuts and stalls of each connection without loss or duplicates', async () => {
      const seed = await seedAccount(s);
      const token = await tokenFor(s.url, seed.api_key);
      const { accepted } = await flow(s, token, 9000, [
        { at: 1000, run: () => amqpProxy.cut() },
        { at: 2000, run: () => amqpProxy.heal() },
        { at: 3500, run: () => pgProxy.cut() },
        { at: 4500, run: () => pgProxy.heal() },
        { at: 6000, run: () => pgProxy.stall() },
        { at: 7000, run: () => pgProxy.heal() },
      ]);
      assert.ok(accepted.length > 5);
      const l = await settle(dbName, accepted);
      console.log(ledgerLine('connection-cut-stall', l));
      if (l.lost > 0) await explain(s, dbName, accepted);
      assert.equal(l.lost, 0);
      assert.equal(l.duplicates, 0);
      assert.equal(l.delivered, accepted.length, JSON.stringify(l.byState));
    });
  });
});
