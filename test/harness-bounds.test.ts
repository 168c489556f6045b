// The test bed's own guarantees (issue 28): test files run at once never share a database, copies
// of the migrated template are made concurrently without failing, and a test file whose process
// stays alive after its last test fails fast instead of hanging the run.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, it } from 'node:test';
import pg from 'pg';
import { listMigrations } from '../src/db/migrate.ts';
import {
  buildTemplate,
  createDatabase,
  PG_ADMIN_URL,
  templateDatabase,
  uniqueName,
} from './support/harness.ts';

describe('template databases', () => {
  it('five processes building one template at once: one builds it, all get it complete', async () => {
    const name = uniqueName('faxline_tpl_test');
    // Each call has its own connection, as separate test processes would.
    const got = await Promise.allSettled(Array.from({ length: 5 }, () => buildTemplate(name)));
    const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
    await admin.connect();
    try {
      assert.deepEqual(
        got.map((g) => (g.status === 'fulfilled' ? g.value : String(g.reason))),
        Array(5).fill(name),
        'every builder got the template',
      );
      const t = await admin.query('SELECT datallowconn, datistemplate FROM pg_database WHERE datname = $1', [
        name,
      ]);
      assert.deepEqual(t.rows, [{ datallowconn: false, datistemplate: true }]);
    } finally {
      await admin.query(`ALTER DATABASE ${name} WITH IS_TEMPLATE false`).catch(() => undefined);
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    }
  });

  it('six databases copied at once from the template each have every migration, and are separate', async () => {
    const dbs = await Promise.all(Array.from({ length: 6 }, () => createDatabase({ migrated: true })));
    try {
      const expected = (await listMigrations()).map((m) => m.name);
      for (const [i, db] of dbs.entries()) {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        try {
          const names = (
            await c.query<{ name: string }>('SELECT name FROM faxline_migrations ORDER BY version')
          ).rows;
          assert.deepEqual(
            names.map((r) => r.name),
            expected,
            `database ${i} has every migration`,
          );
          await c.query(`CREATE TABLE only_here_${i} (x int)`);
        } finally {
          await c.end();
        }
      }
      // What one copy got, the others did not.
      const c = new pg.Client({ connectionString: dbs[1]!.url });
      await c.connect();
      try {
        const own = await c.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_tables WHERE tablename LIKE 'only_here_%'`,
        );
        assert.equal(own.rows[0]!.n, 1, 'each copy has only its own table');
      } finally {
        await c.end();
      }
      // The template is complete and closed to connections (so copying it never meets a session).
      const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
      await admin.connect();
      try {
        const t = await admin.query<{ datallowconn: boolean; datistemplate: boolean }>(
          'SELECT datallowconn, datistemplate FROM pg_database WHERE datname = $1',
          [await templateDatabase()],
        );
        assert.deepEqual(t.rows, [{ datallowconn: false, datistemplate: true }]);
      } finally {
        await admin.end();
      }
      const empty = await createDatabase();
      try {
        const e = new pg.Client({ connectionString: empty.url });
        await e.connect();
        try {
          const r = await e.query(`SELECT to_regclass('faxline_migrations') AS t`);
          assert.equal(r.rows[0].t, null, 'without migrated: true the database is empty');
        } finally {
          await e.end();
        }
      } finally {
        await empty.drop();
      }
    } finally {
      await Promise.all(dbs.map((d) => d.drop()));
    }
  });
});

/** The environment of a test runner of its own: not a child of ours (no NODE_TEST_CONTEXT). */
function runnerEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  delete env.NODE_TEST_CONTEXT;
  delete env.NODE_V8_COVERAGE;
  return env;
}

/** Runs `node --test` on one fixture with the bounds module loaded; bounded by `limitMs`. */
function runFixture(
  fixture: string,
  env: Record<string, string>,
  limitMs: number,
): Promise<{ code: number | null; ms: number; out: string }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--test', '--import', './test/support/bounds.ts', '--test-reporter=spec', fixture],
      { env: runnerEnv(env), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`node --test ${fixture} did not end within ${limitMs} ms; output:\n${out}`));
    }, limitMs);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, ms: Date.now() - started, out });
    });
  });
}

describe('a test process that does not exit', () => {
  it('fails its file within the grace, naming what holds it open, instead of hanging the run', async () => {
    const r = await runFixture(
      'test/fixtures/bounds/leaves-server.ts',
      { FAXLINE_TEST_EXIT_GRACE_MS: '1000' },
      90_000,
    );
    assert.notEqual(r.code, 0, `the run fails:\n${r.out}`);
    assert.match(r.out, /still alive 1000 ms after its last test and hook/);
    assert.match(r.out, /TCPServerWrap/, 'the open server is named');
    assert.match(r.out, /✔ passes and leaves a server listening/, 'the test itself passed');
  });

  it("waits for the file's own top-level after hooks before counting the grace", async () => {
    const r = await runFixture(
      'test/fixtures/bounds/slow-after.ts',
      { FAXLINE_TEST_EXIT_GRACE_MS: '1000', FIXTURE_AFTER_MS: '2500' },
      90_000,
    );
    assert.equal(r.code, 0, `a slow after hook is not cut short:\n${r.out}`);
    assert.match(r.out, /slow after hook done/);
    assert.doesNotMatch(r.out, /still alive/);
  });
});
