// Benchmark (not a test): commands/s accepted through the AMQP intake from one publisher, against raw
// publish-with-confirm of the same payload to a plain quorum queue, in the same run.
//   npm run bench:amqp            (BENCH_N=20000 BENCH_WINDOW=1000 by default)
// "Accepted" = the sender received the intake's answer {status: 1} for the command, i.e. the job
// and its documents were committed and its internal send command was confirmed by RabbitMQ. Both
// runs publish with at most BENCH_WINDOW unconfirmed messages; the intake run's clock stops when the
// last answer has arrived.
import amqp from 'amqplib';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import { promisify } from 'node:util';
import pg from 'pg';
import { seedDemo } from '../src/admin/seed.ts';
import { registerSender } from '../src/auth/senders.ts';
import { start } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { makePdf } from '../test/support/pdf.ts';

const N = Number(process.env.BENCH_N ?? 20_000);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 1000);
const PG_ADMIN = process.env.BENCH_PG_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const AMQP = process.env.BENCH_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const ctl = (...a: string[]) => promisify(execFile)('rabbitmqctl', ['-q', ...a], { timeout: 30_000 });

const suffix = randomBytes(4).toString('hex');
const dbName = `faxline_bench_${suffix}`;
const prefix = `bench_${suffix}`;
const user = `faxline_bench_${suffix}`;
const password = randomBytes(12).toString('hex');

/** Publishes n messages with at most `window` unconfirmed; resolves when all are confirmed. */
async function pipelined(
  n: number,
  window: number,
  publishOne: (i: number) => Promise<void>,
): Promise<number> {
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: window }, async () => {
      while (next < n) await publishOne(next++);
    }),
  );
  return (performance.now() - t0) / 1000;
}

/** CPU seconds used so far by the processes `pick` selects (by pid and command line), from /proc. */
function cpuOf(pick: (pid: number, cmdline: string) => boolean): number {
  const tick = 100; // USER_HZ on Linux
  let s = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (!pick(Number(pid), cmdline)) continue;
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      s += (Number(f[11]) + Number(f[12])) / tick;
    } catch {
      // the process ended while we looked
    }
  }
  return s;
}

// The machine is shared: count the broker we use (its OS pid from `rabbitmqctl status`) and, of
// PostgreSQL, the server's own processes plus the sessions on this run's database only.
const brokerPid = Number(/OS PID: (\d+)/.exec((await ctl('status')).stdout)?.[1] ?? 0);
const isOurPostgres = (cmdline: string) =>
  cmdline.startsWith('postgres: ') && (!cmdline.includes('127.0.0.1(') || cmdline.includes(` ${dbName} `));

/** CPU time of this process (the publisher and, in the intake run, the intake), RabbitMQ and PostgreSQL. */
function cpuNow() {
  const u = process.cpuUsage();
  return {
    node: (u.user + u.system) / 1e6,
    rabbitmq: cpuOf((pid) => pid === brokerPid),
    postgres: cpuOf((_pid, cmdline) => isOurPostgres(cmdline)),
  };
}
type Cpu = ReturnType<typeof cpuNow>;
/** Milliseconds of CPU per message, by process, between two readings. */
const cpuPerMessage = (a: Cpu, b: Cpu, n: number) => ({
  node: Math.round(((b.node - a.node) * 1e6) / n) / 1000,
  rabbitmq: Math.round(((b.rabbitmq - a.rabbitmq) * 1e6) / n) / 1000,
  postgres: Math.round(((b.postgres - a.postgres) * 1e6) / n) / 1000,
});

/** Transactions and rows of the bench database so far (pg_stat_database lags by up to a second). */
async function dbStats(): Promise<{ xacts: number; inserted: number; updated: number }> {
  const r = await admin.query<{ xacts: string; inserted: string; updated: string }>(
    `SELECT xact_commit + xact_rollback AS xacts, tup_inserted AS inserted, tup_updated AS updated
       FROM pg_stat_database WHERE datname = $1`,
    [dbName],
  );
  const row = r.rows[0];
  return { xacts: Number(row?.xacts), inserted: Number(row?.inserted), updated: Number(row?.updated) };
}

