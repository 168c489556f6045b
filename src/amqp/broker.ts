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
import { inStoredContext, storedFromHeaders } from '../trace.ts';
import { replyRoute } from './reply.ts';
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
  /** Bytes to publish as they are instead of the JSON of `body` (dead-letter copies). */
  raw?: { content: Buffer; contentType: string };
}

/** What became of an answer: see `Broker.reply`. */
export type ReplyOutcome = 'sent' | 'refused' | 'unroutable' | 'failed';

/**
 * The longest a new connection may take to declare the topology and attach the consumers. Normally
 * well under a second; RabbitMQ holds basic.consume on a quorum queue that has no leader, so on a
 * node left without a majority setup waits. Past this the connection is dropped and the next address
 * is tried: a node that never answers cannot hold the process disconnected.
 */
export const SETUP_TIMEOUT_MS = 30_000;

/** Dead letters keep a body up to this size whole (AMQP_DEAD_LETTER_MAX_BYTES)… */
export const DEAD_LETTER_MAX_BYTES = 64 * 1024;
/** … and of a larger one only its first bytes (at most the limit), with its size in a header. */
export const DEAD_LETTER_HEAD_BYTES = 4096;

/**
 * The copy of a delivery that goes to a dead-letter queue: a bounded body (whole up to `maxBytes`,
 * else its first DEAD_LETTER_HEAD_BYTES) and headers where every `x-faxline-*` header comes from the
 * service. A sender's own `x-faxline-*` headers are dropped, so it cannot write the reason or blame
 * another sender: `x-faxline-user-id` is the user_id property, which RabbitMQ has checked against
 * the publishing connection's user.
 */
export function deadLetterCopy(
  msg: Pick<ConsumeMessage, 'content' | 'properties'>,
  faxlineHeaders: Record<string, string | number>,
  maxBytes = DEAD_LETTER_MAX_BYTES,
): { raw: { content: Buffer; contentType: string }; headers: Record<string, unknown> } {
  const headers: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(msg.properties.headers ?? {})) {
    if (!k.toLowerCase().startsWith('x-faxline-')) headers[k] = v;
  }
  const size = msg.content.length;
  const whole = size <= maxBytes;
  const head = Math.min(DEAD_LETTER_HEAD_BYTES, maxBytes);
  Object.assign(headers, faxlineHeaders, {
    'x-faxline-user-id': (msg.properties.userId as string | undefined) ?? '',
    'x-faxline-original-bytes': size,
    ...(whole ? {} : { 'x-faxline-truncated': head }),
  });
  const contentType = (msg.properties.contentType as string | undefined) ?? 'application/octet-stream';
  return {
    raw: whole
      ? { content: msg.content, contentType }
      : { content: msg.content.subarray(0, head), contentType: 'application/octet-stream' },
    headers,
  };
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
  /** Deliveries larger than this are handed to the handler unparsed (body undefined). */
  maxBytes?: number | undefined;
  /** Every delivery is handed to the handler unparsed (body undefined): it reads msg.content itself. */
  unparsed?: boolean | undefined;
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
  onReply?: (outcome: ReplyOutcome) => void;
}

/**
 * The broker addresses of AMQP_URL: one URL, or several separated by commas (the nodes of a cluster).
 * Each is a whole URL with its own user, vhost and options.
 */
export function brokerUrls(list: string): string[] {
  return list
    .split(',')
    .map((u) => u.trim())
    .filter((u) => u !== '');
}

/** amqplib's connection object for `url` (read afresh at every reconnect, see `Broker.start`). */
function connectTarget(url: string): amqp.Options.Connect {
  const u = new URL(url);
  const q = u.searchParams;
  const num = (k: string) => (q.has(k) ? Number(q.get(k)) : undefined);
  const target: amqp.Options.Connect = {
    protocol: u.protocol.replace(/:$/, ''),
    hostname: u.hostname.replace(/^\[(.*)\]$/, '$1'),
    // As amqplib reads a URL string: no credentials at all means guest/guest.
    username: u.username || u.password ? decodeURIComponent(u.username) : 'guest',
    password: u.username || u.password ? decodeURIComponent(u.password) : 'guest',
    // Left encoded: amqplib decodes the vhost itself, of an object as of a URL string.
    vhost: u.pathname.length > 1 ? u.pathname.slice(1) : '/',
  };
  if (u.port) target.port = Number(u.port);
  // The query options amqplib reads from a URL string, under the same names.
  for (const k of ['heartbeat', 'frameMax', 'channelMax'] as const) {
    const v = num(k);
    if (v !== undefined) target[k] = v;
  }
  if (q.has('locale')) target.locale = q.get('locale')!;
  return target;
}

