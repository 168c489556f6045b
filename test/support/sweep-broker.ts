// Before a CI run: checks that the local RabbitMQ answers AMQP (not only that its port accepts
// connections), and deletes what earlier test runs that were killed left on it: queues and
// exchanges of test prefixes (harness.ts's `<tag>_<10 hex digits>.`), test users (`faxline_t_…`)
// and test vhosts (`vh_…%41`). Each test file deletes its own when it ends (harness.ts's sweep);
// a run stopped by a signal or a bound cannot, and quorum queues left run after run pile up (312
// of 50 prefixes on the day the system broker stopped answering AMQP in a loaded run, issue 28).
// Never run beside another test run on the same broker: it would delete that run's queues.
//   npx node test/support/sweep-broker.ts
import amqp from 'amqplib';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { AMQP_URL } from './harness.ts';

const run = promisify(execFile);
const ctl = async (...args: string[]) =>
  (await run('rabbitmqctl', ['-q', ...args], { timeout: 60_000 })).stdout;

const ANSWER_MS = 30_000;
const TEST_PREFIX = /^[a-z]{1,5}_[0-9a-f]{10}\./;
const TEST_USER = /^faxline_t_[0-9a-f]{8}$/;
const TEST_VHOST = /^vh_[0-9a-f]{10}%41$/;

/** Fails when `p` has not settled within `ms`, saying what was waited for. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms / 1000} s`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function names(kind: 'queues' | 'exchanges' | 'users' | 'vhosts'): Promise<string[]> {
  const columns = kind === 'queues' || kind === 'exchanges' ? ['name'] : [];
  const out = await ctl(`list_${kind}`, ...columns, '--formatter', 'json');
  // list_users names its column "user", the others "name".
  return (JSON.parse(out || '[]') as { name?: string; user?: string }[]).map((r) => r.name ?? r.user ?? '');
}

const conn = await within(
  amqp.connect(AMQP_URL, { timeout: ANSWER_MS }),
  ANSWER_MS,
  `AMQP at ${AMQP_URL}`,
).catch((err: Error) => {
  process.stderr.write(
    `sweep-broker: RabbitMQ does not answer AMQP (${err.message}). Its port may accept connections ` +
      'while the node is wedged: restart it (docs/development.md, "When RabbitMQ stops answering").\n',
  );
  process.exit(1);
});
try {
  const queues = (await names('queues')).filter((n) => TEST_PREFIX.test(n));
  const exchanges = (await names('exchanges')).filter((n) => TEST_PREFIX.test(n));
  // One channel for each deletion: a deletion that fails (already gone) closes its channel.
  const del = async (fn: (ch: amqp.Channel) => Promise<unknown>) => {
    const ch = await conn.createChannel();
    await fn(ch).catch(() => undefined);
    await ch.close().catch(() => undefined);
  };
  for (const q of queues)
    await within(
      del((ch) => ch.deleteQueue(q)),
      ANSWER_MS,
      `deleting queue ${q}`,
    );
  for (const x of exchanges)
    await within(
      del((ch) => ch.deleteExchange(x)),
      ANSWER_MS,
      `deleting exchange ${x}`,
    );
  const users = (await names('users')).filter((n) => TEST_USER.test(n));
  for (const u of users) await ctl('delete_user', u).catch(() => undefined);
  const vhosts = (await names('vhosts')).filter((n) => TEST_VHOST.test(n));
  for (const v of vhosts) await ctl('delete_vhost', v).catch(() => undefined);
  const prefixes = new Set([...queues, ...exchanges].map((n) => n.slice(0, n.indexOf('.'))));
  console.log(
    `sweep-broker: RabbitMQ answers; deleted what earlier test runs left: ${queues.length} queues and ` +
      `${exchanges.length} exchanges of ${prefixes.size} test prefixes, ${users.length} users, ${vhosts.length} vhosts`,
  );
} finally {
  await conn.close().catch(() => undefined);
}
