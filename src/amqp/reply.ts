// Where an answer to an AMQP command may go. A reply_to is a sender's wish, not an address the
// service trusts: published as the service's own broker user to the default exchange, it would reach
// any queue on the broker (internal command queues, other accounts' reply queues, other
// installations' queues). Two kinds of reply_to are honoured, each routed so that only the sender's
// own queue can receive the answer:
//
// - RabbitMQ's direct reply-to, `amq.rabbitmq.reply-to.<token>`: the broker fills in the token for
//   the publishing channel, and the token carries a random key that the broker checks before it
//   delivers. Published to the default exchange, the answer reaches that channel or nothing.
// - A server-named queue, `amq.gen-…`: the answer is published to the topic exchange
//   `<prefix>.replies` with routing key `<account_id>.<queue>`. A queue receives it only if it is
//   bound with that key, and the broker lets only users whose topic permissions allow
//   `^<account_id>\.` make such a binding (and only the owning connection may bind an exclusive
//   queue). The account is the one of the broker-validated user_id.
//
// Everything else (named queues, the bare `amq.rabbitmq.reply-to`, server-named queues without a
// known account) is refused.

/** Direct reply-to as the broker rewrites it for the consumer: a token after the fixed name. */
const DIRECT_REPLY_TO = /^amq\.rabbitmq\.reply-to\.[A-Za-z0-9+/=_.-]{1,240}$/;
/** RabbitMQ's server-generated queue names (`amq.` names cannot be declared by clients). */
const SERVER_NAMED = /^amq\.gen-[A-Za-z0-9_-]{1,200}$/;

export type ReplyRoute = { exchange: string; routingKey: string; direct: boolean } | { refused: string };

/**
 * Decides the route of an answer. `accountId` is the account of the validated user_id (undefined
 * when the message had none or its user is not a sender); `repliesExchange` is `<prefix>.replies`.
 */
export function replyRoute(
  replyTo: string,
  accountId: string | undefined,
  repliesExchange: string,
): ReplyRoute {
  if (DIRECT_REPLY_TO.test(replyTo)) return { exchange: '', routingKey: replyTo, direct: true };
  if (SERVER_NAMED.test(replyTo)) {
    if (!accountId) return { refused: 'server-named reply queue without a registered sender' };
    return { exchange: repliesExchange, routingKey: `${accountId}.${replyTo}`, direct: false };
  }
  return { refused: 'reply_to is neither amq.rabbitmq.reply-to nor a server-named queue' };
}
