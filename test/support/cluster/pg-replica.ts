// A PostgreSQL primary with a streaming replica, of the test's own: initdb, then pg_basebackup -R
// (which writes standby.signal and primary_conninfo), both under one temp directory owned by the
// postgres OS user (initdb and postgres refuse to run as root), on free loopback ports. The shared
// server on 5432 is never touched. The primary can be SIGKILLed, the replica promoted with
// `pg_ctl promote`, and the old primary started again as a standby of the new one, so it can never
// come back as a second primary. Replication is synchronous (see below): asynchronous replication
// loses the last commits of a crashed primary, and with them faxes already answered as accepted.
import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { eventually } from '../wait.ts';
import { freePorts, waitPort } from './ports.ts';

const run = promisify(execFile);
const BIN = '/usr/lib/postgresql/15/bin';

async function asPostgres(cmd: string, args: string[]): Promise<string> {
  const isRoot = process.getuid?.() === 0;
  const r = isRoot
    ? await run('runuser', ['-u', 'postgres', '--', cmd, ...args], { timeout: 120_000 })
    : await run(cmd, args, { timeout: 120_000 });
  return r.stdout;
}

export interface PgServer {
  port: number;
  data: string;
}

export interface PgReplicaPair {
  /** Index 0: the first primary; index 1: its replica. */
  servers: [PgServer, PgServer];
  /** postgres://postgres@127.0.0.1:p0,127.0.0.1:p1/<db>?target_session_attrs=read-write */
  multiHostUrl(db: string): string;
  url(i: number, db: string): string;
  /** SIGKILL of server `i`'s postmaster (its backends die with it: what a crash looks like). */
  kill(i: number): Promise<void>;
  /** `pg_ctl promote` of server `i` (a standby), waiting until it accepts writes. */
  promote(i: number): Promise<void>;
  /** Starts server `i` as a standby of server `of` (standby.signal and primary_conninfo). */
  startAsStandbyOf(i: number, of: number): Promise<void>;
  /** true when server `i` is in recovery (a standby); throws when it is down. */
  inRecovery(i: number): Promise<boolean>;
  /** Waits until server `i` (a standby) has replayed everything the primary `of` has written. */
  caughtUp(i: number, of: number, timeoutMs?: number): Promise<void>;
  destroy(): Promise<void>;
}

