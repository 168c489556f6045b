// A private PostgreSQL cluster for tests that restart the database (immediate stop = crash), so the
// shared server is never touched. initdb into a temp directory, run as the postgres OS user.
import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { tcpPortFree } from './private-rabbit.ts';

const run = promisify(execFile);
const BIN = '/usr/lib/postgresql/15/bin';

export interface PrivatePostgres {
  url: string;
  port: number;
  /** `pg_ctl stop -m immediate`: no shutdown checkpoint, clients cut — what a crash looks like. */
  crash(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
}

async function asPostgres(cmd: string, args: string[]): Promise<void> {
  const isRoot = process.getuid?.() === 0;
  if (isRoot) await run('runuser', ['-u', 'postgres', '--', cmd, ...args], { timeout: 150_000 });
  else await run(cmd, args, { timeout: 150_000 });
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  // 52000-59999, apart from the private RabbitMQ nodes' ports; probed (test files run at once).
  let port = 0;
  for (let i = 0; i < 50 && !port; i++) {
    const p = 52000 + Math.floor(Math.random() * 8000);
    if (await tcpPortFree(p)) port = p;
  }
  if (!port) throw new Error('no free port for a private PostgreSQL in 50 tries');
  const dir = mkdtempSync(join(tmpdir(), 'faxline-pg-'));
  const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
  const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
  chownSync(dir, uid, gid);
  const data = join(dir, 'data');
  await asPostgres(`${BIN}/initdb`, [
    '-D',
    data,
    '-U',
    'postgres',
    '--auth=trust',
    '-E',
    'UTF8',
    '--no-sync',
  ]);
  const pgCtl = (...args: string[]) => asPostgres(`${BIN}/pg_ctl`, ['-D', data, '-w', '-t', '140', ...args]);
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`;
  const start = () => pgCtl('-o', opts, '-l', join(dir, 'log'), 'start');
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/faxline`,
    port,
    crash: () => pgCtl('-m', 'immediate', 'stop'),
    start,
    stop: async () => {
      await pgCtl('-m', 'fast', 'stop').catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