export class Broker {
  readonly names: Topology;
  private model?: RecoveringChannelModel;
  private pub: ConfirmChannel | undefined;
  private connected = false;
  private readonly consumers: ConsumerSpec[] = [];
  private readonly returned = new Set<string>();
  /** Answers published to the replies exchange whose confirm has not come yet (id → reply_to). */
  private readonly replying = new Map<string, string>();
  private readonly inflight = new Set<Promise<void>>();
  private readonly handling = new Map<string, Promise<void>>();
  private closing?: Promise<void>;
  /** The connection `setup` is working on (not yet handed to amqplib's recovery); see `close`. */
  private settingUp: amqp.ChannelModel | undefined;
  private readonly opts: TopologyOptions & {
    url: string;
    deliveryLimit: number;
    deadLetterMaxBytes?: number;
    setupTimeoutMs?: number;
  };
  private readonly log: Logger;
  private readonly hooks: BrokerHooks;

  constructor(
    opts: TopologyOptions & { url: string; deadLetterMaxBytes?: number; setupTimeoutMs?: number },
    log: Logger,
    hooks: BrokerHooks = {},
  ) {
    this.opts = opts;
    this.log = log.child({ component: 'amqp' });
    this.hooks = hooks;
    this.names = topologyNames(opts.prefix);
  }

  get isConnected(): boolean {
    return this.connected && this.pub !== undefined;
  }

  /**
   * Connects (retrying a bounded number of times at start) and declares the topology. With several
   * broker URLs, every reconnect attempt goes to the next one in the list (amqplib reads the target
   * object at each attempt), waiting longer only after a whole round of the list has failed.
   */
  async start(initialRetries = 10): Promise<void> {
    const urls = brokerUrls(this.opts.url);
    let at = 0;
    // One string URL is given to amqplib as it is; a list goes through one object we re-aim.
    const target = urls.length > 1 ? connectTarget(urls[0]!) : (urls[0] ?? this.opts.url);
    this.model = await amqp.connect(target, {
      recovery: {
        initialMaxRetries: initialRetries * Math.max(1, urls.length),
        maxRetries: Infinity,
        calculateDelay: (attempt: number) => {
          if (typeof target === 'object') {
            at = (at + 1) % urls.length;
            const next = connectTarget(urls[at]!);
            Object.assign(
              target,
              {
                port: undefined,
                heartbeat: undefined,
                frameMax: undefined,
                channelMax: undefined,
                locale: undefined,
              },
              next,
            );
            this.log.info({ broker: `${next.hostname}:${next.port ?? ''}` }, 'rabbitmq: next broker address');
          }
          const round = Math.floor((attempt - 1) / urls.length);
          const delay = Math.min(200 * 2 ** round, 5000);
          return delay * (0.8 + Math.random() * 0.4);
        },
        setup: async (m: amqp.ChannelModel) => this.setup(m),
        // The model at once, before the first connection: `close` can then stop a start that is
        // still trying, instead of leaving its attempts (and their sockets) running.
        waitForConnect: false,
      },
    });
    this.model.on('disconnect', (err: Error) => {
      this.connected = false;
      this.pub = undefined;
      this.log.warn({ err: err?.message }, 'rabbitmq disconnected; reconnecting');
    });
    this.model.on('connect', () => this.log.info('rabbitmq connected'));
    this.model.on('connect-failed', (err: Error) =>
      this.log.warn({ err: err?.message }, 'rabbitmq connection attempt failed; trying the next address'),
    );
    this.model.on('error', (err: Error) => this.log.warn({ err: err.message }, 'rabbitmq connection error'));
    this.model.on('handler-error', (err: Error) => this.log.error({ err }, 'rabbitmq handler error'));
    await this.model.waitForConnect();
  }

