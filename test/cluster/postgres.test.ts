// faxline on a PostgreSQL primary with a synchronous streaming replica of the test's own
// (test/support/cluster/pg-replica.ts), under a steady load of sends and scheduled sends: the
// primary is SIGKILLed, the replica promoted, and the old primary started again, as a standby of the
// new one. The service knows both servers only as one multi-host DATABASE_URL with
// target_session_attrs=read-write, and follows the failover without a restart. The case prints its
// ledger line and its availability figures, and ends with nothing lost, nothing sent twice, no job
// for a refusal, and the old primary read-only.
// Run with `npm run test:cluster` (not part of `npm test`).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { seedDemo } from '../../src/admin/seed.ts';
import { createPool } from '../../src/db/pool.ts';
import { newPgClient } from '../../src/db/hosts.ts';
import { createLogger } from '../../src/log.ts';
import { call, tokenFor } from '../support/client.ts';
import { startPgReplicaPair, type PgReplicaPair } from '../support/cluster/pg-replica.ts';
import {
  acceptedAtLeast,
  figures,
  figuresLine,
  refusedAtLeast,
  settledLedger,
  startLoad,
} from '../support/cluster/load.ts';
import { eventually, startService } from '../support/harness.ts';
import { ledgerLine } from '../support/ledger.ts';
import { makePdfBase64 } from '../support/pdf.ts';

type Svc = Awaited<ReturnType<typeof startService>>;

describe('PostgreSQL failover: primary killed, replica promoted', () => {
  let pair: PgReplicaPair;
  let s: Svc;
  let token: string;
  let accountId: string;

  before(async () => {
    pair = await startPgReplicaPair();
    s = await startService({
      databaseUrl: pair.multiHostUrl('faxline'),
      env: { SIM_SPEEDUP: '100', DB_POOL_SIZE: '5', OUTBOX_SWEEP_SECONDS: '1' },
    });
    const c = newPgClient(s.cfg.DATABASE_URL);
    await c.connect();
    try {
      await c.query('BEGIN');
      const seed = await seedDemo(c);
      await c.query('UPDATE fax_defaults SET cover_page = false WHERE account_id = $1', [seed.account_id]);
      await c.query('COMMIT');
      accountId = seed.account_id;
      token = await tokenFor(s.url, seed.api_key);
    } finally {
      await c.end();
    }
  });

  after(async () => {
    await s?.dropAll().catch(() => undefined);
    await pair?.destroy();
  });

  it('loses nothing accepted, sends nothing twice, and never writes to the old primary again', async () => {
    const from = Date.now();
    const load = startLoad(s.url, token, await makePdfBase64(1), { senders: 2, scheduleEvery: 4 });
    const fault = { start: 0, end: 0 };
    try {
      await acceptedAtLeast(load, from, 10, 30_000, 'faxes flowing before the fault');
      fault.start = Date.now();
      await pair.kill(0);
      // The time an operator or a failover manager takes to decide: intake refuses meanwhile.
      await refusedAtLeast(load, fault.start, 3, 30_000, 'refused while there is no primary');
      await pair.promote(1);
      await acceptedAtLeast(load, Date.now(), 10, 60_000, 'accepted by the promoted replica');
      // The old primary comes back, but only as a standby of the new one.
      await pair.startAsStandbyOf(0, 1);
      assert.equal(await pair.inRecovery(0), true, 'the old primary is a standby');
      await acceptedAtLeast(load, Date.now(), 5, 60_000, 'accepted with the old primary back as a standby');
      fault.end = Date.now();
    } finally {
      await load.stop();
    }
    const primaryUrl = pair.url(1, 'faxline');
    const ids = load.accepted(from);
    const l = await settledLedger(primaryUrl, ids);
    const f = await figures(primaryUrl, load, from, fault);
    console.log(ledgerLine('postgres-failover', l));
    console.log(figuresLine('postgres-failover', f));
    assert.deepEqual(load.wrong, [], 'every refusal is a 503 in the envelope');
    assert.equal(l.lost, 0, `lost: ${JSON.stringify(l.byState)}`);
    assert.equal(l.duplicates, 0, 'no attempt dialled twice');
    assert.equal(l.delivered, ids.length, `all delivered: ${JSON.stringify(l.byState)}`);
    assert.ok(f.refused > 0, 'sends were refused while there was no primary');

    // No job for a refused send, and every accepted one is on the new primary.
    const c = new pg.Client({ connectionString: primaryUrl });
    await c.connect();
    try {
      const r = await c.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM fax_jobs WHERE account_id = $1',
        [accountId],
      );
      assert.equal(r.rows[0]!.n, ids.length);
    } finally {
      await c.end();
    }
    // The old primary is first in the URL and up again: a new pool still writes to the new primary
    // only (its first connection finds the old one read-only, fails, and points the pool further).
    const pool = createPool(s.cfg.DATABASE_URL, 2, createLogger('silent'));
    try {
      const port = await eventually(async () => {
        const r = await pool.query<{ port: number }>('SELECT inet_server_port() AS port');
        return r.rows[0]!.port;
      }, 10_000);
      assert.equal(port, pair.servers[1].port);
    } finally {
      await pool.end();
    }
    assert.equal((await call(s.url, 'GET', '/readyz')).http, 200);
  });
});
