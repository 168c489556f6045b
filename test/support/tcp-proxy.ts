// A TCP proxy between the service and a server, for fault tests: `cut()` resets every connection
// and refuses new ones; `stall()` keeps connections open but stops moving bytes; `heal()` restores.
// `refused()` and `held()` show a fault taking effect: connections refused while cut, and bytes the
// service sent that a stall is holding back.
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  port: number;
  cut(): void;
  stall(): void;
  heal(): void;
  /** Connections refused while cut, since the proxy started. */
  refused(): number;
  /** Bytes from the service waiting in stalled connections right now. */
  held(): number;
  /** Connections open through the proxy right now. */
  open(): number;
  close(): Promise<void>;
}

export async function startProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  let mode: 'ok' | 'cut' | 'stall' = 'ok';
  let refused = 0;
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    if (mode === 'cut') {
      refused++;
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
    refused: () => refused,
    held: () => [...pairs].reduce((n, [client]) => n + client.readableLength, 0),
    open: () => pairs.size,
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
