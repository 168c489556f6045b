// Free loopback ports for the servers a cluster test starts, and waiting for a port to open or close.
import { connect, createServer } from 'node:net';
import { eventually } from '../wait.ts';

const RESERVED = new Set([4369, 5432, 5672, 15672, 15692, 25672]);

/** `n` distinct ports that nothing listens on right now (the kernel's choice, minus the shared servers'). */
export async function freePorts(n: number): Promise<number[]> {
  const out: number[] = [];
  while (out.length < n) {
    const port = await new Promise<number>((resolve, reject) => {
      const s = createServer();
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    // Clear of the shared servers' ports, of duplicates, and of RabbitMQ's CLI range (35672-35682).
    if (!RESERVED.has(port) && !out.includes(port) && port < 60000 && (port < 35672 || port > 35682))
      out.push(port);
  }
  return out;
}

export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

export async function waitPort(port: number, open: boolean, timeoutMs: number): Promise<void> {
  await eventually(async () => (await portOpen(port)) === open, timeoutMs, 200).catch(() => {
    throw new Error(`port ${port} did not become ${open ? 'open' : 'closed'} within ${timeoutMs} ms`);
  });
}
