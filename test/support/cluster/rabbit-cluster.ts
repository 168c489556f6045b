// A three-node RabbitMQ cluster of the test's own: the installed rabbitmq-server started three times
// with its own node names, ports, database and log directories (under one temp directory), joined
// with `rabbitmqctl join_cluster`. The shared broker (rabbit@localhost on 5672) is never touched.
// Nodes can be SIGKILLed (the Erlang VM's process, as a crash or the OOM killer would) and started
// again, or stopped and started cleanly (a rolling restart).
import { execFile } from 'node:child_process';
import { chownSync, cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { eventually } from '../wait.ts';
import { freePorts, waitPort } from './ports.ts';

const run = promisify(execFile);

export interface RabbitNode {
  name: string;
  port: number;
  url: string;
}

export interface RabbitCluster {
  nodes: RabbitNode[];
  /** SIGKILL of node `i`'s Erlang VM; resolves once its port is closed. */
  kill(i: number): Promise<void>;
  /** `rabbitmqctl stop` of node `i` (a clean shutdown, as in a rolling restart). */
  stop(i: number): Promise<void>;
  /** Starts node `i` again (after kill or stop); resolves once it takes AMQP connections. */
  start(i: number): Promise<void>;
  /** Index of the node that leads quorum queue `queue` (asked of any running node). */
  leaderOf(queue: string): Promise<number>;
  /** Members of quorum queue `queue` that are online, as node indexes. */
  onlineMembers(queue: string): Promise<number[]>;
  /** Node names listed as running in the cluster, as seen from node `i`. */
  running(i: number): Promise<string[]>;
  /**
   * Waits (bounded) until the cluster is whole: every node running and every quorum queue listed
   * with a leader and all its members online. Throws saying what is still missing.
   */
  healthy(timeoutMs: number): Promise<void>;
  /** SIGKILLs every node (also one whose start was under way), after copying its logs to `keepLogs`. */
  destroy(keepLogs?: string): Promise<void>;
}

export async function startRabbitCluster(size = 3): Promise<RabbitCluster> {
  // AMQP ports, then Erlang distribution ports; none of 5672/25672/15672/4369.
  const ports = await freePorts(size * 2);
  const dir = join(tmpdir(), `faxline-rcluster-${ports[0]}`);
  const { stdout } = await run('id', ['-u', 'rabbitmq']).catch(() => ({ stdout: '' }));
  const uid = Number(stdout.trim());
  const nodes: (RabbitNode & { env: NodeJS.ProcessEnv })[] = [];
  for (let i = 0; i < size; i++) {
    const port = ports[i]!;
    const name = `fxc${ports[0]}n${i}@localhost`;
    const base = join(dir, `n${i}`);
    for (const d of ['mnesia', 'log', 'plugins']) mkdirSync(join(base, d), { recursive: true });
    writeFileSync(join(base, 'enabled_plugins'), '[].\n');
    writeFileSync(
      join(base, 'rabbitmq.conf'),
      [
        `listeners.tcp.local = 127.0.0.1:${port}`,
        // Quick cluster-wide failure detection: a SIGKILLed peer is noticed when its distribution
        // connection drops; this only bounds the wait for a silent one.
        'net_ticktime = 10',
        '',
      ].join('\n'),
    );
    if (Number.isInteger(uid) && uid > 0) {
      for (const p of ['', 'mnesia', 'log', 'plugins', 'enabled_plugins', 'rabbitmq.conf'])
        chownSync(join(base, p), uid, uid);
    }
    if (i === 0 && Number.isInteger(uid) && uid > 0) chownSync(dir, uid, uid);
    nodes.push({
      name,
      port,
      url: `amqp://guest:guest@127.0.0.1:${port}`,
      env: {
        ...process.env,
        RABBITMQ_NODENAME: name,
        RABBITMQ_NODE_PORT: String(port),
        RABBITMQ_CONFIG_FILE: join(base, 'rabbitmq.conf'),
        RABBITMQ_DIST_PORT: String(ports[size + i]),
        RABBITMQ_MNESIA_BASE: join(base, 'mnesia'),
        RABBITMQ_LOG_BASE: join(base, 'log'),
        RABBITMQ_PID_FILE: join(base, 'pid'),
        RABBITMQ_ENABLED_PLUGINS_FILE: join(base, 'enabled_plugins'),
        RABBITMQ_PLUGINS_EXPAND_DIR: join(base, 'plugins'),
      },
    });
  }
  const ctl = (i: number, ...args: string[]) =>
    run('rabbitmqctl', ['-q', '-n', nodes[i]!.name, ...args], { env: nodes[i]!.env, timeout: 90_000 });
  const pids = new Map<number, number>();
  const startNode = async (i: number) => {
    await run('rabbitmq-server', ['-detached'], { env: nodes[i]!.env });
    await waitPort(nodes[i]!.port, true, 120_000);
    const out = (await ctl(i, 'eval', 'os:getpid().')).stdout.trim();
    pids.set(i, Number(out.replace(/"/g, '')));
  };
  const cluster: RabbitCluster = {
    nodes: nodes.map(({ name, port, url }) => ({ name, port, url })),
    kill: async (i) => {
      const pid = pids.get(i);
      if (!pid) throw new Error(`node ${i} is not running`);
      process.kill(pid, 'SIGKILL');
      pids.delete(i);
      await waitPort(nodes[i]!.port, false, 30_000);
    },
    stop: async (i) => {
      await ctl(i, 'stop');
      pids.delete(i);
      await waitPort(nodes[i]!.port, false, 60_000);
    },
    start: (i) => startNode(i),
    leaderOf: async (queue) => {
      const leader = (await queueInfo(queue)).leader;
      const i = nodes.findIndex((n) => n.name === leader);
      if (i < 0) throw new Error(`no leader for ${queue} (${leader})`);
      return i;
    },
    onlineMembers: async (queue) =>
      (await queueInfo(queue)).online.map((m) => nodes.findIndex((n) => n.name === m)),
    running: async (i) => {
      const out = (await ctl(i, 'cluster_status', '--formatter', 'json')).stdout;
      return (JSON.parse(out) as { running_nodes: string[] }).running_nodes;
    },
    healthy: async (timeoutMs) => {
      let missing = 'nothing asked yet';
      await eventually(
        async () => {
          const down = nodes.map((_, i) => i).filter((i) => !pids.has(i));
          if (down.length > 0) return void (missing = `nodes ${down.join(', ')} not started`);
          const running = await cluster.running(0);
          if (running.length !== nodes.length) return void (missing = `running: ${running.join(', ')}`);
          const out = (await ctl(0, 'list_queues', 'name', 'type', 'leader', 'online', '--formatter', 'json'))
            .stdout;
          const rows = JSON.parse(out) as { name: string; type: string; leader: string; online: string[] }[];
          const short = rows.filter(
            (r) => r.type === 'quorum' && (!r.leader || r.online.length !== nodes.length),
          );
          if (short.length > 0)
            return void (missing = short
              .map((r) => `${r.name}: leader ${r.leader || '-'}, online ${r.online.length}`)
              .join('; '));
          return true;
        },
        timeoutMs,
        500,
      ).catch((err: Error) => {
        throw new Error(`cluster not whole within ${timeoutMs} ms: ${missing} (${err.message})`);
      });
    },
    destroy: async (keepLogs) => {
      for (let i = 0; i < nodes.length; i++) {
        // A node whose start did not finish has no pid here yet: its pid file names it, if its VM is
        // still this node's (a pid file outlives a SIGKILL, and a pid can be reused).
        const pid = pids.get(i) ?? pidFromFile(i);
        if (!pid) continue;
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      pids.clear();
      if (keepLogs) {
        for (let i = 0; i < nodes.length; i++)
          cpSync(join(dir, `n${i}`, 'log'), join(keepLogs, `rabbitmq-n${i}`), { recursive: true });
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  function pidFromFile(i: number): number | undefined {
    try {
      const pid = Number(readFileSync(nodes[i]!.env.RABBITMQ_PID_FILE!, 'utf8').trim());
      const env = readFileSync(`/proc/${pid}/environ`, 'utf8');
      return env.split('\0').includes(`RABBITMQ_NODENAME=${nodes[i]!.name}`) ? pid : undefined;
    } catch {
      return undefined;
    }
  }
  /** Leader and online members of a quorum queue, asked of the first node that answers. */
  async function queueInfo(queue: string): Promise<{ leader: string; online: string[] }> {
    let last: unknown;
    for (const i of pids.keys()) {
      try {
        const out = (await ctl(i, 'list_queues', 'name', 'leader', 'online', '--formatter', 'json')).stdout;
        const rows = JSON.parse(out) as { name: string; leader: string; online: string[] }[];
        const row = rows.find((r) => r.name === queue);
        if (row) return row;
        last = new Error(`queue ${queue} not listed`);
      } catch (err) {
        last = err;
      }
    }
    throw last instanceof Error ? last : new Error(String(last));
  }
  try {
    await Promise.all(nodes.map((_, i) => startNode(i)));
    for (let i = 1; i < size; i++) {
      await ctl(i, 'stop_app');
      await ctl(i, 'reset');
      await ctl(i, 'join_cluster', nodes[0]!.name);
      await ctl(i, 'start_app');
      await waitPort(nodes[i]!.port, true, 60_000);
    }
    const members = await cluster.running(0);
    if (members.length !== size) throw new Error(`cluster has ${members.length} running nodes: ${members}`);
  } catch (err) {
    await cluster.destroy();
    throw err;
  }
  return cluster;
}
