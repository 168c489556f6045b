// The AsyncAPI 3 description of the AMQP contract, generated from the same zod schemas as the HTTP
// API (request bodies) and the events. Served at /asyncapi.json.
import { z } from 'zod';
import { cancelScheduleBody, forwardFaxBody, sendFaxBody } from '../domain/schemas.ts';
import { faxEvent, receivedFaxEvent } from './schema.ts';
import { jobEventTypes, receiveEventTypes } from './types.ts';

const envelope = z
  .object({
    status: z.number().int().describe('1: accepted; 0: rejected.'),
    message: z.string().describe('The same message the HTTP API answers with.'),
    data: z
      .union([
        z.object({
          job_id: z.string(),
          command_id: z.string(),
          broadcast_id: z.string().optional().describe('A broadcast (send with recipients): its id.'),
          job_ids: z
            .array(z.string())
            .optional()
            .describe('A broadcast: one job per recipient, in the order of recipients.'),
        }),
        z.string(),
        z.record(z.string(), z.unknown()),
      ])
      .optional(),
  })
  .describe('The answer to a command, in the customer API envelope.');

const json = (s: z.ZodType, io: 'input' | 'output') => z.toJSONSchema(s, { io, unrepresentable: 'any' });

export function asyncApiDocument(prefix = '{prefix}'): Record<string, unknown> {
  // AMQP message properties of a command. The AMQP bindings (0.3.0) have no field for most of them
  // (the message binding allows contentEncoding and messageType only), so they are described here.
  const commandProperties = [
    'AMQP properties: user_id is required (your RabbitMQ user; the broker checks it);',
    'message_id is required (the command id, 1–100 printable characters; a republish with the same id makes no second fax);',
    'reply_to is optional (where the answer goes: only amq.rabbitmq.reply-to (direct reply-to), or a server-named queue (amq.gen-…) bound to <prefix>.replies with the key <account_id>.<queue>; any other reply_to gets no answer);',
    'correlation_id is optional (copied to the answer; default: the message id);',
    'delivery_mode 2 (persistent).',
  ].join(' ');
  const command = (name: string, schema: z.ZodType, summary: string) => ({
    name,
    title: name,
    summary,
    description: commandProperties,
    contentType: 'application/json',
    payload: json(schema, 'input'),
    bindings: { amqp: { messageType: name, bindingVersion: '0.3.0' } },
    correlationId: { location: '$message.header#/correlation_id' },
  });
  return {
    asyncapi: '3.0.0',
    info: {
      title: 'faxline AMQP interface',
      version: '1.0.0',
      description:
        'Commands for high-volume senders (the same bodies and rules as POST /v1/faxes/send, /forward and /cancel-schedule) and the events of every fax job state change and of every received fax. Each sender publishes as its own RabbitMQ user with user_id set; the account is the one that user is registered for.',
    },
    defaultContentType: 'application/json',
    servers: {
      broker: { host: 'rabbitmq:5672', protocol: 'amqp', protocolVersion: '0-9-1' },
    },
    channels: {
      intake: {
        address: `${prefix}.intake`,
        description: 'Exchange (direct) for commands; routing key send, forward or cancel.',
        messages: {
          send: command(
            'send',
            sendFaxBody,
            'Send a fax (routing key send); with recipients instead of fax_number, a broadcast: one job per recipient, the answer carries broadcast_id and job_ids.',
          ),
          forward: command('forward', forwardFaxBody, 'Forward a fax (routing key forward).'),
          cancel: command('cancel', cancelScheduleBody, 'Cancel a scheduled fax (routing key cancel).'),
        },
        bindings: {
          amqp: {
            is: 'routingKey',
            exchange: { name: `${prefix}.intake`, type: 'direct', durable: true, vhost: '/' },
            bindingVersion: '0.3.0',
          },
        },
      },
      replies: {
        address: null,
        description:
          'The reply_to queue of the command; the answer carries the correlation id and header x-faxline-http-status.',
        messages: {
          reply: { name: 'reply', contentType: 'application/json', payload: json(envelope, 'output') },
        },
      },
      events: {
        address: `${prefix}.events`,
        description:
          'Exchange (topic) of events. Routing key <account_id>.<type>, e.g. <account_id>.fax.delivered; bind <account_id>.# for all of an account, or *.fax.failed for one type.',
        messages: {
          event: {
            name: 'event',
            contentType: 'application/json',
            payload: json(faxEvent, 'output'),
            bindings: { amqp: { messageType: jobEventTypes.join(' | '), bindingVersion: '0.3.0' } },
          },
          receivedFaxEvent: {
            name: 'receivedFaxEvent',
            title: 'Received fax event',
            summary:
              'fax.receiving when a call to one of the account’s numbers is answered; fax.received when the fax is stored; fax.receive_failed when it ended without every page (partial: the pages that arrived are stored) or without any.',
            contentType: 'application/json',
            payload: json(receivedFaxEvent, 'output'),
            bindings: { amqp: { messageType: receiveEventTypes.join(' | '), bindingVersion: '0.3.0' } },
          },
        },
        bindings: {
          amqp: {
            is: 'routingKey',
            exchange: { name: `${prefix}.events`, type: 'topic', durable: true, vhost: '/' },
            bindingVersion: '0.3.0',
          },
        },
      },
    },
    operations: {
      sendCommand: {
        action: 'send',
        channel: { $ref: '#/channels/intake' },
        bindings: { amqp: { deliveryMode: 2, bindingVersion: '0.3.0' } },
        messages: [
          { $ref: '#/channels/intake/messages/send' },
          { $ref: '#/channels/intake/messages/forward' },
          { $ref: '#/channels/intake/messages/cancel' },
        ],
        reply: {
          channel: { $ref: '#/channels/replies' },
          address: { location: '$message.header#/reply_to' },
        },
      },
      receiveEvents: {
        action: 'receive',
        channel: { $ref: '#/channels/events' },
        messages: [
          { $ref: '#/channels/events/messages/event' },
          { $ref: '#/channels/events/messages/receivedFaxEvent' },
        ],
      },
    },
  };
}
