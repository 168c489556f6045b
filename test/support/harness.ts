// Test harness: a fresh PostgreSQL database and a unique RabbitMQ prefix per service, against the
// real servers. Each test cleans up after itself (database dropped, queues and exchanges deleted).
// Test files run concurrently (npm test's --test-concurrency): nothing here is shared between them
// but the servers and the migrated template database, which is only ever copied.
import amqp from 'amqplib';
import { createHash, randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { after, type TestContext } from 'node:test';
import pg from 'pg';
import { start, type Running } from '../../src/app.ts';
import { allComponents, type Component } from '../../src/components.ts';
import type { Clock } from '../../src/clock.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { commandTypes, topologyNames } from '../../src/amqp/topology.ts';
import { createLogger } from '../../src/log.ts';
import { testKek } from './kek.ts';
import { listMigrations, migrate } from '../../src/db/migrate.ts';
import type { TransmissionBackend } from '../../src/transmission/backend.ts';
import type { DNSResolver } from 'mailauth';

/** A DNS resolver that knows no name (ENOTFOUND), for services whose test gives none. */
const noDns: DNSResolver = (name) =>
  Promise.reject(Object.assign(new Error(`queryTxt ENOTFOUND ${name}`), { code: 'ENOTFOUND' }));

// The one bounded wait of the suite, kept importable from here.
export { eventually } from './wait.ts';
export { testKek } from './kek.ts';

export const PG_ADMIN_URL = process.env.TEST_PG_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const AMQP_URL = process.env.TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

export function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

/** The queue prefixes made in this test process (queuePrefix): swept after its last test. */
const prefixes = new Set<string>();

/**
 * A unique queue prefix for a service or a process of this test file (`<tag>_<10 hex digits>`). Its
 * queues and exchanges are deleted after the file's last test and hook, whatever the test did or
 * forgot: quorum queues left behind pile up on the broker run after run (312 of 50 prefixes once,
 * when the system RabbitMQ stopped answering in a loaded CI run, issue 28). Tests still delete what
 * they made as soon as they are done with it (dropAll, deleteTopology); this is the net under them.
 */
export function queuePrefix(tag: string): string {
  const prefix = uniqueName(tag).toLowerCase();
  prefixes.add(prefix);
  return prefix;
}

if (process.env.NODE_TEST_CONTEXT) {
  // As bounds.ts does: the hook this top-level hook adds to the root test runs after all of the
  // file's own top-level `after` hooks (which stop its services), so nothing still uses the queues.
  after((ctx) => {
    (ctx as TestContext).after(async () => {
      for (const prefix of prefixes) await deleteTopology(prefix).catch(() => undefined);
    });
  });
}

/** Runs `fn` on a short-lived admin connection. */
async function withAdmin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: PG_ADMIN_URL });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

function dbUrl(name: string): string {
  const u = new URL(PG_ADMIN_URL);
  u.pathname = `/${name}`;
  return u.toString();
}

/**
 * The migrated template database of this checkout: `faxline_tpl_<hash of the migration files>`, so a
 * changed or added migration makes a new one (other worktrees with other migrations keep theirs).
 * Built once per server and migration set: the first test file to need it builds it under an
 * advisory lock while the others wait; it is then closed to connections (ALLOW_CONNECTIONS false,
 * which is also the sign that it is complete), because CREATE DATABASE ... TEMPLATE fails while
 * anyone is connected to the template. A half-built one (a test process killed while building) is
 * still open to connections: the next builder drops it and starts again.
 */
let templateName: Promise<string> | undefined;
export function templateDatabase(): Promise<string> {
  templateName ??= buildTemplate().catch((err: unknown) => {
    templateName = undefined;
    throw err;
  });
  return templateName;
}

/**
 * Builds (or finds) the migrated template `name` (default: named by the migrations' hash); safe to
 * call from many processes at once. Exported for the test of that.
 */
export async function buildTemplate(given?: string): Promise<string> {
  const migrations = await listMigrations();
  const hash = createHash('sha256');
  for (const m of migrations) hash.update(`${m.name}\0${m.checksum}\0`);
  if (given) hash.update(given);
  const digest = hash.digest('hex');
  const name = given ?? `faxline_tpl_${digest.slice(0, 16)}`;
  const ready = async (c: pg.Client) =>
    (
      await c.query<{ datallowconn: boolean }>('SELECT datallowconn FROM pg_database WHERE datname = $1', [
        name,
      ])
    ).rows[0]?.datallowconn === false;
  return withAdmin(async (admin) => {
    if (await ready(admin)) return name;
    // One builder per template across all test processes (advisory locks are per database: all
    // builders take it in the admin database). pg_advisory_lock waits; the statement timeout bounds it.
    await admin.query(`SET statement_timeout = '120s'`);
    await admin.query('SELECT pg_advisory_lock($1::bigint)', [BigInt(`0x${digest.slice(0, 15)}`).toString()]);
    try {
      if (await ready(admin)) return name;
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.query(`CREATE DATABASE ${name}`);
      const pool = new pg.Pool({ connectionString: dbUrl(name), max: 1 });
      try {
        await migrate(pool);
      } finally {
        await pool.end();
      }
      await admin.query(`ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS false IS_TEMPLATE true`);
      return name;
    } finally {
      await admin.query('SELECT pg_advisory_unlock_all()').catch(() => undefined);
    }
  });
}

/**
 * A database of its own for one test (`faxline_t_<random>`), dropped by `drop()`. Empty, or with
 * `migrated: true` a copy of the migrated template (`templateDatabase()`): the schema is there at
 * once, and starting the service applies nothing (a test of migrating itself asks for an empty one).
 */
