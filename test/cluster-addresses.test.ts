// Several addresses for one server role, without a cluster: a multi-host DATABASE_URL whose first
// host is down reaches the second, and an AMQP_URL list whose first broker is down connects to the
// next. The failover cases themselves (promotion, a killed broker node) are in test/cluster/.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer } from 'node:net';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';
import pg from 'pg';
import { Broker, brokerUrls } from '../src/amqp/broker.ts';
import { loadConfig } from '../src/config.ts';
import { editPgUrl, newPgClient, parsePgUrl, pgConnection } from '../src/db/hosts.ts';
import { isDbUnavailable } from '../src/db/errors.ts';
import { createPool, ensureDatabase } from '../src/db/pool.ts';
import { createLogger } from '../src/log.ts';
import {
  AMQP_URL,
  LogCapture,
  PG_ADMIN_URL,
  createDatabase,
  deleteTopology,
  eventually,
  queuePrefix,
  uniqueName,
} from './support/harness.ts';

const run = promisify(execFile);

/** A loopback port nothing listens on (taken from the kernel, then released). */
async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe('multi-host PostgreSQL URLs', () => {
  it('parses the host list, the read-write requirement, and each host alone', () => {
    const p = parsePgUrl(
      'postgres://u:pw@db-a:5433,db-b,[::1]:5434/fax?target_session_attrs=read-write&sslmode=disable',
    );
    assert.deepEqual(p.hosts, [
      { host: 'db-a', port: 5433 },
      { host: 'db-b', port: 5432 },
      { host: '::1', port: 5434 },
    ]);
    assert.equal(p.readWrite, true);
    assert.equal(p.single(1), 'postgres://u:pw@db-b/fax?sslmode=disable');
    assert.equal(p.single(2), 'postgres://u:pw@[::1]:5434/fax?sslmode=disable');
    assert.equal(parsePgUrl('postgresql://x@h/db').readWrite, false);
    assert.throws(() => parsePgUrl('postgres://u@h1,h2/db?target_session_attrs=standby'), /not supported/);
    assert.throws(() => parsePgUrl('postgres://u@h1,:5/db'), /bad host/);
    assert.throws(() => parsePgUrl('postgres://u@:5/db'), /bad host/);
    assert.throws(() => parsePgUrl('mysql://u@h/db'), /postgres/);
  });

  it('edits user, password and database of every host at once', () => {
    assert.equal(
      editPgUrl('postgres://u:pw@a:1,b:2/fax?target_session_attrs=read-write', (u) => {
        u.username = 'faxline_api';
        u.password = '';
        u.pathname = '/postgres';
      }),
      'postgres://faxline_api@a:1,b:2/postgres?target_session_attrs=read-write',
    );
    assert.equal(
      editPgUrl('postgres://u:pw@a:1/fax', (u) => (u.password = '***')),
      'postgres://u:***@a:1/fax',
    );
  });

  it('leaves a plain URL to pg and validates DATABASE_URL and AMQP_URL lists in the configuration', () => {
    assert.deepEqual(pgConnection('postgres://u@h:5432/db'), { connectionString: 'postgres://u@h:5432/db' });
    const cfg = loadConfig({
      DATABASE_URL: 'postgres://u@a:5432,b:5432/db?target_session_attrs=read-write',
      AMQP_URL: 'amqp://g:g@n1:5672, amqp://g:g@n2:5672',
    });
    assert.deepEqual(brokerUrls(cfg.AMQP_URL), ['amqp://g:g@n1:5672', 'amqp://g:g@n2:5672']);
    assert.throws(() => loadConfig({ AMQP_URL: 'amqp://n1,http://n2' }), /AMQP_URL/);
    assert.throws(
      () => loadConfig({ DATABASE_URL: 'postgres://u@a,b/db?target_session_attrs=standby' }),
      /DATABASE_URL/,
    );
    // API_DATABASE_URL takes the same form, checked at load rather than when the API's pool is made.
    assert.equal(loadConfig({ API_DATABASE_URL: '' }).API_DATABASE_URL, '');
    assert.throws(
      () => loadConfig({ API_DATABASE_URL: 'postgres://u@a,:5/db?target_session_attrs=read-write' }),
      /API_DATABASE_URL/,
    );
  });

  it('takes a URL with no host (a Unix socket, or the host in its query) as before', async () => {
    const socket = 'postgres:///faxline?host=/var/run/postgresql';
    assert.equal(loadConfig({ DATABASE_URL: socket }).DATABASE_URL, socket);
    assert.deepEqual(pgConnection(socket), { connectionString: socket });
    const admin = new URL(PG_ADMIN_URL);
    const c = newPgClient(
      `postgres://${admin.pathname}?host=${admin.hostname}&port=${admin.port || 5432}&user=${admin.username}`,
    );
    await c.connect();
    assert.equal((await c.query<{ n: number }>('SELECT 4 AS n')).rows[0]!.n, 4);
    await c.end();
  });

  it('a pool whose first host is down reaches the next one, and says so once', async () => {
    const dead = await deadPort();
    const admin = new URL(PG_ADMIN_URL);
    const url = `postgres://${admin.username}@127.0.0.1:${dead},${admin.host}${admin.pathname}?target_session_attrs=read-write`;
    const logs = new LogCapture();
    const pool = createPool(url, 2, createLogger('info', logs));
    try {
      // The first connection has no host that worked yet: it looks through the list before
      // connecting, so even the first query succeeds (a process started with the first host down
      // or a standby starts: its migrations and ensureDatabase run on one first connection).
      const r = await pool.query<{ transaction_read_only: string }>('SHOW transaction_read_only');
      assert.equal(r.rows[0]!.transaction_read_only, 'off');
      assert.equal(logs.text.match(/postgres primary moved/g)?.length, 1, logs.text);
    } finally {
      await pool.end();
    }
    await ensureDatabase(url);
    // One client for a multi-host URL: the same choice, for a client that has no pool.
    const c = newPgClient(url);
    await c.connect();
    assert.equal((await c.query<{ n: number }>('SELECT 1 AS n')).rows[0]!.n, 1);
    await c.end();
    const c2 = newPgClient(`postgres://${admin.username}@${admin.host},127.0.0.1:${dead}${admin.pathname}`);
    await c2.connect();
    assert.equal((await c2.query<{ n: number }>('SELECT 2 AS n')).rows[0]!.n, 2);
    await c2.end();
  });

  it('refuses a server that only reads, as an outage the service waits out', async () => {
    // The same server twice, in a database whose sessions are read-only: no host is acceptable.
    const db = await createDatabase();
    const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
    await admin.connect();
    const name = new URL(db.url).pathname.slice(1);
    await admin.query(`ALTER DATABASE ${name} SET default_transaction_read_only = on`);
    await admin.end();
    const u = new URL(db.url);
    const url = `postgres://${u.username}@${u.host},localhost:${u.port || 5432}/${name}?target_session_attrs=read-write`;
    const pool = createPool(url, 2, createLogger('silent'));
    try {
      const err = await pool.query('SELECT 1').then(
        () => null,
        (e: unknown) => e,
      );
      assert.match(String(err), /read-only \(a standby\)/);
      assert.equal(isDbUnavailable(err), true);
      // Without target_session_attrs any server will do, read-only or not.
      const any = createPool(url.replace('?target_session_attrs=read-write', ''), 1, createLogger('silent'));
      assert.equal((await any.query<{ n: number }>('SELECT 3 AS n')).rows[0]!.n, 3);
      await any.end();
    } finally {
      await pool.end();
      await db.drop();
    }
  });
});