export async function startPgReplicaPair(): Promise<PgReplicaPair> {
  const ports = await freePorts(2);
  const dir = mkdtempSync(join(tmpdir(), 'faxline-pgpair-'));
  const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
  const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
  chownSync(dir, uid, gid);
  const servers: [PgServer, PgServer] = [
    { port: ports[0]!, data: join(dir, 'a') },
    { port: ports[1]!, data: join(dir, 'b') },
  ];
  const opts = (s: PgServer) =>
    [
      `-p ${s.port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`,
      '-c wal_level=replica -c max_wal_senders=5 -c hot_standby=on -c wal_keep_size=256MB',
    ].join(' ');
  const pgCtl = (s: PgServer, ...args: string[]) =>
    asPostgres(`${BIN}/pg_ctl`, ['-D', s.data, '-w', '-t', '60', ...args]);
  const startServer = (s: PgServer) => pgCtl(s, '-o', opts(s), '-l', `${s.data}.log`, 'start');
  const url = (i: number, db: string) => `postgres://postgres@127.0.0.1:${servers[i]!.port}/${db}`;
  const query = async <R extends pg.QueryResultRow>(i: number, sql: string) => {
    const c = new pg.Client({ connectionString: url(i, 'postgres'), connectionTimeoutMillis: 5000 });
    await c.connect();
    try {
      return (await c.query<R>(sql)).rows;
    } finally {
      await c.end();
    }
  };
  const pair: PgReplicaPair = {
    servers,
    url,
    multiHostUrl: (db) =>
      `postgres://postgres@127.0.0.1:${servers[0].port},127.0.0.1:${servers[1].port}/${db}?target_session_attrs=read-write`,
    kill: async (i) => {
      const s = servers[i]!;
      const pid = Number(readFileSync(join(s.data, 'postmaster.pid'), 'utf8').split('\n')[0]);
      process.kill(pid, 'SIGKILL');
      await waitPort(s.port, false, 30_000);
    },
    promote: async (i) => {
      await pgCtl(servers[i]!, 'promote');
      const rows = await query<{ r: boolean }>(i, 'SELECT pg_is_in_recovery() AS r');
      if (rows[0]?.r !== false) throw new Error(`server ${i} still in recovery after promote`);
    },
    startAsStandbyOf: async (i, of) => {
      const s = servers[i]!;
      // A SIGKILLed server leaves its postmaster.pid behind; postgres checks that the pid is gone.
      writeFileSync(join(s.data, 'standby.signal'), '');
      writeFileSync(
        join(s.data, 'postgresql.auto.conf'),
        `primary_conninfo = 'host=127.0.0.1 port=${servers[of]!.port} user=postgres'\n` +
          "recovery_target_timeline = 'latest'\n",
      );
      chownSync(join(s.data, 'standby.signal'), uid, gid);
      chownSync(join(s.data, 'postgresql.auto.conf'), uid, gid);
      // The killed postmaster's backends exit when they notice it is gone; until then its shared
      // memory is still attached and a new postmaster refuses to start: a few bounded tries.
      for (let n = 1; ; n++) {
        try {
          await startServer(s);
          return;
        } catch (err) {
          if (n >= 5) throw err;
          await new Promise((r) => setTimeout(r, 500 * n));
        }
      }
    },
    inRecovery: async (i) => (await query<{ r: boolean }>(i, 'SELECT pg_is_in_recovery() AS r'))[0]!.r,
    caughtUp: async (i, of, timeoutMs = 30_000) => {
      const lsn = (await query<{ l: string }>(of, 'SELECT pg_current_wal_lsn()::text AS l'))[0]!.l;
      const until = Date.now() + timeoutMs;
      for (;;) {
        const ok = await query<{ ok: boolean }>(
          i,
          `SELECT pg_last_wal_replay_lsn() >= '${lsn}'::pg_lsn AS ok`,
        );
        if (ok[0]?.ok) return;
        if (Date.now() > until) throw new Error(`server ${i} did not replay up to ${lsn} in ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    destroy: async () => {
      for (const s of servers) await pgCtl(s, '-m', 'immediate', 'stop').catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await asPostgres(`${BIN}/initdb`, [
      '-D',
      servers[0].data,
      '-U',
      'postgres',
      '--auth=trust',
      '-E',
      'UTF8',
      '--no-sync',
    ]);
    // trust for replication connections from loopback (initdb's default pg_hba has them for local
    // and 127.0.0.1 already with --auth=trust).
    await startServer(servers[0]);
    await asPostgres(`${BIN}/pg_basebackup`, [
      '-h',
      '127.0.0.1',
      '-p',
      String(servers[0].port),
      '-U',
      'postgres',
      '-D',
      servers[1].data,
      '-R',
      '-X',
      'stream',
      '--no-sync',
    ]);
    await startServer(servers[1]);
    await waitPort(servers[1].port, true, 30_000);
    if (!(await pair.inRecovery(1))) throw new Error('the replica is not in recovery');
    // Synchronous replication: a COMMIT returns only once the replica has the WAL, so a fax the
    // service accepted survives the primary's crash. Set after the base backup, so the replica does
    // not inherit it (promoted with no standby of its own, it would wait for one at every COMMIT).
    await query(0, "ALTER SYSTEM SET synchronous_standby_names = '*'");
    await query(0, 'SELECT pg_reload_conf()');
    await eventually(
      async () =>
        (await query<{ s: string }>(0, 'SELECT sync_state AS s FROM pg_stat_replication'))[0]?.s === 'sync',
      30_000,
      100,
    );
  } catch (err) {
    await pair.destroy();
    throw err;
  }
  return pair;
}
