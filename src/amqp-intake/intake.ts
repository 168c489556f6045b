// The AMQP intake for high-volume senders. A sender publishes the same JSON body as the HTTP API to
// the exchange <prefix>.intake with routing key send | forward | cancel, as its own RabbitMQ user with
// the user_id property set (the broker refuses a user_id that is not the connection's user), and a
// message_id that is its command id. The account comes from the user, never from the body.
// Validation and acceptance are the HTTP intake's own code (src/intake/send.ts, cancel.ts), so the
// rules and error messages are the same. An answer in the API's envelope goes to reply_to with the
// correlation id; a rejected command is also dead-lettered to <prefix>.intake.dead with its reason.
import type { ConsumeMessage } from 'amqplib';
import { type AuditEvent, recordAudit } from '../audit/record.ts';
import { type Broker, deadLetterCopy } from '../amqp/broker.ts';
import { ApiError, type Envelope, messages, ok } from '../domain/envelope.ts';
import { jsonShapeMessages, jsonShapeProblem } from '../domain/json-shape.ts';
import { cancelScheduleBody, forwardFaxBody, maxJsonValues, sendFaxBody } from '../domain/schemas.ts';
import { parseBody } from '../domain/validate.ts';
import { type Pool, withTx } from '../db/pool.ts';
import { acceptBroadcastCommand, DEFAULT_MAX_RECIPIENTS } from '../intake/broadcast.ts';
import { cancelScheduled } from '../intake/cancel.ts';
import { type IntakeDeps, prepareForward, prepareSend } from '../intake/send.ts';
import type { Logger } from '../log.ts';
import type { EventMetrics } from '../events/metrics.ts';
import { JobBatcher } from './batch.ts';
import { cachedReads } from './read-cache.ts';
import { senderLookup } from '../auth/senders.ts';

/** Command ids: printable ASCII without spaces, 1–100 characters. */
export const COMMAND_ID = /^[\x21-\x7e]{1,100}$/;

export const intakeMessages = {
  noUserId:
    'Message rejected: it carries no user_id property. Publish as your own RabbitMQ user with user_id set to that user name.',
  unknownUser: (u: string) => `Message rejected: RabbitMQ user "${u}" is not registered as a sender.`,
  noCommandId:
    'Message rejected: message_id (the command id) is required: 1 to 100 printable characters without spaces.',
  badType: (t: string) =>
    `Message rejected: unknown command "${t}"; use routing key send, forward or cancel.`,
  tooLarge: (max: number) => `Message rejected: it is larger than ${max} bytes.`,
  inlineRefused:
    'fax_data: documents inline (file_data) are refused over AMQP on this installation (AMQP_INLINE_DOCUMENTS=refuse); give file_url, or upload over HTTPS.',
  notJson: 'Message rejected: its body is not valid JSON.',
  shape: (why: string) => `Message rejected: ${why}.`,
} as const;

export interface IntakeOutcome {
  envelope: Envelope;
  http: number;
  /** Set when the message must be dead-lettered: the reason. */
  rejected?: string;
  /** The dead letter keeps no byte of the body (an inline document refused for being inline). */
  dropBody?: boolean;
  /**
   * The audit event still to write, in a statement of its own: a refusal's, a cancel's. A single
   * send's or forward's is written in its job's transaction, a broadcast's in the broadcast's.
   */
  audit?: AuditEvent;
}

/** The audit action of each command type (the same names as over HTTP). */
const auditActions: Record<string, string> = {
  send: 'fax.send',
  forward: 'fax.forward',
  cancel: 'fax.cancel',
};

/** Request ids of AMQP jobs: '/' never occurs in HTTP request ids, so the unique index is ours. */
export const requestIdOf = (commandId: string) => `amqp/${commandId}`;

export interface AmqpIntakeDeps extends IntakeDeps {
  log: Logger;
  /** Jobs per PostgreSQL transaction, and how long a partial batch waits for more. */
  maxBatch?: number;
  lingerMs?: number;
  metrics?: EventMetrics;
  /** Largest message accepted (AMQP_INTAKE_MAX_BYTES); larger ones are refused unparsed. */
  maxMessageBytes?: number;
  /** Largest body a dead letter keeps whole (AMQP_DEAD_LETTER_MAX_BYTES). */
  deadLetterMaxBytes?: number;
  /** Deepest nesting of a body (MAX_JSON_DEPTH, as over HTTP); default 32. */
  maxJsonDepth?: number;
  /** AMQP_INLINE_DOCUMENTS: 'refuse' refuses a send whose documents are inline (default allow). */
  inlineDocuments?: 'allow' | 'refuse';
}