const admin = new pg.Client({ connectionString: PG_ADMIN });
await admin.connect();
await admin.query(`CREATE DATABASE ${dbName}`);
const dbUrl = new URL(PG_ADMIN);
dbUrl.pathname = `/${dbName}`;
const cfg = loadConfig({
  DATABASE_URL: dbUrl.toString(),
  AMQP_URL: AMQP,
  QUEUE_PREFIX: prefix,
  PORT: '0',
  METRICS_PORT: '0',
  HOST: '127.0.0.1',
  LOG_LEVEL: 'warn',
  DB_POOL_SIZE: process.env.BENCH_DB_POOL ?? '10',
  // Encryption is on in production: the documents are sealed as they are stored (a KEK of the run).
  KEK: process.env.KEK ?? randomBytes(32).toString('base64'),
});
const running = await start(cfg, { components: ['intake'], log: createLogger('warn') });
const conn = await amqp.connect(AMQP);
let senderConn: amqp.ChannelModel | undefined;
try {
  const c = new pg.Client({ connectionString: cfg.DATABASE_URL });
  await c.connect();
  const seed = await seedDemo(c);
  await ctl('add_user', user, password);
  const p = prefix.replace(/[.-]/g, (x) => `\\${x}`);
  await ctl(
    'set_permissions',
    '-p',
    '/',
    user,
    '^amq\\.gen-.*$',
    `^(${p}\\.intake|amq\\.gen-.*)$`,
    '^amq\\.gen-.*$',
  );
  await registerSender(c, user, seed.account_id);
  await c.end();

  // The payload: a one-page PDF, inline.
  const pdf = (await makePdf(1)).toString('base64');
  const body = Buffer.from(
    JSON.stringify({ fax_number: '+15551234567', fax_data: [{ file_name: 'bench.pdf', file_data: pdf }] }),
  );

  // 1. Raw: publish-with-confirm of the same payload to a plain quorum queue.
  const rawCh = await conn.createConfirmChannel();
  const rawQ = `${prefix}.bench.raw`;
  await rawCh.assertQueue(rawQ, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
  const publishRaw = (ch: amqp.ConfirmChannel, exchange: string, key: string, props: amqp.Options.Publish) =>
    new Promise<void>((resolve, reject) =>
      ch.publish(
        exchange,
        key,
        body,
        { persistent: true, contentType: 'application/json', ...props },
        (e: unknown) => (e ? reject(e as Error) : resolve()),
      ),
    );
  const rawCpu0 = cpuNow();
  const rawSeconds = await pipelined(N, WINDOW, () =>
    publishRaw(rawCh, '', rawQ, { messageId: randomUUID() }),
  );
  const rawCpu = cpuPerMessage(rawCpu0, cpuNow(), N);
  await rawCh.deleteQueue(rawQ);

  // 2. Through the intake: the same payload as a send command, answered on a reply queue.
  senderConn = await amqp.connect(`amqp://${user}:${password}@127.0.0.1:5672`);
  const ch = await senderConn.createConfirmChannel();
  // Direct reply-to: answers go only to reply queues the sender may use (src/amqp/reply.ts).
  const replyQ = 'amq.rabbitmq.reply-to';
  let answered = 0;
  let rejected = 0;
  let allAnswered: () => void = () => undefined;
  const done = new Promise<void>((r) => (allAnswered = r));
  await ch.consume(
    replyQ,
    (m) => {
      if (!m) return;
      const r = JSON.parse(m.content.toString()) as { status: number; message: string };
      if (r.status !== 1 && rejected++ === 0) console.error('rejected:', r.message);
      if (++answered === N) allAnswered();
    },
    { noAck: true },
  );
  // The same publishing discipline as raw (at most WINDOW unconfirmed); answers are counted as they
  // arrive, and the clock stops at the last one.
  const db0 = await dbStats();
  const intakeCpu0 = cpuNow();
  const t0 = performance.now();
  await pipelined(N, WINDOW, () => {
    const id = randomUUID();
    return publishRaw(ch, `${prefix}.intake`, 'send', {
      messageId: id,
      correlationId: id,
      userId: user,
      replyTo: replyQ,
    });
  });
  const publishSeconds = (performance.now() - t0) / 1000;
  await done;
  const intakeSeconds = (performance.now() - t0) / 1000;
  const intakeCpu = cpuPerMessage(intakeCpu0, cpuNow(), N);
  await new Promise((r) => setTimeout(r, 1500)); // statistics are reported with a delay
  const db1 = await dbStats();

  const raw = N / rawSeconds;
  const intake = N / intakeSeconds;
  const result = {
    command: 'npm run bench:amqp',
    date: new Date().toISOString(),
    machine: `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), shared`,
    messages: N,
    window: WINDOW,
    payload_bytes: body.length,
    raw_publish_confirm_per_s: Math.round(raw),
    intake_accepted_per_s: Math.round(intake),
    intake_publish_confirmed_per_s: Math.round(N / publishSeconds),
    ratio: Math.round((intake / raw) * 1000) / 1000,
    rejected,
    // CPU milliseconds per message: this process, the RabbitMQ server, PostgreSQL's server processes
    // and the sessions on this run's database.
    cpu_ms_per_message: { raw: rawCpu, intake: intakeCpu },
    // PostgreSQL transactions (single statements count as one) and rows written per command.
    db_per_command: {
      transactions: Math.round(((db1.xacts - db0.xacts) / N) * 1000) / 1000,
      rows_inserted: Math.round(((db1.inserted - db0.inserted) / N) * 100) / 100,
      rows_updated: Math.round(((db1.updated - db0.updated) / N) * 100) / 100,
    },
    load_average: os.loadavg().map((x) => Math.round(x * 100) / 100),
    db_pool: cfg.DB_POOL_SIZE,
    intake_prefetch: cfg.INTAKE_PREFETCH,
  };
  console.log(JSON.stringify(result, null, 2));
  if (!process.env.BENCH_NO_WRITE)
    await writeFile(
      new URL('./results/amqp-intake.json', import.meta.url),
      JSON.stringify(result, null, 2) + '\n',
    );
} finally {
  await senderConn?.close().catch(() => undefined);
  await running.stop();
  const ch = await conn.createChannel();
  for (const q of ['send', 'forward', 'cancel'].flatMap((t) => [
    `${prefix}.cmd.${t}`,
    `${prefix}.cmd.${t}.dead`,
  ]))
    await ch.deleteQueue(q).catch(() => undefined);
  for (const q of [`${prefix}.intake`, `${prefix}.intake.dead`])
    await ch.deleteQueue(q).catch(() => undefined);
  for (const x of ['commands', 'dead-letter', 'events', 'intake'])
    await ch.deleteExchange(`${prefix}.${x}`).catch(() => undefined);
  await conn.close();
  await ctl('delete_user', user).catch(() => undefined);
  await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  await admin.end();
}