  /**
   * Declares the topology and attaches the consumers on a new connection, bounded by
   * SETUP_TIMEOUT_MS. amqplib's recovery listens to a connection only once this has succeeded, so
   * until then the connection's 'error' and 'close' are ours to handle: without an 'error' listener,
   * a fatal connection.close from the broker (RabbitMQ 3.10 sends 541 INTERNAL_ERROR when a consumer's
   * quorum queue loses its leader's node mid-attach, as when a cluster's nodes come back) is thrown
   * out of the socket handler (an uncaught exception) before the connection's channels are closed,
   * so the RPC this waits for never settles and recovery never tries again (docs/clustering.md).
   */
  private async setup(model: amqp.ChannelModel): Promise<void> {
    let lost: Error | undefined;
    model.on('error', (err: Error) => {
      if (this.settingUp === model)
        this.log.warn({ err: err.message }, 'rabbitmq connection error while setting up');
    });
    model.on('close', (err?: Error) => (lost ??= err ?? new Error('connection closed')));
    this.settingUp = model;
    const limit = this.opts.setupTimeoutMs ?? SETUP_TIMEOUT_MS;
    const timer = setTimeout(() => {
      this.log.warn({ ms: limit }, 'rabbitmq setup not finished in time; dropping the connection');
      dropConnection(model, new Error(`setup not finished within ${limit} ms`));
    }, limit);
    try {
      await this.setupOn(model).catch((err: unknown) => {
        // The channels' "no reply will be forthcoming" says less than the connection's own reason.
        throw lost ? new Error(`connection lost during setup: ${lost.message}`, { cause: err }) : err;
      });
      // A close read in the same chunk as the last reply came before this line ran: amqplib's
      // recovery would keep a dead connection (it listens only from now on), so fail instead.
      if (lost) throw new Error(`connection lost during setup: ${lost.message}`);
    } catch (err) {
      // This connection's publish channel goes with it (amqplib's 'disconnect' is only for
      // connections that finished setup).
      this.connected = false;
      this.pub = undefined;
      throw err;
    } finally {
      clearTimeout(timer);
      if (this.settingUp === model) this.settingUp = undefined;
    }
  }