/** True when a send body carries a document inline (fax_data[].file_data), checked after parsing. */
function hasInlineDocument(send: {
  fax_data?: readonly { file_data?: string | undefined }[] | undefined;
}): boolean {
  return (send.fax_data ?? []).some((f) => f.file_data !== undefined);
}

export function amqpIntake(d: AmqpIntakeDeps) {
  const accountOf = senderLookup(d.db);
  // The HTTP edge's bounds on a JSON body, checked on the text before it is parsed (json-shape.ts).
  const limits = {
    maxDepth: d.maxJsonDepth ?? 32,
    maxValues: maxJsonValues(d.maxBroadcastRecipients ?? DEFAULT_MAX_RECIPIENTS),
  };
  const log = d.log.child({ component: 'amqp-intake' });
  // Reference lookups of prepareSend/prepareForward, cached for a second (see read-cache.ts).
  const reads = { ...d, db: cachedReads(d.db, 1000) };
  const batcher = new JobBatcher({
    db: d.db,
    publisher: d.publisher,
    scheduler: d.scheduler,
    maxBatch: d.maxBatch ?? 500,
    lingerMs: d.lingerMs ?? 5,
    onBatch: (n) => d.metrics?.intakeBatchSize.observe(n),
  });

  /** Decides one command. Throws only for transient trouble (the delivery is then retried). */
  async function decide(msg: ConsumeMessage): Promise<IntakeOutcome> {
    const user = msg.properties.userId as string | undefined;
    if (!user) return reject(401, intakeMessages.noUserId);
    const accountId = await accountOf(user);
    if (!accountId) return reject(403, intakeMessages.unknownUser(user));
    const commandId = msg.properties.messageId as string | undefined;
    if (!commandId || !COMMAND_ID.test(commandId)) return reject(422, intakeMessages.noCommandId);
    if (d.maxMessageBytes !== undefined && msg.content.length > d.maxMessageBytes) {
      return reject(413, intakeMessages.tooLarge(d.maxMessageBytes));
    }
    // Parsed here, not by the broker, so that a body of millions of values or nested thousands deep is
    // refused from a scan of its bytes (json-shape.ts) before anything is built from it.
    const problem = jsonShapeProblem(msg.content, limits);
    if (problem === 'depth')
      return reject(400, intakeMessages.shape(jsonShapeMessages.depth(limits.maxDepth)));
    if (problem === 'values')
      return reject(413, intakeMessages.shape(jsonShapeMessages.values(limits.maxValues)));
    let body: unknown;
    try {
      body = JSON.parse(msg.content.toString('utf8'));
    } catch {
      return reject(400, intakeMessages.notJson);
    }
    const requestId = requestIdOf(commandId);
    const type = msg.fields.routingKey;
    // Every command of a known type is an audit event of the sender's account (docs/audit-retention.md):
    // actor amqp_sender, its id the broker user; no address or user agent exists over AMQP.
    const action = auditActions[type];
    const event = (objectId: string | null, http: number, message?: string): AuditEvent | undefined =>
      action === undefined
        ? undefined
        : {
            accountId,
            actor: { type: 'amqp_sender', id: user },
            action,
            object: { type: 'fax', id: objectId },
            result: http < 400 ? 'ok' : 'refused',
            status: http,
            detail: message === undefined ? null : { message: message.slice(0, 200) },
          };
    let cancelOf: string | null = null;
    try {
      switch (type) {
        case 'send':
        case 'forward': {
          const send = type === 'send' ? parseBody(sendFaxBody, body) : null;
          // Refused after the command is read (the sender learns why); it was in the queue already.
          // Its dead letter keeps the headers only: the point is that the document is not kept.
          if (send && d.inlineDocuments === 'refuse' && hasInlineDocument(send))
            return {
              ...reject(422, intakeMessages.inlineRefused),
              dropBody: true,
              audit: event(null, 422, intakeMessages.inlineRefused)!,
            };
          if (send?.recipients !== undefined) {
            // A broadcast: its own transaction (it is a batch of its own), idempotent by command id.
            const answer = await acceptBroadcastCommand(
              {
                ...d,
                withTx: (fn) => withTx(d.db, fn),
                audit: (c, a) => recordAudit(c, event(a.job_id, 200)!),
              },
              accountId,
              { ...send, recipients: send.recipients },
              requestId,
            );
            return { http: 200, envelope: ok(messages.processed, { ...answer, command_id: commandId }) };
          }
          // The HTTP intake's checks, then a batched commit (a repeated command id: the same job).
          const { job, docs } =
            type === 'send'
              ? await prepareSend(reads, accountId, send!, requestId)
              : {
                  job: await prepareForward(reads, accountId, parseBody(forwardFaxBody, body), requestId),
                  docs: [],
                };
          const jobId = await batcher.add(job, docs, event(job.id, 200));
          return { http: 200, envelope: ok(messages.processed, { job_id: jobId, command_id: commandId }) };
        }
        case 'cancel': {
          const b = parseBody(cancelScheduleBody, body);
          cancelOf = b.job_id;
          await cancelScheduled({ db: d.db, broker: d.broker, log }, accountId, b.job_id, requestId);
          return {
            http: 200,
            envelope: ok(messages.cancelled, { job_id: b.job_id, command_id: commandId }),
            audit: event(b.job_id, 200)!,
          };
        }
        default:
          return reject(400, intakeMessages.badType(type));
      }
    } catch (err) {
      if (err instanceof ApiError && err.http < 500) {
        const audit = event(cancelOf, err.http, err.message);
        return {
          http: err.http,
          envelope: err.toEnvelope(),
          rejected: err.message,
          ...(audit ? { audit } : {}),
        };
      }
      throw err; // 503 (broker or database down) and the unexpected: retried
    }
  }

  function reject(http: number, message: string): IntakeOutcome {
    return { http, envelope: { status: 0, message }, rejected: message };
  }

  async function answer(msg: ConsumeMessage, o: IntakeOutcome): Promise<void> {
    const replyTo = msg.properties.replyTo as string | undefined;
    if (!replyTo) return;
    // The account of the validated user_id decides which server-named queues may get the answer.
    const user = msg.properties.userId as string | undefined;
    const accountId = user ? ((await accountOf(user).catch(() => null)) ?? undefined) : undefined;
    // Transient and not awaited: the command's effect is committed (and a rejection dead-lettered)
    // before this; a sender that misses the answer republishes with the same message_id.
    const outcome = d.broker.reply(replyTo, accountId, o.envelope, {
      correlationId: (msg.properties.correlationId as string | undefined) ?? msg.properties.messageId,
      headers: { 'x-faxline-http-status': o.http },
    });
    if (outcome === 'failed') log.warn({ user }, 'reply not sent');
  }

  return async (msg: ConsumeMessage): Promise<void> => {
    const o = await decide(msg);
    if (o.audit) {
      // As over HTTP: an event that cannot be written does not undo the command (a cancel is
      // committed; a refusal is answered and dead-lettered); it is logged at error level.
      const e = o.audit;
      await recordAudit(d.db, e).catch((err: unknown) =>
        log.error({ err, action: e.action, accountId: e.accountId }, 'audit event not written'),
      );
    }
    d.metrics?.intakeCommands.inc({
      type: ['send', 'forward', 'cancel'].includes(msg.fields.routingKey) ? msg.fields.routingKey : 'other',
      outcome: o.rejected === undefined ? 'accepted' : 'rejected',
    });
    if (o.rejected !== undefined) {
      // Dead-letter first (a confirm is awaited), then answer; the delivery is acked after both.
      // A bounded copy; the x-faxline-* headers are the service's, the blame is the validated user_id.
      const copy = deadLetterCopy(
        msg,
        {
          'x-faxline-reason': o.rejected.slice(0, 500),
          'x-faxline-queue': d.broker.names.intake,
          'x-faxline-routing-key': msg.fields.routingKey.slice(0, 255),
        },
        o.dropBody ? 0 : d.deadLetterMaxBytes,
      );
      await d.broker.publishMany(d.broker.names.deadLetter, [
        {
          routingKey: 'intake',
          body: undefined,
          raw: copy.raw,
          ...(msg.properties.messageId ? { messageId: msg.properties.messageId as string } : {}),
          headers: copy.headers,
        },
      ]);
      log.info(
        { user: msg.properties.userId, commandId: msg.properties.messageId, reason: o.rejected },
        'command rejected',
      );
    }
    await answer(msg, o);
  };
}

export async function startAmqpIntake(
  d: AmqpIntakeDeps & { db: Pool; broker: Broker; prefetch: number },
): Promise<void> {
  // Unparsed: the handler reads every body itself (size, then shape, then JSON.parse).
  await d.broker.consume(d.broker.names.intake, d.prefetch, amqpIntake(d), undefined, 'intake', {
    unparsed: true,
  });
}
