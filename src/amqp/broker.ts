// One RabbitMQ connection per process, with amqplib's opt-in recovery. Channels and consumers do
// not survive a reconnect, so they are (re)built in `setup`, which amqplib calls after every connect.
import amqp, {
  type Channel,
  type ConfirmChannel,
  type ConsumeMessage,
  type RecoveringChannelModel,
} from 'amqplib';
import { randomUUID } from 'node:crypto';
import type { Logger } from '../log.ts';
import { declareTopology, type Topology, type TopologyOptions, topologyNames } from './topology.ts';

export class BrokerUnavailableError extends Error {
  constructor(msg = 'message broker unavailable') {
    super(msg);
    this.name = 'BrokerUnavailableError';
  }
}

/** A handler's verdict on a delivery it could not process. */
export class PermanentMessageError extends Error {
  constructor(msg: string) {
    super(msg);
    this.name = 'PermanentMessageError';
  }
}

export interface PublishOptions {
  messageId?: string;
  correlationId?: string;
  headers?: Record<string, unknown>;
  timeoutMs?: number;
  /** Default true: an unroutable message is an error. Events and replies may have no listener. */
  mandatory?: boolean;
}

/** One message of publishMany: its routing key and body, and the per-message options of `publish`. */
export interface OutgoingMessage extends Omit<PublishOptions, 'timeoutMs'> {
  routingKey: string;
  body: unknown;
}

export type MessageHandler = (msg: ConsumeMessage, body: unknown) => Promise<void>;
/** Called once when a delivery is given up (dead-lettered), so its job can end in a visible state. */
export type GiveUpHandler = (body: unknown, reason: string) => Promise<void>;

interface ConsumerSpec {
  queue: string;
  prefetch: number;
  handler: MessageHandler;
  onGiveUp?: GiveUpHandler | undefined;
  tag?: string | undefined;
  channel?: Channel | undefined;
  deadLetterKey?: string | undefined;
}

export interface BrokerHooks {
  /**
   * Errors for which the handler is re-run in place (the delivery stays unacknowledged) instead of
   * being requeued: an unreachable database is waited out without using up the delivery limit.
   */
  retryInPlace?: (err: unknown) => boolean;
  retryInPlaceMs?: number;
  onPublish?: (exchange: string, routingKey: string, ok: boolean) => void;
  onConsume?: (queue: string, outcome: 'ack' | 'retry' | 'dead_letter') => void;
}

export class Broker {
  readonly names: Topology;
  private model?: RecoveringChannelModel;
  private pub: ConfirmChannel | undefined;
  private connected = false;
  private readonly consumers: ConsumerSpec[] = [];
  private readonly returned = new Set<string>();
  private readonly inflight = new Set<Promise<void>>();
  private readonly handling = new Map<string, Promise<void>>();
  private closing?: Promise<void>;
  private readonly opts: TopologyOptions & { url: string; deliveryLimit: number };
  private readonly log: Logger;
  private readonly hooks: BrokerHooks;

  constructor(opts: TopologyOptions & { url: string }, log: Logger, hooks: BrokerHooks = {}) {
    this.opts = opts;
    this.log = log.child({ component: 'amqp' });
    this.hooks = hooks;
    this.names = topologyNames(opts.prefix);
  }

  get isConnected(): boolean {
    return this.connected && this.pub !== undefined;
  }

  /** Connects (retrying a bounded number of times at start) and declares the topology. */
  async start(initialRetries = 10): Promise<void> {
    this.model = await amqp.connect(this.opts.url, {
      recovery: {
        initialDelay: 200,
        maxDelay: 5000,
        initialMaxRetries: initialRetries,
        maxRetries: Infinity,
        setup: async (m: amqp.ChannelModel) => this.setup(m),
      },
    });
    this.model.on('disconnect', (err: Error) => {
      this.connected = false;
      this.pub = undefined;
      this.log.warn({ err: err?.message }, 'rabbitmq disconnected; reconnecting');
    });
    this.model.on('connect', () => this.log.info('rabbitmq connected'));
    this.model.on('error', (err: Error) => this.log.warn({ err: err.message }, 'rabbitmq connection error'));
    this.model.on('handler-error', (err: Error) => this.log.error({ err }, 'rabbitmq handler error'));
  }

  private async setup(model: amqp.ChannelModel): Promise<void> {
    const admin = await model.createChannel();
    await declareTopology(admin, this.opts);
    await admin.close();
    const pub = await model.createConfirmChannel();
    pub.on('error', (err: Error) => this.log.warn({ err: err.message }, 'publish channel error'));
    pub.on('return', (m: amqp.Message) => {
      const id = m.properties.messageId as string | undefined;
      if (id) this.returned.add(id);
    });
    pub.on('close', () => {
      if (this.pub === pub) this.pub = undefined;
    });
    this.pub = pub;
    for (const c of this.consumers) await this.attach(model, c);
    this.connected = true;
  }

