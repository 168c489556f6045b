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

/** How the traffic went since the flow began and since the last fault step ran. */
interface Progress {
  accepted: number;
  refused: number;
  since: { accepted: number; refused: number };
}

/** A fault step: runs once `ready` sees its condition (bounded), after the step before it. */
interface Step {
  what: string;
  ready: (p: Progress) => boolean;
  run: () => Promise<void> | void;
}

/**
 * Sends faxes one after another while the steps run in order, each when its condition is seen
 * (traffic flowing, the fault noticed by the service); ends once `afterLast` more faxes are accepted
 * after the last step. Every step and the end are bounded by `stepMs`. Returns the accepted ids.
 */
async function flow(
  s: Svc,
  token: string,
  steps: Step[],
  o: { afterLast: number; stepMs?: number },
): Promise<{ accepted: string[]; refused: Map<number, number> }> {
  const file_data = await makePdfBase64(1);
  const accepted: string[] = [];
  const refused = new Map<number, number>();
  let refusedTotal = 0;
  let mark = { accepted: 0, refused: 0 };
  const progress = (): Progress => ({
    accepted: accepted.length,
    refused: refusedTotal,
    since: { accepted: accepted.length - mark.accepted, refused: refusedTotal - mark.refused },
  });
  let stop = false;
  const sending = (async () => {
    while (!stop) {
      const r = await call(s.url, 'POST', '/v1/faxes/send', {
        token,
        body: { fax_number: '+15552223333', fax_data: [{ file_name: 'f.pdf', file_data }] },
      }).catch(() => null);
      if (r?.http === 200) accepted.push(r.body.data.job_id);
      else {
        const code = r?.http ?? 0;
        refused.set(code, (refused.get(code) ?? 0) + 1);
        refusedTotal++;
        if (r) {
          assert.equal(r.body.status, 0, `refusal in the envelope: ${JSON.stringify(r.body)}`);
          assert.ok(
            [503].includes(r.http),
            `a refusal during a fault is 503, got ${r.http}: ${r.body.message}`,
          );
        }
        // A client backing off between refusals (not a wait for anything).
        await new Promise((res) => setTimeout(res, 50));
      }
    }
  })();
  try {
    const stepMs = o.stepMs ?? 20_000;
    for (const step of [
      ...steps,
      {
        what: `${o.afterLast} faxes accepted after the last step`,
        ready: (p: Progress) => p.since.accepted >= o.afterLast,
        run: () => undefined,
      },
    ]) {
      await Promise.race([
        eventually(async () => step.ready(progress()), stepMs, 20).catch(() => {
          throw new Error(`not seen within ${stepMs} ms: ${step.what} (${JSON.stringify(progress())})`);
        }),
        sending.then(() => {
          throw new Error('the sending loop ended early');
        }),
      ]);
      await step.run();
      mark = { accepted: accepted.length, refused: refusedTotal };
    }
  } finally {
    stop = true;
    await sending.catch(() => undefined);
  }
  await sending;
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
      const { accepted, refused } = await flow(
        s,
        token,
        [
          { what: 'faxes flowing', ready: (p) => p.since.accepted >= 5, run: () => pgi.crash() },
          {
            what: 'sends refused while it is down',
            ready: (p) => p.since.refused >= 3,
            run: () => pgi.start(),
          },
        ],
        { afterLast: 5 },
      );
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
      const connected = () => s.logs.lines.filter((l) => l.includes('"msg":"rabbitmq connected"')).length;
      let connectedAtHeal = 0;
      const refusedBy = (proxy: TcpProxy) => {
        const before = proxy.refused();
        return () => proxy.refused() > before;
      };
      let amqpRefused = () => false;
      let pgRefused = () => false;
      const { accepted } = await flow(
        s,
        token,
        [
          {
            what: 'faxes flowing',
            ready: (p) => p.since.accepted >= 5,
            run: () => {
              amqpRefused = refusedBy(amqpProxy);
              amqpProxy.cut();
            },
          },
          {
            what: 'the service trying RabbitMQ again through the cut',
            ready: () => amqpRefused(),
            run: () => {
              connectedAtHeal = connected();
              amqpProxy.heal();
            },
          },
          {
            what: 'RabbitMQ reconnected and faxes flowing',
            ready: (p) => connected() > connectedAtHeal && p.since.accepted >= 3,
            run: () => {
              pgRefused = refusedBy(pgProxy);
              pgProxy.cut();
            },
          },
          {
            what: 'the service trying PostgreSQL again through the cut',
            ready: () => pgRefused(),
            run: () => pgProxy.heal(),
          },
          { what: 'faxes flowing again', ready: (p) => p.since.accepted >= 3, run: () => pgProxy.stall() },
          { what: 'queries held by the stall', ready: () => pgProxy.held() > 0, run: () => pgProxy.heal() },
        ],
        { afterLast: 5 },
      );
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
