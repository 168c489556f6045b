import { readdir, readFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import type pg from 'pg';

const dir = new URL('./migrations/', import.meta.url);
const LOCK = 7_301_001; // pg_advisory_lock key: one migrator at a time across replicas

export interface Migration {
  version: number;
  name: string;
  sql: string;
  checksum: string;
}

export async function listMigrations(): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d{3}_[a-z0-9_]+\.sql$/.test(f)).sort();
  return Promise.all(
    files.map(async (f) => {
      const sql = await readFile(new URL(f, dir), 'utf8');
      return {
        version: Number(f.slice(0, 3)),
        name: f,
        sql,
        checksum: createHash('sha256').update(sql).digest('hex'),
      };
    }),
  );
}

/**
 * Applies pending migrations in order, each in its own transaction, under an advisory lock so that
 * replicas starting together never race. Refuses to run when an applied migration was edited.
 * Returns the names applied.
 */
export async function migrate(pool: pg.Pool): Promise<string[]> {
  const client = await pool.connect();
  const applied: string[] = [];
  try {
    await client.query('SELECT pg_advisory_lock($1)', [LOCK]);
    await client.query(`CREATE TABLE IF NOT EXISTS faxline_migrations (
      version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now())`);
    const done = new Map(
      (
        await client.query<{ version: number; checksum: string; name: string }>(
          'SELECT version, checksum, name FROM faxline_migrations',
        )
      ).rows.map((r) => [r.version, r]),
    );
    for (const m of await listMigrations()) {
      const prev = done.get(m.version);
      if (prev) {
        if (prev.checksum !== m.checksum) {
          throw new Error(`migration ${m.name} was edited after it was applied (checksum differs)`);
        }
        continue;
      }
      await client.query('BEGIN');
      try {
        await client.query(m.sql);
        await client.query('INSERT INTO faxline_migrations (version, name, checksum) VALUES ($1, $2, $3)', [
          m.version,
          m.name,
          m.checksum,
        ]);
        await client.query('COMMIT');
        applied.push(m.name);
      } catch (err) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${m.name} failed: ${(err as Error).message}`, { cause: err });
      }
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [LOCK]).catch(() => undefined);
    client.release();
  }
  return applied;
}

/**
 * True when every migration on disk is applied (used by /readyz). Versions applied beyond those on
 * disk (a newer release migrated first, during a rolling update) do not make this process unready.
 */
export async function migrationsApplied(db: pg.Pool): Promise<boolean> {
  const versions = (await listMigrations()).map((m) => m.version);
  const r = await db
    .query<{ n: number }>(
      'SELECT count(*)::int AS n FROM faxline_migrations WHERE version = ANY($1::int[])',
      [versions],
    )
    .catch(() => ({ rows: [{ n: -1 }] }));
  return (r.rows[0]?.n ?? -1) === versions.length;
}

/**
 * For processes that do not migrate (MIGRATE_ON_START=false): waits until the migrations this
 * release ships have been applied by the release's migration step, polling every second.
 */
export async function waitForMigrations(
  db: pg.Pool,
  log: { info(o: object, msg: string): void },
  signal?: AbortSignal,
): Promise<void> {
  let waited = 0;
  while (!(await migrationsApplied(db))) {
    if (signal?.aborted) throw new Error('stopped while waiting for migrations');
    if (waited % 10 === 0)
      log.info({ waitedSeconds: waited }, 'waiting for migrations (npm run admin -- migrate)');
    await new Promise((r) => setTimeout(r, 1000));
    waited++;
  }
}
