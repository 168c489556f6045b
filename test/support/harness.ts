// Test harness: a fresh PostgreSQL database and a unique RabbitMQ prefix per service, against the
// real servers. Each test cleans up after itself (database dropped, queues and exchanges deleted).
import amqp from 'amqplib';
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import pg from 'pg';
import { start, type Running } from '../../src/app.ts';
import { allComponents, type Component } from '../../src/components.ts';
import type { Clock } from '../../src/clock.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { commandTypes, topologyNames } from '../../src/amqp/topology.ts';
import { createLogger } from '../../src/log.ts';
import type { TransmissionBackend } from '../../src/transmission/backend.ts';

// The one bounded wait of the suite, kept importable from here.
export { eventually } from './wait.ts';

export const PG_ADMIN_URL = process.env.TEST_PG_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const AMQP_URL = process.env.TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

export function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

export async function createDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = uniqueName('faxline_t');
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(PG_ADMIN_URL);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: PG_ADMIN_URL });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
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
}

/** Starts faxline in this process on a fresh database (or a given one) with a unique queue prefix. */
export async function startService(
  o: ServiceOptions = {},
): Promise<TestService & { dropAll(): Promise<void> }> {
  const db = o.databaseUrl ? null : await createDatabase();
  const prefix = o.prefix ?? uniqueName('t').toLowerCase();
  const cfg = loadConfig({
    DATABASE_URL: o.databaseUrl ?? db!.url,
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
    ...o.env,
  });
  const logs = new LogCapture();
  const log = createLogger(cfg.LOG_LEVEL, logs);
  const running = await start(cfg, {
    components: o.components ?? allComponents,
    log,
    ...(o.clock ? { clock: o.clock } : {}),
    ...(o.backend ? { backend: o.backend } : {}),
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
