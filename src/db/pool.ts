import pg from 'pg';
import type { Logger } from '../log.ts';
import { editPgUrl, newPgClient, pgConnection } from './hosts.ts';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

/** The one database capability most code needs (pg-boss's `db` option has the same shape). */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

/**
 * `pipeline`: queries are sent without waiting for the previous one's answer (see group-commit.ts).
 * `url` may list several hosts (see hosts.ts): the pool then follows the primary.
 */
export function createPool(url: string, max: number, log: Logger, o: { pipeline?: boolean } = {}): pg.Pool {
  const pool = new pg.Pool({
    ...pgConnection(url, (from, to) =>
      log.warn({ from: `${from.host}:${from.port}`, to: `${to.host}:${to.port}` }, 'postgres primary moved'),
    ),
    max,
    pipeline: o.pipeline ?? false,
    connectionTimeoutMillis: 5000,
    // A connection that stalls (network partition, a hung proxy) must not hang a worker forever:
    // queries give up after this, and TCP keepalive notices dead peers.
    query_timeout: 60_000,
    keepAlive: true,
  });
  // An idle client's error (server restart) must not kill the process: the pool drops the client.
  pool.on('error', (err) => log.warn({ err: err.message }, 'postgres idle client error'));
  // A checked-out client whose connection dies between queries emits 'error' too; without a
  // listener that would be an uncaught exception. The query in progress (if any) still rejects.
  pool.on('connect', (client) => {
    client.on('error', (err) => log.warn({ err: err.message }, 'postgres connection lost'));
  });
  return pool;
}

/** Creates the database named in `url` when it does not exist (local development convenience). */
export async function ensureDatabase(url: string): Promise<void> {
  let name = '';
  const admin = editPgUrl(url, (u) => {
    name = decodeURIComponent(u.pathname.replace(/^\//, ''));
    u.pathname = '/postgres';
  });
  if (!name) return;
  const probe = newPgClient(url, { connectionTimeoutMillis: 5000 });
  try {
    await probe.connect();
    return;
  } catch (err) {
    if ((err as { code?: string }).code !== '3D000') throw err; // 3D000: invalid_catalog_name
  } finally {
    await probe.end().catch(() => undefined);
  }
  const c = newPgClient(admin, { connectionTimeoutMillis: 5000 });
  await c.connect();
  try {
    await c.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
  } catch (err) {
    if ((err as { code?: string }).code !== '42P04') throw err; // created concurrently
  } finally {
    await c.end();
  }
}

/** Runs `fn` in a transaction; commits when it resolves, rolls back when it throws. */
export async function withTx<T>(pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const out = await fn(client);
    await client.query('COMMIT');
    return out;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/**
 * Several byte strings as one bytea parameter, for statements that store one per row: `blob` is
 * them end to end, and row i's bytes are `substring(blob FROM offsets[i] FOR lengths[i])` (1-based
 * offsets; both null for a null value). node-postgres sends a Buffer parameter as raw bytes, but a
 * bytea[] parameter as text, every byte as two hex digits that PostgreSQL's array_in then parses:
 * for an 80 KB document, 160 KB of text built on the event loop and parsed by the server (array_in
 * was PostgreSQL's largest single cost in bench:pipeline).
 */
export function packBytes(values: (Uint8Array | null)[]): {
  blob: Buffer;
  offsets: (number | null)[];
  lengths: (number | null)[];
} {
  const offsets: (number | null)[] = [];
  const lengths: (number | null)[] = [];
  let at = 1;
  for (const v of values) {
    offsets.push(v ? at : null);
    lengths.push(v ? v.length : null);
    at += v?.length ?? 0;
  }
  return { blob: Buffer.concat(values.filter((v): v is Uint8Array => v !== null)), offsets, lengths };
}