  /**
   * Publishes a persistent message and resolves only when the broker has confirmed it and routed it
   * to at least one queue (mandatory). Rejects fast with BrokerUnavailableError when disconnected.
   */
  async publish(exchange: string, routingKey: string, body: unknown, o: PublishOptions = {}): Promise<void> {
    const { timeoutMs, ...message } = o;
    await this.publishMany(exchange, [{ routingKey, body, ...message }], { timeoutMs });
  }

  /**
   * Publishes several persistent messages to one exchange at once and waits for their confirms
   * together (one timer for the lot): the guarantee of `publish` for every message. Resolves when all
   * were confirmed and routed; rejects when any was nacked, unroutable or not confirmed in time.
   */
  async publishMany(
    exchange: string,
    msgs: OutgoingMessage[],
    o: { timeoutMs?: number | undefined } = {},
  ): Promise<void> {
    if (msgs.length === 0) return;
    const ch = this.pub;
    if (!this.connected || !ch) throw new BrokerUnavailableError();
    const timestamp = Math.floor(Date.now() / 1000);
    const ids = msgs.map((m) => m.messageId ?? randomUUID());
    const unconfirmed = new Set(msgs.keys());
    await new Promise<void>((resolve, reject) => {
      let failure: Error | undefined;
      let over = false;
      // Settles the lot once; whatever is still unconfirmed then counts as a failed publish.
      const finish = (err: Error | undefined) => {
        if (over) return;
        over = true;
        clearTimeout(timer);
        for (const i of unconfirmed) this.hooks.onPublish?.(exchange, msgs[i]!.routingKey, false);
        if (err) reject(err);
        else resolve();
      };
      const timer = setTimeout(
        () => finish(new BrokerUnavailableError('publish not confirmed in time')),
        o.timeoutMs ?? 5000,
      );
      const confirmed = (i: number, err: unknown) => {
        if (over) return; // late confirms change nothing now
        unconfirmed.delete(i);
        const m = msgs[i]!;
        const unroutable = !err && this.returned.delete(ids[i]!);
        this.hooks.onPublish?.(exchange, m.routingKey, !err && !unroutable);
        if (err) failure ??= new BrokerUnavailableError(`publish nacked: ${String(err)}`);
        else if (unroutable) failure ??= new Error(`message to ${exchange}/${m.routingKey} was unroutable`);
        if (unconfirmed.size === 0) finish(failure);
      };
      try {
        msgs.forEach((m, i) =>
          ch.publish(
            exchange,
            m.routingKey,
            Buffer.from(JSON.stringify(m.body)),
            {
              persistent: true,
              mandatory: m.mandatory ?? true,
              contentType: 'application/json',
              messageId: ids[i]!,
              timestamp,
              ...(m.correlationId ? { correlationId: m.correlationId } : {}),
              ...(m.headers ? { headers: m.headers } : {}),
            },
            (err: unknown) => confirmed(i, err),
          ),
        );
      } catch (err) {
        finish(new BrokerUnavailableError(`publish failed: ${(err as Error).message}`));
      }
    });
  }