export async function createDatabase(
  o: { migrated?: boolean } = {},
): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = uniqueName('faxline_t');
  const template = o.migrated ? await templateDatabase() : undefined;
  await withAdmin(async (admin) => {
    if (!template) {
      await admin.query(`CREATE DATABASE ${name}`);
      return;
    }
    // Copies of one template may be made concurrently; "being accessed by other users" (55006) only
    // when something connected to the template, which ALLOW_CONNECTIONS false forbids. Retried a
    // bounded number of times anyway, since another cluster tool (e.g. a manual psql) could.
    for (let attempt = 1; ; attempt++) {
      try {
        await admin.query(`CREATE DATABASE ${name} TEMPLATE ${template}`);
        return;
      } catch (err) {
        if ((err as { code?: string }).code !== '55006' || attempt >= 20) throw err;
        await new Promise((r) => setTimeout(r, 100 * attempt));
      }
    }
  });
  return {
    url: dbUrl(name),
    drop: () => withAdmin(async (c) => void (await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))),
  };
}

export async function deleteTopology(prefix: string, url = AMQP_URL): Promise<void> {
  const conn = await amqp.connect(url);
  const t = topologyNames(prefix);
  try {
    for (const type of commandTypes) {
      for (const q of [t.queue(type), t.deadLetterQueue(type)]) {
        const ch = await conn.createChannel();
        await ch.deleteQueue(q).catch(() => undefined);
        await ch.close().catch(() => undefined);
      }
    }
    for (const q of [t.intake, t.intakeDead]) {
      const ch = await conn.createChannel();
      await ch.deleteQueue(q).catch(() => undefined);
      await ch.close().catch(() => undefined);
    }
    for (const x of [t.commands, t.deadLetter, t.events, t.intake, t.intakeUnrouted, t.replies]) {
      const ch = await conn.createChannel();
      await ch.deleteExchange(x).catch(() => undefined);
      await ch.close().catch(() => undefined);
    }
    // Gone from the shared broker: the sweep after the file's last test need not connect for it.
    if (url === AMQP_URL) prefixes.delete(prefix);
  } finally {
    await conn.close();
  }
}

/** Collects log lines in memory (for assertions on what is and is not logged). */
export class LogCapture extends Writable {
  readonly lines: string[] = [];
  override _write(chunk: Buffer, _enc: string, cb: () => void): void {
    this.lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
    cb();
  }
  get text(): string {
    return this.lines.join('\n');
  }
}

export interface TestService {
  running: Running;
  cfg: Config;
  url: string;
  logs: LogCapture;
  stop(): Promise<void>;
}

export interface ServiceOptions {
  env?: Record<string, string>;
  components?: Component[];
  clock?: Clock;
  backend?: TransmissionBackend;
  databaseUrl?: string;
  prefix?: string;
  /** DNS answers of the mail gateway's SPF/DKIM/DMARC checks (tests stay on loopback). */
  mailResolver?: DNSResolver;
}

/** Starts faxline in this process on a fresh database (or a given one) with a unique queue prefix. */
export async function startService(
  o: ServiceOptions = {},
): Promise<TestService & { dropAll(): Promise<void> }> {
  const db = o.databaseUrl ? null : await createDatabase({ migrated: true });
  const prefix = o.prefix ?? queuePrefix('t');
  prefixes.add(prefix); // a given one too: declared again after an earlier deleteTopology
  const databaseUrl = o.databaseUrl ?? db!.url;
  const ownKeys = o.env && ('ENCRYPTION' in o.env || 'KEK' in o.env || 'KEK_FILE' in o.env);
  const cfg = loadConfig({
    DATABASE_URL: databaseUrl,
    // Encryption on, with this database's key, unless the test chooses (support/kek.ts).
    ...(ownKeys ? {} : { ENCRYPTION: 'on', KEK: testKek(databaseUrl) }),
    AMQP_URL,
    QUEUE_PREFIX: prefix,
    PORT: '0',
    METRICS_PORT: '0',
    HOST: '127.0.0.1',
    SIM_SPEEDUP: '0',
    LOG_LEVEL: 'info',
    OUTBOX_SWEEP_SECONDS: '1',
    // Tests drive traffic faster than a customer may; the rate limit has its own test.
    RATE_LIMIT_PER_SECOND: '0',
    PGBOSS_SCHEMA: 'pgboss',
    // Several test files run at once against one server (max_connections 100 by default): each
    // service's pools stay small unless a test asks for more.
    DB_POOL_SIZE: '4',
    ...o.env,
  });
  const logs = new LogCapture();
  const log = createLogger(cfg.LOG_LEVEL, logs, { phi: cfg.LOG_PHI });
  const running = await start(cfg, {
    components: o.components ?? allComponents,
    log,
    ...(o.clock ? { clock: o.clock } : {}),
    ...(o.backend ? { backend: o.backend } : {}),
    // The mail gateway never asks the network's DNS in a test: no answer unless the test gives one.
    mailResolver: o.mailResolver ?? noDns,
  });
  const stop = () => running.stop();
  return {
    running,
    cfg,
    url: running.url,
    logs,
    stop,
    dropAll: async () => {
      await running.stop();
      await deleteTopology(prefix).catch(() => undefined);
      await db?.drop();
    },
  };
}

export async function withService<T>(o: ServiceOptions, fn: (s: TestService) => Promise<T>): Promise<T> {
  const s = await startService(o);
  try {
    return await fn(s);
  } finally {
    await s.dropAll();
  }
}
