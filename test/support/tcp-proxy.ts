// A TCP proxy between the service and a server, for fault tests: `cut()` resets every connection
// and refuses new ones; `stall()` keeps connections open but stops moving bytes; `heal()` restores.
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  port: number;
  cut(): void;
  stall(): void;
  heal(): void;
  close(): Promise<void>;
}

export async function startProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  let mode: 'ok' | 'cut' | 'stall' = 'ok';
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    if (mode === 'cut') {
      client.resetAndDestroy();
      return;
    }
    const upstream = connect({ host: targetHost, port: targetPort });
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const done = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', done).on('close', done);
    upstream.on('error', done).on('close', done);
    if (mode === 'stall') {
      client.pause();
      upstream.pause();
    } else {
      client.pipe(upstream);
      upstream.pipe(client);
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    cut: () => {
      mode = 'cut';
      for (const [a, b] of pairs) {
        a.resetAndDestroy();
        b.resetAndDestroy();
      }
      pairs.clear();
    },
    stall: () => {
      mode = 'stall';
      for (const [a, b] of pairs) {
        a.unpipe(b);
        b.unpipe(a);
        a.pause();
        b.pause();
      }
    },
    heal: () => {
      const wasStalled = mode === 'stall';
      mode = 'ok';
      if (wasStalled) {
        for (const [a, b] of pairs) {
          a.pipe(b);
          b.pipe(a);
          a.resume();
          b.resume();
        }
      }
    },
    close: () =>
      new Promise<void>((r) => {
        for (const [a, b] of pairs) {
          a.destroy();
          b.destroy();
        }
        server.close(() => r());
      }),
  };
}
