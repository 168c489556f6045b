// Migrations once per release (deploy/k8s migration Job, compose `migrate` service): a process with
// MIGRATE_ON_START=false applies nothing itself, waits until the release's migration step has applied
// what it ships, and stays ready when a newer release has migrated further (rolling updates).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { migrate, migrationsApplied } from '../src/db/migrate.ts';
import { createDatabase, eventually, startService } from './support/harness.ts';

describe('MIGRATE_ON_START=false', () => {
  it('waits for the migration step, then starts; a newer release’s migrations keep it ready', async () => {
    const db = await createDatabase();
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    pool.on('error', () => undefined); // teardown drops the database
    let service: Awaited<ReturnType<typeof startService>> | undefined;
    let starting: Promise<Awaited<ReturnType<typeof startService>>> | undefined;
    try {
      const rollbacks = async () =>
        (
          await pool.query<{ n: string }>(
            'SELECT xact_rollback::text AS n FROM pg_stat_database WHERE datname = current_database()',
          )
        ).rows[0]!.n;
      const rolledBackBefore = Number(await rollbacks());
      let started = false;
      starting = startService({
        databaseUrl: db.url,
        components: ['api'],
        env: { MIGRATE_ON_START: 'false', DB_CREATE: 'false' },
      }).then((s) => {
        started = true;
        return s;
      });
      // It has not migrated and does not start while nothing is applied: seen once it has checked
      // twice and found nothing. Each check fails (no migrations table yet), which PostgreSQL counts
      // as a rolled-back transaction of this database; the test's own queries do not fail.
      await eventually(async () => Number(await rollbacks()) >= rolledBackBefore + 2, 10_000);
      assert.equal(started, false, 'the process waits for migrations');
      const tables = await pool.query(`SELECT to_regclass('public.fax_jobs') AS t`);
      assert.equal(tables.rows[0].t, null, 'the process applied no migration itself');

      // The release's migration step (what `npm run admin -- migrate` runs).
      const applied = await migrate(pool);
      assert.ok(applied.length > 0);
      service = await starting;
      const ready = await eventually(async () => {
        const r = await fetch(`${service!.url}/readyz`);
        return r.status === 200 ? r : null;
      });
      assert.equal(ready.status, 200);

      // A newer release migrated further (a version this process does not ship): still ready.
      await pool.query(
        `INSERT INTO faxline_migrations (version, name, checksum) VALUES (999, '999_from_the_next_release.sql', 'x')`,
      );
      assert.equal(await migrationsApplied(pool), true);
      assert.equal((await fetch(`${service.url}/readyz`)).status, 200);
      // One of its own migrations missing: not ready.
      await pool.query(`DELETE FROM faxline_migrations WHERE version = 1`);
      assert.equal(await migrationsApplied(pool), false);
      assert.equal((await fetch(`${service.url}/readyz`)).status, 503);
    } finally {
      // A failure before the migration step leaves the process waiting: migrate so it starts and stops.
      if (!service && starting) {
        await migrate(pool).catch(() => undefined);
        service = await starting.catch(() => undefined);
      }
      if (service) await service.dropAll();
      await pool.end();
      await db.drop();
    }
  });
});
