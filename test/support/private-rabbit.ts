// A private RabbitMQ node for tests that stop and restart the broker, so the shared broker that
// everyone else uses is never touched. Started from Debian's rabbitmq-server with its own node name,
// port, database and log directories; removed afterwards.
import { execFile } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync, chownSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { eventually } from './wait.ts';

const run = promisify(execFile);

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

async function waitPort(port: number, open: boolean, timeoutMs: number): Promise<void> {
  await eventually(async () => (await portOpen(port)) === open, timeoutMs, 200).catch(() => {
    throw new Error(`port ${port} did not become ${open ? 'open' : 'closed'} within ${timeoutMs} ms`);
  });
}

export interface PrivateRabbit {
  url: string;
  node: string;
  stopApp(): Promise<void>;
  startApp(): Promise<void>;
  stop(): Promise<void>;
}

/** True when nothing listens on the TCP port (a bind on loopback succeeds). */
export function tcpPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/**
 * A random AMQP port in 24000-31999 whose distribution port (+20000: 44000-51999) is free too;
 * between the SIP tests' ranges (21000-23999 and 32000-32499, test/support/telephony/ports.ts) and
 * apart from the private PostgreSQL's (52000-59999), and probed, since test files run concurrently.
 * Bounded: 50 tries.
 */
async function freeRabbitPort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = 24000 + Math.floor(Math.random() * 8000);
    if ((await tcpPortFree(port)) && (await tcpPortFree(port + 20000))) return port;
  }
  throw new Error('no free port pair for a private RabbitMQ node in 50 tries');
}

// The machine sets the pace: a node starts in seconds when idle, in a minute or more at load 25.
const START_MS = 150_000;

export async function startPrivateRabbit(): Promise<PrivateRabbit> {
  const port = await freeRabbitPort();
  const name = `fxtest${port}`;
  const node = `${name}@localhost`;
  const dir = join(tmpdir(), `faxline-rabbit-${port}`);
  mkdirSync(join(dir, 'mnesia'), { recursive: true });
  mkdirSync(join(dir, 'log'), { recursive: true });
  mkdirSync(join(dir, 'plugins'), { recursive: true });
  writeFileSync(join(dir, 'enabled_plugins'), '[].\n');
  writeFileSync(join(dir, 'rabbitmq.conf'), `listeners.tcp.local = 127.0.0.1:${port}\n`);
  // rabbitmq-server drops privileges to the rabbitmq user.
  const { stdout } = await run('id', ['-u', 'rabbitmq']).catch(() => ({ stdout: '' }));
  const uid = Number(stdout.trim());
  if (Number.isInteger(uid) && uid > 0) {
    for (const p of ['', 'mnesia', 'log', 'plugins', 'enabled_plugins', 'rabbitmq.conf'])
      chownSync(join(dir, p), uid, uid);
  }
  const env = {
    ...process.env,
    RABBITMQ_NODENAME: node,
    RABBITMQ_CONFIG_FILE: join(dir, 'rabbitmq.conf'),
    RABBITMQ_DIST_PORT: String(port + 20000),
    RABBITMQ_MNESIA_BASE: join(dir, 'mnesia'),
    RABBITMQ_LOG_BASE: join(dir, 'log'),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
    RABBITMQ_PLUGINS_EXPAND_DIR: join(dir, 'plugins'),
  };
  await run('rabbitmq-server', ['-detached'], { env });
  await waitPort(port, true, START_MS);
  const ctl = (...args: string[]) =>
    run('rabbitmqctl', ['-q', '-n', node, ...args], { env, timeout: START_MS });
  return {
    url: `amqp://guest:guest@127.0.0.1:${port}`,
    node,
    stopApp: async () => {
      await ctl('stop_app');
      await waitPort(port, false, 60_000);
    },
    startApp: async () => {
      await ctl('start_app');
      await waitPort(port, true, START_MS);
    },
    stop: async () => {
      await ctl('stop').catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
