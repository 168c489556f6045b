// A TCP proxy in front of a RabbitMQ node that reads the client's AMQP 0-9-1 frames and, at the
// client's first basic.consume, plays one of the two ways a node of a cluster that is losing or
// regaining its majority has been seen to answer (docs/clustering.md, "When the cluster comes back"):
//   'fatal-close': the consume is not forwarded; the client gets connection.close 541 INTERNAL_ERROR,
//                  as RabbitMQ 3.10 sends when the channel process crashes with {error,nodedown};
//   'silent':      the consume and everything after it is held back; the node never answers.
// Until then every byte is forwarded both ways, so the handshake and the topology declaration are
// the real broker's.
import { connect, createServer, type Server, type Socket } from 'node:net';

export type SetupFault = 'fatal-close' | 'silent';

export interface AmqpFaultProxy {
  port: number;
  /** basic.consume frames the proxy has intercepted so far. */
  intercepted(): number;
  /** Client connections open through the proxy right now. */
  open(): number;
  close(): Promise<void>;
}

const FRAME_METHOD = 1;
const FRAME_END = 0xce;
const PROTOCOL_HEADER = 8; // "AMQP" 0 0 9 1

/** connection.close (class 10, method 50) on channel 0, as a broker sends it. */
function connectionClose(code: number, text: string): Buffer {
  const t = Buffer.from(text, 'utf8');
  const payload = Buffer.alloc(4 + 2 + 1 + t.length + 4);
  let o = payload.writeUInt16BE(10, 0);
  o = payload.writeUInt16BE(50, o);
  o = payload.writeUInt16BE(code, o);
  o = payload.writeUInt8(t.length, o);
  o += t.copy(payload, o);
  o = payload.writeUInt16BE(60, o); // the method that failed: basic (60) …
  payload.writeUInt16BE(20, o); // … consume (20)
  const frame = Buffer.alloc(7 + payload.length + 1);
  frame.writeUInt8(FRAME_METHOD, 0);
  frame.writeUInt16BE(0, 1);
  frame.writeUInt32BE(payload.length, 3);
  payload.copy(frame, 7);
  frame.writeUInt8(FRAME_END, 7 + payload.length);
  return frame;
}

/** Splits the client's byte stream into frames, telling `onMethod` each method's class and id. */
function frameReader(onMethod: (cls: number, method: number) => 'forward' | 'hold'): (chunk: Buffer) => {
  forward: Buffer;
  held: boolean;
} {
  let buf = Buffer.alloc(0);
  let headerSeen = false;
  let holding = false;
  return (chunk) => {
    if (holding) return { forward: Buffer.alloc(0), held: true };
    buf = Buffer.concat([buf, chunk]);
    const out: Buffer[] = [];
    if (!headerSeen) {
      if (buf.length < PROTOCOL_HEADER) return { forward: Buffer.alloc(0), held: false };
      out.push(buf.subarray(0, PROTOCOL_HEADER));
      buf = buf.subarray(PROTOCOL_HEADER);
      headerSeen = true;
    }
    while (buf.length >= 7) {
      const size = buf.readUInt32BE(3);
      if (buf.length < 7 + size + 1) break;
      const frame = buf.subarray(0, 7 + size + 1);
      if (buf.readUInt8(0) === FRAME_METHOD && size >= 4) {
        if (onMethod(buf.readUInt16BE(7), buf.readUInt16BE(9)) === 'hold') {
          holding = true;
          buf = Buffer.alloc(0);
          return { forward: Buffer.concat(out), held: true };
        }
      }
      out.push(frame);
      buf = buf.subarray(7 + size + 1);
    }
    return { forward: Buffer.concat(out), held: false };
  };
}

/** Starts the proxy; `fault` applies to the first basic.consume of every connection. */
export async function startAmqpFaultProxy(
  targetPort: number,
  fault: SetupFault,
  targetHost = '127.0.0.1',
): Promise<AmqpFaultProxy> {
  let intercepted = 0;
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    const upstream = connect({ host: targetHost, port: targetPort });
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const done = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    // Once the proxy answers for the broker, the upstream connection is dropped without ending the
    // client's: the client still has to read the close and answer it.
    let answering = false;
    client.on('error', done).on('close', done);
    upstream.on('error', () => answering || done()).on('close', () => answering || done());
    upstream.on('data', (d: Buffer) => {
      if (!client.destroyed) client.write(d);
    });
    let closing = false;
    const read = frameReader((cls, method) => {
      if (closing && cls === 10 && method === 51) {
        // close-ok from the client: the broker would now end the connection.
        client.end();
        return 'hold';
      }
      if (cls !== 60 || method !== 20) return 'forward';
      intercepted++;
      if (fault === 'fatal-close') {
        answering = true;
        upstream.destroy();
        closing = true;
        client.write(connectionClose(541, 'INTERNAL_ERROR'));
        return 'forward'; // dropped below: upstream is gone
      }
      return 'hold';
    });
    client.on('data', (d: Buffer) => {
      const { forward } = read(d);
      if (forward.length > 0 && !upstream.destroyed) upstream.write(forward);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as { port: number }).port,
    intercepted: () => intercepted,
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
