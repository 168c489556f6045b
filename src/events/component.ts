// The events component: the outbox relay (state changes → <prefix>.events) and the webhook deliverer.
import type { Broker } from '../amqp/broker.ts';
import type { Config } from '../config.ts';
import type { Pool } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import { addressCheck } from '../webhooks/address.ts';
import { WebhookDeliverer } from '../webhooks/deliver.ts';
import type { EventMetrics } from './metrics.ts';
import { type EventPublisher, EventRelay } from './relay.ts';

export function allowList(cfg: Pick<Config, 'WEBHOOK_ALLOW'>): string[] {
  return cfg.WEBHOOK_ALLOW.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/** Publishes an event to <prefix>.events and resolves on the publisher confirm. */
export function brokerEventPublisher(broker: Broker): EventPublisher {
  return (routingKey, event) =>
    // Not mandatory: an event nobody has bound to yet is not an error.
    broker.publish(broker.names.events, routingKey, event, {
      messageId: event.id,
      mandatory: false,
      headers: { 'x-faxline-event-type': event.type },
    });
}

export function eventRelay(db: Pool, broker: Broker, log: Logger, pollMs: number): EventRelay {
  return new EventRelay({ db, log, pollMs, publish: brokerEventPublisher(broker) });
}

export function startEvents(d: {
  db: Pool;
  broker: Broker;
  log: Logger;
  cfg: Config;
  metrics?: EventMetrics;
}): {
  stop(): Promise<void>;
} {
  const relay = new EventRelay({
    db: d.db,
    log: d.log,
    pollMs: d.cfg.EVENTS_POLL_MS,
    publish: brokerEventPublisher(d.broker),
    onPublished: (n) => d.metrics?.eventsPublished.inc(n),
  });
  const deliverer = new WebhookDeliverer({
    db: d.db,
    log: d.log,
    check: addressCheck(allowList(d.cfg)),
    timeoutMs: d.cfg.WEBHOOK_TIMEOUT_MS,
    policy: {
      baseSeconds: d.cfg.WEBHOOK_RETRY_BASE_SECONDS,
      maxSeconds: d.cfg.WEBHOOK_RETRY_MAX_SECONDS,
      giveUpHours: d.cfg.WEBHOOK_GIVE_UP_HOURS,
    },
    pollMs: Math.max(50, d.cfg.EVENTS_POLL_MS),
    concurrency: d.cfg.WEBHOOK_CONCURRENCY,
    accountConcurrency: d.cfg.WEBHOOK_ACCOUNT_CONCURRENCY,
    onAttempt: (ok) => d.metrics?.webhookAttempts.inc({ outcome: ok ? 'delivered' : 'failed' }),
  });
  relay.start();
  deliverer.start();
  return {
    stop: async () => {
      await Promise.all([relay.stop(), deliverer.stop()]);
    },
  };
}
