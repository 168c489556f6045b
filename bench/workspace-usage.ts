// The cost of GET /v1/workspace's usage query (this month's faxes of one account by state) on a
// fax_jobs table of 1.5 million rows: a large account (100,000 faxes this month, 500,000 before) and a
// small one (1,000). Prints EXPLAIN ANALYZE of each. `node bench/workspace-usage.ts` (a scratch
// database on TEST_PG_ADMIN_URL's server, dropped after).
import pg from 'pg';
import { migrate } from '../src/db/migrate.ts';

const ADMIN = process.env.TEST_PG_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const admin = new pg.Client({ connectionString: ADMIN });
await admin.connect();
const name = 'faxline_measure_ws_' + process.pid;
await admin.query(`CREATE DATABASE ${name}`);
const u = new URL(ADMIN);
u.pathname = `/${name}`;
const url = u.toString();
const pool = new pg.Pool({ connectionString: url, max: 2 });
try {
  await migrate(pool as never);
  const a = (await pool.query(`INSERT INTO accounts (name) VALUES ('big') RETURNING id`)).rows[0].id;
  const o = (await pool.query(`INSERT INTO accounts (name) VALUES ('other') RETURNING id`)).rows[0].id;
  const states = `(ARRAY['delivered','delivered','delivered','failed','queued','scheduled'])[1 + (g % 6)]`;
  // The big account: 100,000 faxes this month and 100,000 in each of the 5 months before; another account 400,000.
  const ins = (acc: string, n: number, from: string, span: string) =>
    pool.query(
      `INSERT INTO fax_jobs (id, account_id, kind, state, fax_number, caller_id, fax_quality, fax_priority, page_count, pages_sent, created_at, dispatched_at)
       SELECT gen_random_uuid(), $1, 'send', ${states}, '+15551234567', '+15550000001', 'standard', 'regular', 3, 3,
              $2::timestamptz + (g::float / $3) * $4::interval, now()
         FROM generate_series(1, $3) g`,
      [acc, from, n, span],
    );
  const monthStart = new Date(Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), 1));
  await ins(a, 100_000, monthStart.toISOString(), '20 days');
  await ins(a, 500_000, new Date(monthStart.getTime() - 150 * 86_400_000).toISOString(), '149 days');
  await ins(o, 400_000, new Date(monthStart.getTime() - 150 * 86_400_000).toISOString(), '175 days');
  await pool.query('VACUUM ANALYZE fax_jobs');
  const q = `EXPLAIN (ANALYZE, BUFFERS) SELECT state, count(*)::int, coalesce(sum(page_count),0)::int, coalesce(sum(pages_sent),0)::int
     FROM fax_jobs WHERE account_id = $1 AND created_at >= $2 AND created_at < $3 GROUP BY state`;
  const to = new Date(Date.UTC(monthStart.getUTCFullYear(), monthStart.getUTCMonth() + 1, 1));
  for (let i = 0; i < 3; i++) {
    const r = await pool.query(q, [a, monthStart, to]);
    if (i === 2) console.log(r.rows.map((x) => x['QUERY PLAN']).join('\n'));
  }
  // A small account in the same table: 1,000 faxes this month.
  const sm = (await pool.query(`INSERT INTO accounts (name) VALUES ('small') RETURNING id`)).rows[0].id;
  await ins(sm, 1000, monthStart.toISOString(), '20 days');
  await pool.query('ANALYZE fax_jobs');
  for (let i = 0; i < 3; i++) {
    const r = await pool.query(q, [sm, monthStart, to]);
    if (i === 2) console.log(r.rows.map((x) => x['QUERY PLAN']).join('\n'));
  }
} finally {
  await pool.end();
  await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
  await admin.end();
}
