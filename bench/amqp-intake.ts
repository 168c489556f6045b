// Benchmark (not a test): commands/s accepted through the AMQP intake from one publisher, against raw
// publish-with-confirm of the same payload to a plain quorum queue, in the same run.
//   npm run bench:amqp            (BENCH_N=20000 BENCH_WINDOW=1000 by default)
// "Accepted" = the sender received the intake's answer {status: 1} for the command, i.e. the job
// and its documents were committed and its internal send command was confirmed by RabbitMQ. Both
// runs publish with at most BENCH_WINDOW unconfirmed messages; the intake run's clock stops when the
// last answer has arrived.
import amqp from 'amqplib';
import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import { promisify } from 'node:util';
import pg from 'pg';
import { seedDemo } from '../src/admin/seed.ts';
import { registerSender } from '../src/amqp-intake/senders.ts';
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
  const rawSeconds = await pipelined(N, WINDOW, () =>
    publishRaw(rawCh, '', rawQ, { messageId: randomUUID() }),
  );
  await rawCh.deleteQueue(rawQ);

  // 2. Through the intake: the same payload as a send command, answered on a reply queue.
  senderConn = await amqp.connect(`amqp://${user}:${password}@127.0.0.1:5672`);
  const ch = await senderConn.createConfirmChannel();
  const replyQ = (await ch.assertQueue('', { exclusive: true })).queue;
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