  /**
   * Sends a transient answer to a reply queue without waiting for the broker: an answer is a
   * courtesy (the command's effect is already committed), so it is neither persistent nor
   * confirmed. Returns false if it could not be handed to the connection.
   */
  reply(
    queue: string,
    body: unknown,
    o: { correlationId?: string; headers?: Record<string, unknown> },
  ): boolean {
    const ch = this.pub;
    if (!this.connected || !ch) return false;
    try {
      ch.publish(
        '',
        queue,
        Buffer.from(JSON.stringify(body)),
        {
          persistent: false,
          contentType: 'application/json',
          messageId: randomUUID(),
          timestamp: Math.floor(Date.now() / 1000),
          ...(o.correlationId ? { correlationId: o.correlationId } : {}),
          ...(o.headers ? { headers: o.headers } : {}),
        },
        () => undefined, // confirms of answers are not awaited
      );
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Registers a consumer; it is attached now if connected and again after every reconnect.
   * The handler's promise decides the delivery: resolve → ack; PermanentMessageError → dead-letter
   * with the reason in a header; any other error → requeue after a pause (bounded by the queue's
   * delivery limit, after which RabbitMQ dead-letters it).
   */
  async consume(
    queue: string,
    prefetch: number,
    handler: MessageHandler,
    onGiveUp?: GiveUpHandler,
    deadLetterKey?: string,
  ): Promise<void> {
    const spec: ConsumerSpec = { queue, prefetch, handler, onGiveUp, deadLetterKey };
    this.consumers.push(spec);
    if (this.model && this.connected) {
      // attach through a fresh channel on the live connection
      await this.attach(this.model, spec);
    }
  }

  /** Consumers attached (for /readyz). */
  get consumersAttached(): number {
    return this.consumers.filter((c) => c.tag !== undefined).length;
  }

  get consumersRegistered(): number {
    return this.consumers.length;
  }

  private async attach(model: { createChannel(): Promise<Channel> }, spec: ConsumerSpec): Promise<void> {
    const ch = await model.createChannel();
    ch.on('error', (err: Error) =>
      this.log.warn({ err: err.message, queue: spec.queue }, 'consumer channel error'),
    );
    ch.on('close', () => {
      if (spec.channel === ch) {
        spec.channel = undefined;
        spec.tag = undefined;
      }
    });
    await ch.prefetch(spec.prefetch);
    spec.channel = ch;
    const r = await ch.consume(spec.queue, (msg) => {
      if (!msg) return; // consumer cancelled by the broker (queue deleted)
      // A message this process is still handling can come back (the channel it arrived on broke and
      // the broker redelivered it, or a sweep republished it): it waits for the first handling to
      // finish, then runs and finds the job already moved on, instead of racing it.
      const id = msg.properties.messageId as string | undefined;
      const before = id ? this.handling.get(id) : undefined;
      const p = (before ? before.catch(() => undefined) : Promise.resolve()).then(() =>
        this.dispatch(ch, spec, msg),
      );
      if (id) {
        this.handling.set(id, p);
        void p.finally(() => {
          if (this.handling.get(id) === p) this.handling.delete(id);
        });
      }
      this.inflight.add(p);
      void p.finally(() => this.inflight.delete(p));
    });
    spec.tag = r.consumerTag;
  }

  private async dispatch(ch: Channel, spec: ConsumerSpec, msg: ConsumeMessage): Promise<void> {
    let body: unknown;
    try {
      body = JSON.parse(msg.content.toString('utf8'));
    } catch {
      body = undefined;
    }
    try {
      if (body === undefined) throw new PermanentMessageError('message body is not JSON');
      await this.runWithInPlaceRetry(spec, msg, body);
      try {
        ch.ack(msg);
      } catch {
        // The channel broke while we worked: the broker redelivers, and the job's state makes the
        // redelivery a no-op.
      }
      this.hooks.onConsume?.(spec.queue, 'ack');
    } catch (err) {
      const reason = (err as Error).message ?? String(err);
      const deliveries = Number(msg.properties.headers?.['x-delivery-count'] ?? 0) + 1;
      // Quorum queues count deliveries (x-delivery-count); on the last allowed one we give up
      // ourselves, so the job is closed visibly and the dead letter carries our reason.
      if (err instanceof PermanentMessageError || deliveries >= this.opts.deliveryLimit) {
        if (spec.onGiveUp && body !== undefined) {
          await spec
            .onGiveUp(body, reason)
            .catch((e: unknown) =>
              this.log.error({ err: (e as Error).message, queue: spec.queue }, 'give-up handler failed'),
            );
        }
        // Dead-letter with the reason: publish a copy to the dead-letter exchange, then ack.
        try {
          await this.publish(
            this.names.deadLetter,
            spec.deadLetterKey ?? msg.fields.routingKey,
            body ?? msg.content.toString('base64'),
            {
              messageId: msg.properties.messageId ?? randomUUID(),
              headers: {
                ...(msg.properties.headers ?? {}),
                'x-faxline-reason': reason.slice(0, 500),
                'x-faxline-queue': spec.queue,
              },
            },
          );
          ch.ack(msg);
        } catch {
          ch.nack(msg, false, false); // broker's own dead-lettering (reason: rejected)
        }
        this.log.warn(
          { queue: spec.queue, reason, messageId: msg.properties.messageId },
          'message dead-lettered',
        );
        this.hooks.onConsume?.(spec.queue, 'dead_letter');
      } else {
        this.log.warn({ queue: spec.queue, err: reason, deliveries }, 'message handling failed; will retry');
        await new Promise((r) => setTimeout(r, Math.min(200 * 2 ** deliveries, 5000)));
        try {
          ch.nack(msg, false, true);
        } catch {
          /* channel gone: the broker requeues it anyway */
        }
        this.hooks.onConsume?.(spec.queue, 'retry');
      }
    }
  }

  private async runWithInPlaceRetry(spec: ConsumerSpec, msg: ConsumeMessage, body: unknown): Promise<void> {
    const until = Date.now() + (this.hooks.retryInPlaceMs ?? 10 * 60_000);
    for (let n = 0; ; n++) {
      try {
        await spec.handler(msg, body);
        return;
      } catch (err) {
        if (!this.hooks.retryInPlace?.(err) || Date.now() > until || this.closing) throw err;
        if (n === 0)
          this.log.warn(
            { queue: spec.queue, err: (err as Error).message },
            'dependency unavailable; waiting',
          );
        await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** n, 5000)));
      }
    }
  }

  /** Stops consuming (in-flight handlers finish and ack), then closes. Calling twice returns the same promise. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const c of this.consumers) {
        if (c.channel && c.tag) await c.channel.cancel(c.tag).catch(() => undefined);
      }
      await Promise.allSettled([...this.inflight]);
      this.connected = false;
      await this.model?.close().catch(() => undefined);
    })();
    return this.closing;
  }
}
