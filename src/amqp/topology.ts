import type { Channel, Options } from 'amqplib';
import type { CommandType } from '../domain/commands.ts';

export interface TopologyOptions {
  prefix: string;
  queueType: 'quorum' | 'classic';
  deliveryLimit: number;
}

export interface Topology {
  commands: string; // direct exchange; routing key = command type
  deadLetter: string; // direct exchange; same routing keys
  events: string; // topic exchange; routing key = <account_id>.<event type>
  queue(type: CommandType): string;
  deadLetterQueue(type: CommandType): string;
  intake: string; // direct exchange and quorum queue for external publishers (routing key = command type)
  intakeDead: string; // rejected intake messages, with x-faxline-reason (dead-letter routing key `intake`)
  /** Alternate exchange of `intake` (fanout, internal): routing keys outside the contract reach the intake queue. */
  intakeUnrouted: string;
  /**
   * Topic exchange for answers to a sender's own server-named queue: routing key `<account_id>.<queue>`.
   * Only a user whose topic permissions allow `^<account_id>\.` can bind a queue to it.
   */
  replies: string;
}

export const commandTypes: readonly CommandType[] = ['send', 'forward', 'cancel'];

export function topologyNames(prefix: string): Topology {
  return {
    commands: `${prefix}.commands`,
    deadLetter: `${prefix}.dead-letter`,
    events: `${prefix}.events`,
    queue: (t) => `${prefix}.cmd.${t}`,
    deadLetterQueue: (t) => `${prefix}.cmd.${t}.dead`,
    intake: `${prefix}.intake`,
    intakeDead: `${prefix}.intake.dead`,
    intakeUnrouted: `${prefix}.intake.unrouted`,
    replies: `${prefix}.replies`,
  };
}

/**
 * Declares exchanges and queues. Idempotent: safe on every start and every reconnect, as long as the
 * arguments do not change (RabbitMQ refuses a redeclaration with different arguments).
 */
export async function declareTopology(
  ch: Channel,
  o: TopologyOptions,
  hooks: TopologyHooks = {},
): Promise<Topology> {
  const t = topologyNames(o.prefix);
  await ch.assertExchange(t.commands, 'direct', { durable: true });
  await ch.assertExchange(t.deadLetter, 'direct', { durable: true });
  await ch.assertExchange(t.events, 'topic', { durable: true });
  for (const type of commandTypes) {
    const args: Options.AssertQueue['arguments'] = {
      'x-queue-type': o.queueType,
      'x-dead-letter-exchange': t.deadLetter,
    };
    // Quorum queues count deliveries themselves; classic queues have no delivery limit, and the
    // consumer's own count (x-delivery-count is absent there) bounds redeliveries instead.
    if (o.queueType === 'quorum') args['x-delivery-limit'] = o.deliveryLimit;
    await ch.assertQueue(t.queue(type), { durable: true, arguments: args });
    await ch.bindQueue(t.queue(type), t.commands, type);
    await ch.assertQueue(t.deadLetterQueue(type), {
      durable: true,
      arguments: { 'x-queue-type': o.queueType },
    });
    await ch.bindQueue(t.deadLetterQueue(type), t.deadLetter, type);
  }
  // The AMQP intake (src/amqp-intake): external senders may write only to this exchange, never to
  // the internal command exchange; whatever the intake rejects goes to <prefix>.intake.dead.
  // Unknown routing keys go to the alternate exchange and from there to the intake queue, whose
  // consumer rejects them with a reason like any other bad command (dead letter and answer).
  await ch.assertExchange(t.intakeUnrouted, 'fanout', { durable: true, internal: true });
  await declareIntakeExchange(ch, t, hooks);
  const intakeArgs: Options.AssertQueue['arguments'] = {
    'x-queue-type': o.queueType,
    'x-dead-letter-exchange': t.deadLetter,
    'x-dead-letter-routing-key': 'intake',
  };
  if (o.queueType === 'quorum') intakeArgs['x-delivery-limit'] = o.deliveryLimit;
  await ch.assertQueue(t.intake, { durable: true, arguments: intakeArgs });
  for (const type of commandTypes) await ch.bindQueue(t.intake, t.intake, type);
  await ch.bindQueue(t.intake, t.intakeUnrouted, '');
  await ch.assertExchange(t.replies, 'topic', { durable: true });
  await ch.assertQueue(t.intakeDead, { durable: true, arguments: { 'x-queue-type': o.queueType } });
  await ch.bindQueue(t.intakeDead, t.deadLetter, 'intake');
  return t;
}

export interface TopologyHooks {
  /**
   * Opens a throwaway channel. With it, an intake exchange declared by an older version (without the
   * alternate exchange) is kept as it is instead of failing the whole declaration; see `onLegacyIntake`.
   */
  openChannel?: () => Promise<Channel>;
  /** Called when `<prefix>.intake` exists without the alternate-exchange argument. */
  onLegacyIntake?: (policyHint: string) => void;
}

/**
 * `<prefix>.intake` carries `alternate-exchange: <prefix>.intake.unrouted`. Installations from before
 * that argument have the exchange without it, and RabbitMQ refuses a redeclaration with different
 * arguments (PRECONDITION_FAILED, which closes the channel). Deleting and recreating the exchange
 * would break older processes still running in a rolling update, so an existing exchange is left
 * alone and the operator is told to attach the alternate exchange by policy (docs/amqp-intake.md).
 */
async function declareIntakeExchange(ch: Channel, t: Topology, hooks: TopologyHooks): Promise<void> {
  const options: Options.AssertExchange = { durable: true, alternateExchange: t.intakeUnrouted };
  if (!hooks.openChannel) {
    await ch.assertExchange(t.intake, 'direct', options);
    return;
  }
  const probe = await hooks.openChannel();
  probe.on('error', () => undefined); // a refused redeclaration closes only this channel
  try {
    await probe.assertExchange(t.intake, 'direct', options);
    await probe.close();
  } catch (err) {
    if (!/PRECONDITION_FAILED/.test((err as Error).message)) throw err;
    await ch.checkExchange(t.intake);
    const p = intakePolicy(t);
    hooks.onLegacyIntake?.(
      `rabbitmqctl set_policy --apply-to exchanges ${p.name} '${p.pattern}' '${JSON.stringify(p.definition)}'`,
    );
  }
}

/** The policy (for exchanges) that gives an existing intake exchange its alternate exchange. */
export function intakePolicy(t: Topology): {
  name: string;
  pattern: string;
  definition: Record<string, string>;
} {
  return {
    name: `${t.intake}-ae`,
    pattern: `^${t.intake.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`,
    definition: { 'alternate-exchange': t.intakeUnrouted },
  };
}
