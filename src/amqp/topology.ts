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
  };
}

/**
 * Declares exchanges and queues. Idempotent: safe on every start and every reconnect, as long as the
 * arguments do not change (RabbitMQ refuses a redeclaration with different arguments).
 */
export async function declareTopology(ch: Channel, o: TopologyOptions): Promise<Topology> {
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
  await ch.assertExchange(t.intake, 'direct', { durable: true });
  const intakeArgs: Options.AssertQueue['arguments'] = {
    'x-queue-type': o.queueType,
    'x-dead-letter-exchange': t.deadLetter,
    'x-dead-letter-routing-key': 'intake',
  };
  if (o.queueType === 'quorum') intakeArgs['x-delivery-limit'] = o.deliveryLimit;
  await ch.assertQueue(t.intake, { durable: true, arguments: intakeArgs });
  for (const type of commandTypes) await ch.bindQueue(t.intake, t.intake, type);
  await ch.assertQueue(t.intakeDead, { durable: true, arguments: { 'x-queue-type': o.queueType } });
  await ch.bindQueue(t.intakeDead, t.deadLetter, 'intake');
  return t;
}