  private async setupOn(model: amqp.ChannelModel): Promise<void> {
    const admin = await model.createChannel();
    await declareTopology(admin, this.opts, {
      openChannel: () => model.createChannel(),
      onLegacyIntake: (command) =>
        this.log.warn(
          { exchange: this.names.intake, command },
          'intake exchange has no alternate-exchange argument (declared by an older version): unless a policy sets one, messages with unknown routing keys are dropped by RabbitMQ; apply the policy',
        ),
    });
    await admin.close();
    const pub = await model.createConfirmChannel();
    pub.on('error', (err: Error) => this.log.warn({ err: err.message }, 'publish channel error'));
    pub.on('return', (m: amqp.Message) => {
      const id = m.properties.messageId as string | undefined;
      // RabbitMQ 3.10 returns every mandatory message to a direct reply-to token, delivered or not.
      if (!id || (m.fields.exchange === '' && m.fields.routingKey.startsWith('amq.rabbitmq.reply-to.')))
        return;
      const replyTo = this.replying.get(id);
      if (replyTo === undefined) {
        this.returned.add(id);
        return;
      }
      // No queue bound for this answer: the reply_to is not a queue of the sender's account.
      this.replying.delete(id);
      this.hooks.onReply?.('unroutable');
      this.log.warn(
        { replyTo },
        'answer dropped: reply queue not bound to the replies exchange for this account',
      );
    });
    pub.on('close', () => {
      if (this.pub === pub) this.pub = undefined;
    });
    this.pub = pub;
    // Sends can be published from here on. Attaching the consumers may wait (RabbitMQ holds
    // basic.consume on a quorum queue until it has a leader again), and intake need not wait with
    // it: its publishes are confirmed as soon as the queues have their majority back.
    this.connected = true;
    for (const c of this.consumers) await this.attach(model, c);
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
          // A message carrying a fax's trace context is published in that context: the amqplib
          // instrumentation's publish span (and the traceparent it writes) then belongs to the fax.
          inStoredContext(storedFromHeaders(m.headers), () =>
            ch.publish(
              exchange,
              m.routingKey,
              m.raw?.content ?? Buffer.from(JSON.stringify(m.body)),
              {
                persistent: true,
                mandatory: m.mandatory ?? true,
                contentType: m.raw?.contentType ?? 'application/json',
                messageId: ids[i]!,
                timestamp,
                ...(m.correlationId ? { correlationId: m.correlationId } : {}),
                ...(m.headers ? { headers: { ...m.headers } } : {}),
              },
              (err: unknown) => confirmed(i, err),
            ),
          ),
        );
      } catch (err) {
        finish(new BrokerUnavailableError(`publish failed: ${(err as Error).message}`));
      }
    });
  }

  /**
   * Sends a transient answer to `replyTo` without waiting for the broker: an answer is a courtesy
   * (the command's effect is already committed), so it is neither persistent nor awaited. Only a
   * reply_to the sender may use is answered, routed so that no other queue can receive it (see
   * reply.ts); `accountId` is the account of the message's validated user_id. Answers are published
   * with mandatory: an answer to a server-named queue that is not bound for the account comes back
   * and is dropped. Every outcome is counted (hooks.onReply); refusals are logged without the body.
   */
  reply(
    replyTo: string,
    accountId: string | undefined,
    body: unknown,
    o: { correlationId?: string; headers?: Record<string, unknown> },
  ): ReplyOutcome {
    const outcome = this.sendReply(replyTo, accountId, body, o);
    if (outcome !== 'sent') this.hooks.onReply?.(outcome);
    return outcome;
  }

  private sendReply(
    replyTo: string,
    accountId: string | undefined,
    body: unknown,
    o: { correlationId?: string; headers?: Record<string, unknown> },
  ): ReplyOutcome {
    const route = replyRoute(replyTo, accountId, this.names.replies);
    if ('refused' in route) {
      this.log.warn({ replyTo: replyTo.slice(0, 300), accountId, reason: route.refused }, 'answer refused');
      return 'refused';
    }
    const ch = this.pub;
    if (!this.connected || !ch) return 'failed';
    const messageId = randomUUID();
    // RabbitMQ 3.10 returns every mandatory message to a direct reply-to token, delivered or not, so
    // returns are only meaningful (and only tracked) for the replies exchange.
    if (!route.direct) this.replying.set(messageId, replyTo);
    try {
      ch.publish(
        route.exchange,
        route.routingKey,
        Buffer.from(JSON.stringify(body)),
        {
          persistent: false,
          mandatory: true,
          contentType: 'application/json',
          messageId,
          timestamp: Math.floor(Date.now() / 1000),
          ...(o.correlationId ? { correlationId: o.correlationId } : {}),
          ...(o.headers ? { headers: o.headers } : {}),
        },
        (err: unknown) => {
          // A return comes before its confirm: an answer still listed here was routed.
          const listed = this.replying.delete(messageId);
          if (err) this.hooks.onReply?.('failed');
          else if (listed || route.direct) this.hooks.onReply?.('sent');
        },
      );
      return 'sent';
    } catch {
      this.replying.delete(messageId);
      return 'failed';
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
    o: { maxBytes?: number; unparsed?: boolean } = {},
  ): Promise<void> {
    const spec: ConsumerSpec = {
      queue,
      prefetch,
      handler,
      onGiveUp,
      deadLetterKey,
      maxBytes: o.maxBytes,
      unparsed: o.unparsed,
    };
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
        this.handleDelivery(ch, spec, msg),
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

  private async handleDelivery(ch: Channel, spec: ConsumerSpec, msg: ConsumeMessage): Promise<void> {
    let body: unknown;
    // An oversized delivery is not parsed: its handler refuses it by its size. An unparsed consumer
    // parses (or refuses) every body itself.
    const unparsed =
      spec.unparsed === true || (spec.maxBytes !== undefined && msg.content.length > spec.maxBytes);
    try {
      body = unparsed ? undefined : JSON.parse(msg.content.toString('utf8'));
    } catch {
      body = undefined;
    }
    try {
      if (body === undefined && !unparsed) throw new PermanentMessageError('message body is not JSON');
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
          const copy = deadLetterCopy(
            msg,
            {
              'x-faxline-reason': reason.slice(0, 500),
              'x-faxline-queue': spec.queue,
              'x-faxline-routing-key': msg.fields.routingKey.slice(0, 255),
            },
            this.opts.deadLetterMaxBytes,
          );
          await this.publishMany(this.names.deadLetter, [
            {
              routingKey: spec.deadLetterKey ?? msg.fields.routingKey,
              body: undefined,
              raw: copy.raw,
              messageId: (msg.properties.messageId as string | undefined) ?? randomUUID(),
              headers: copy.headers,
            },
          ]);
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
        // Said once per delivery that waited: its handler ran n + 1 times in all.
        if (n > 0) this.log.info({ queue: spec.queue, runs: n + 1 }, 'dependency back; handled');
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
      // A connection still being set up is not amqplib's yet: its close would wait for setup.
      if (this.settingUp) dropConnection(this.settingUp, new Error('broker closing'));
      await this.model?.close().catch(() => undefined);
    })();
    return this.closing;
  }
}

/**
 * Ends a connection at once by destroying its socket: amqplib then closes its channels, so every RPC
 * waiting on it fails. (`close()` would wait for the broker's close-ok, which a stuck node never
 * sends.) The socket is amqplib's `connection.stream`, not in its typings.
 */
function dropConnection(model: amqp.ChannelModel, err: Error): void {
  const stream = (model.connection as unknown as { stream?: { destroy(e?: Error): void } }).stream;
  stream?.destroy(err);
}
