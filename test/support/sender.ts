// A high-volume sender as a test sees it: its own RabbitMQ connection, publishing commands to the
// intake with publisher confirms and collecting the answers from its reply queue: RabbitMQ's direct
// reply-to, or (with `replyAccount`) a server-named queue bound to <prefix>.replies for its account.
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { randomUUID } from 'node:crypto';

export interface Reply {
  body: { status: number; message: string; data?: any };
  correlationId: string | undefined;
  http: number;
}

export class TestSender {
  private conn!: ChannelModel;
  ch!: ConfirmChannel;
  /** The reply_to of its commands. */
  replyQueue!: string;
  private readonly waiting = new Map<string, (r: Reply) => void>();
  readonly replies: Reply[] = [];
  channelError: Error | undefined;
  readonly prefix: string;

  constructor(prefix: string) {
    this.prefix = prefix;
  }

  async connect(url: string, o: { replyAccount?: string } = {}): Promise<this> {
    this.conn = await amqp.connect(url);
    this.ch = await this.conn.createConfirmChannel();
    this.ch.on('error', (err: Error) => (this.channelError = err));
    if (o.replyAccount) {
      const q = await this.ch.assertQueue('', { exclusive: true });
      await this.ch.bindQueue(q.queue, `${this.prefix}.replies`, `${o.replyAccount}.${q.queue}`);
      this.replyQueue = q.queue;
    } else {
      this.replyQueue = 'amq.rabbitmq.reply-to';
    }
    await this.ch.consume(
      this.replyQueue,
      (m) => {
        if (!m) return;
        const r: Reply = {
          body: JSON.parse(m.content.toString()),
          correlationId: m.properties.correlationId as string | undefined,
          http: Number(m.properties.headers?.['x-faxline-http-status']),
        };
        this.replies.push(r);
        if (r.correlationId) this.waiting.get(r.correlationId)?.(r);
      },
      { noAck: true },
    );
    return this;
  }

  /** Publishes a command (confirmed) and resolves with its answer. */
  async command(
    type: string,
    body: unknown,
    o: {
      messageId?: string;
      userId?: string | null;
      raw?: Buffer;
      replyTo?: string;
      headers?: Record<string, unknown>;
      timeoutMs?: number;
    } = {},
  ): Promise<Reply> {
    const correlationId = randomUUID();
    const limit = o.timeoutMs ?? 10_000;
    const answered = new Promise<Reply>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no answer to ${type} within ${limit} ms`)), limit);
      this.waiting.set(correlationId, (r) => {
        clearTimeout(t);
        resolve(r);
      });
    });
    await this.publish(type, body, { ...o, correlationId });
    return answered;
  }

  publish(
    type: string,
    body: unknown,
    o: {
      messageId?: string;
      userId?: string | null;
      correlationId?: string;
      raw?: Buffer;
      /** Another reply_to than the sender's own reply queue. */
      replyTo?: string;
      headers?: Record<string, unknown>;
    } = {},
  ): Promise<void> {
    return new Promise((resolve, reject) => {
      try {
        this.ch.publish(
          `${this.prefix}.intake`,
          type,
          o.raw ?? Buffer.from(JSON.stringify(body)),
          {
            persistent: true,
            mandatory: true,
            contentType: 'application/json',
            messageId: o.messageId ?? randomUUID(),
            replyTo: o.replyTo ?? this.replyQueue,
            ...(o.correlationId ? { correlationId: o.correlationId } : {}),
            ...(o.headers ? { headers: o.headers } : {}),
            ...(o.userId ? { userId: o.userId } : {}),
          },
          (err: unknown) => (err ? reject(err as Error) : resolve()),
        );
      } catch (err) {
        reject(err as Error);
      }
    });
  }

  async close(): Promise<void> {
    await this.conn.close().catch(() => undefined);
  }
}
