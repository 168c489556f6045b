-- Events, webhooks and the AMQP intake (issue 7).

-- The events outbox. transition() and insertJob() add a row here in the same statement/transaction
-- as the state change, so an event exists exactly when its transition was committed. The relay
-- publishes rows to the events exchange (publisher confirms), fans them out to webhook endpoints and
-- deletes them, all in one transaction; a relay that dies before its commit leaves the rows for the
-- next one (at-least-once; consumers deduplicate by event id).
CREATE TABLE event_outbox (
  transition_id  bigint PRIMARY KEY REFERENCES fax_job_transitions(id) ON DELETE CASCADE,
  event_id       uuid NOT NULL DEFAULT gen_random_uuid(),
  created_at     timestamptz NOT NULL DEFAULT now()
);

-- RabbitMQ users allowed to publish commands to the AMQP intake, and the account each acts for.
-- The broker checks the user_id property against the connection's user; we map it to an account.
CREATE TABLE amqp_senders (
  broker_user  text PRIMARY KEY CHECK (length(broker_user) BETWEEN 1 AND 200),
  account_id   uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX amqp_senders_account ON amqp_senders (account_id);

-- A command published twice makes one fax: AMQP intake jobs carry request_id = 'amqp/<message_id>'
-- ('/' never occurs in HTTP request ids), unique per account.
CREATE UNIQUE INDEX fax_jobs_amqp_command ON fax_jobs (account_id, request_id) WHERE request_id LIKE 'amqp/%';

-- Webhook endpoints of an account. `secret` is the Standard Webhooks signing secret (whsec_…).
CREATE TABLE webhook_endpoints (
  id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id   uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  url          text NOT NULL CHECK (length(url) BETWEEN 8 AND 2048),
  secret       text NOT NULL,
  event_types  text[],                -- NULL: every event type
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_account ON webhook_endpoints (account_id);

-- One row per (endpoint, event): the delivery log the customer reads, and the retry schedule.
-- Deliveries of one job to one endpoint go out in sequence order (a later one waits while an
-- earlier one is pending).
CREATE TABLE webhook_deliveries (
  id               bigserial PRIMARY KEY,
  endpoint_id      uuid NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
  account_id       uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  event_id         uuid NOT NULL,
  event_type       text NOT NULL,
  job_id           uuid NOT NULL,
  sequence         bigint NOT NULL,
  payload          jsonb NOT NULL,
  state            text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts         integer NOT NULL DEFAULT 0,
  next_attempt_at  timestamptz NOT NULL DEFAULT now(),
  last_status      integer,
  last_error       text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  delivered_at     timestamptz,
  UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_order ON webhook_deliveries (endpoint_id, job_id, sequence) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (endpoint_id, id DESC);

-- Every attempt of a delivery, for the customer's delivery log.
CREATE TABLE webhook_attempts (
  id           bigserial PRIMARY KEY,
  delivery_id  bigint NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
  attempt      integer NOT NULL,
  at           timestamptz NOT NULL DEFAULT now(),
  http_status  integer,
  error        text,
  duration_ms  integer NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, id);
