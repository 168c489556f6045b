// The attacker of issue 27, finding 1, in a process of its own so that building and sending its 39 MB
// bodies costs the service under test nothing: `node test/support/json-bomb.ts <json options>` sends
// `count` bodies of `keys` tiny top-level keys, `parallel` at a time, over HTTP (POST /v1/faxes/send)
// or to the AMQP intake, and prints one JSON line per answer: { http, status, message, bytes }.
import amqp from 'amqplib';
import { randomUUID } from 'node:crypto';

export interface BombOptions {
  keys: number;
  count: number;
  parallel: number;
  http?: { url: string; token: string };
  amqp?: { url: string; prefix: string; user: string };
}

/** `{"fax_number":…,"fax_data":[…],"k0000000":0,…}`: 13 bytes a key, 39 MB for 3,000,000. */
export function bombBody(keys: number): Buffer {
  const parts: string[] = [
    '{"fax_number":"+15551234567","fax_data":[{"file_name":"a.pdf","file_url":"https://example.com/a.pdf"}]',
  ];
  for (let i = 0; i < keys; i++) parts.push(`,"k${i.toString(36).padStart(7, '0')}":0`);
  parts.push('}');
  return Buffer.from(parts.join(''));
}

async function main(o: BombOptions): Promise<void> {
  const body = bombBody(o.keys);
  const out = (a: { http: number; status: number; message: string }) =>
    process.stdout.write(`${JSON.stringify({ ...a, bytes: body.length })}\n`);
  let send: () => Promise<void>;
  let close = async () => {};
  if (o.http) {
    const { url, token } = o.http;
    send = async () => {
      const res = await fetch(`${url}/v1/faxes/send`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body,
        signal: AbortSignal.timeout(10 * 60_000),
      });
      const r = (await res.json()) as { status: number; message: string };
      out({ http: res.status, status: r.status, message: r.message });
    };
  } else if (o.amqp) {
    const { url, prefix, user } = o.amqp;
    const conn = await amqp.connect(url);
    const ch = await conn.createConfirmChannel();
    const waiting = new Map<string, () => void>();
    await ch.consume(
      'amq.rabbitmq.reply-to',
      (m) => {
        if (!m) return;
        const r = JSON.parse(m.content.toString()) as { status: number; message: string };
        out({
          http: Number(m.properties.headers?.['x-faxline-http-status']),
          status: r.status,
          message: r.message,
        });
        waiting.get(String(m.properties.correlationId))?.();
      },
      { noAck: true },
    );
    send = () =>
      new Promise<void>((resolve, reject) => {
        const id = randomUUID();
        const t = setTimeout(() => reject(new Error('no answer within 10 minutes')), 10 * 60_000);
        waiting.set(id, () => {
          clearTimeout(t);
          resolve();
        });
        ch.publish(`${prefix}.intake`, 'send', body, {
          persistent: true,
          contentType: 'application/json',
          messageId: `json-bomb-${id}`,
          correlationId: id,
          replyTo: 'amq.rabbitmq.reply-to',
          userId: user,
        });
      });
    close = async () => {
      await conn.close();
    };
  } else throw new Error('give http or amqp');
  for (let sent = 0; sent < o.count; sent += o.parallel)
    await Promise.all(Array.from({ length: Math.min(o.parallel, o.count - sent) }, send));
  await close();
}

if (import.meta.main) await main(JSON.parse(process.argv[2]!) as BombOptions);