describe('a list of broker addresses', () => {
  it('connects to the next address when the first one refuses', async () => {
    const dead = await deadPort();
    const prefix = queuePrefix('addr');
    const logs = new LogCapture();
    const b = new Broker(
      {
        url: `amqp://guest:guest@127.0.0.1:${dead}?heartbeat=30,${AMQP_URL}`,
        prefix,
        queueType: 'quorum',
        deliveryLimit: 5,
      },
      createLogger('info', logs),
    );
    try {
      await b.start(3);
      await eventually(async () => b.isConnected, 15_000);
      assert.match(logs.text, /next broker address/);
      await b.publish(b.names.commands, 'send', { ping: 1 }, { mandatory: false });
    } finally {
      await b.close();
      await deleteTopology(prefix);
    }
  });
  it('reaches a vhost whose name has a % in it through the list, as through one URL', async () => {
    // amqplib decodes the vhost of the address it is given: the address must pass it encoded once.
    const vhost = `${uniqueName('vh').toLowerCase()}%41`;
    const ctl = (...args: string[]) => run('rabbitmqctl', ['-q', ...args], { timeout: 30_000 });
    await ctl('add_vhost', vhost);
    await ctl('set_permissions', '-p', vhost, 'guest', '.*', '.*', '.*');
    const dead = await deadPort();
    const prefix = uniqueName('addr').toLowerCase();
    const b = new Broker(
      {
        url: `amqp://guest:guest@127.0.0.1:${dead},${AMQP_URL.replace(/\/*$/, '')}/${encodeURIComponent(vhost)}`,
        prefix,
        queueType: 'quorum',
        deliveryLimit: 5,
      },
      createLogger('silent'),
    );
    try {
      await b.start(2);
      await eventually(async () => b.isConnected, 15_000);
      const { stdout } = await ctl('list_queues', '-p', vhost, 'name', '--formatter', 'json');
      assert.ok(
        (JSON.parse(stdout) as { name: string }[]).some((q) => q.name.startsWith(prefix)),
        `the queues are in vhost ${vhost}: ${stdout}`,
      );
    } finally {
      await b.close().catch(() => undefined);
      await ctl('delete_vhost', vhost);
    }
  });
});
