-- faxline schema, version 1. Migrations are numbered and never edited after they land:
-- a change is a new file. Every tenant-owned table carries account_id.

CREATE TABLE accounts (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  time_zone   text NOT NULL DEFAULT 'UTC',
  created_at  timestamptz NOT NULL DEFAULT now()
);

-- API keys are stored as SHA-256 of the full key (the key has 256 bits of entropy, so a fast hash is
-- safe); key_prefix keeps the first characters so an operator can tell keys apart.
CREATE TABLE api_keys (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  key_prefix  text NOT NULL,
  key_hash    bytea NOT NULL UNIQUE,
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);
CREATE INDEX api_keys_account ON api_keys (account_id);

CREATE TABLE access_tokens (
  token_hash  bytea PRIMARY KEY,
  api_key_id  uuid NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  issued_at   timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL
);
CREATE INDEX access_tokens_expiry ON access_tokens (expires_at);
CREATE INDEX access_tokens_key ON access_tokens (api_key_id);

-- Fax Defaults: the sender identity, quality and cover page of an account. One may be the default.
CREATE TABLE fax_defaults (
  id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id      uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  name            text NOT NULL,
  is_default      boolean NOT NULL DEFAULT false,
  fax_as          text NOT NULL CHECK (fax_as ~ '^\+[1-9][0-9]{1,14}$'),
  fax_quality     text NOT NULL DEFAULT 'standard' CHECK (fax_quality IN ('low', 'standard', 'hd')),
  cover_page      boolean NOT NULL DEFAULT true,
  sender_name     text,
  sender_company  text,
  sender_phone    text,
  sender_email    text,
  cover_footer    text,
  created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX fax_defaults_one_default ON fax_defaults (account_id) WHERE is_default;
CREATE INDEX fax_defaults_account ON fax_defaults (account_id);

-- Smart Templates: a PDF with form fields filled from the send request.
CREATE TABLE smart_templates (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  name        text NOT NULL,
  pdf         bytea,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX smart_templates_account ON smart_templates (account_id);

CREATE TABLE contacts (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  name        text NOT NULL,
  fax_number  text,
  company     text,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX contacts_account ON contacts (account_id);

CREATE TABLE numbers (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  number      text NOT NULL CHECK (number ~ '^\+[1-9][0-9]{1,14}$'),
  label       text,
  capabilities text[] NOT NULL DEFAULT ARRAY['fax_send', 'fax_receive'],
  created_at  timestamptz NOT NULL DEFAULT now(),
  UNIQUE (account_id, number)
);
-- Stable order for cursor pagination: (created_at, id).
CREATE INDEX numbers_page ON numbers (account_id, created_at, id);

CREATE TABLE esign_templates (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  name        text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX esign_templates_account ON esign_templates (account_id);

CREATE TABLE esign_template_fields (
  id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id   uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  template_id  uuid NOT NULL REFERENCES esign_templates(id) ON DELETE CASCADE,
  name         text NOT NULL,
  field_type   text NOT NULL,
  required     boolean NOT NULL DEFAULT false,
  page         integer NOT NULL DEFAULT 1,
  x            real NOT NULL DEFAULT 0,
  y            real NOT NULL DEFAULT 0,
  width        real NOT NULL DEFAULT 100,
  height       real NOT NULL DEFAULT 20,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX esign_template_fields_template ON esign_template_fields (template_id);

CREATE TABLE esign_field_rules (
  id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id   uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  template_id  uuid NOT NULL REFERENCES esign_templates(id) ON DELETE CASCADE,
  field_id     uuid REFERENCES esign_template_fields(id) ON DELETE CASCADE,
  condition    jsonb NOT NULL DEFAULT '{}'::jsonb,
  action       text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX esign_field_rules_template ON esign_field_rules (template_id);

CREATE TABLE esign_documents (
  id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id   uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  template_id  uuid REFERENCES esign_templates(id) ON DELETE SET NULL,
  title        text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX esign_documents_account ON esign_documents (account_id);

CREATE TABLE esign_document_themes (
  document_id  uuid PRIMARY KEY REFERENCES esign_documents(id) ON DELETE CASCADE,
  account_id   uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  primary_color text NOT NULL,
  background_color text NOT NULL,
  font_family  text NOT NULL,
  logo_url     text,
  updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Fax jobs. `state` follows src/domain/states.ts; every change is recorded in fax_job_transitions.
CREATE TABLE fax_jobs (
  id                 uuid PRIMARY KEY,
  account_id         uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  kind               text NOT NULL CHECK (kind IN ('send', 'forward')),
  source_job_id      uuid REFERENCES fax_jobs(id) ON DELETE SET NULL,
  state              text NOT NULL,
  fax_number         text NOT NULL,
  caller_id          text NOT NULL,
  fax_quality        text NOT NULL CHECK (fax_quality IN ('low', 'standard', 'hd')),
  fax_priority       text NOT NULL CHECK (fax_priority IN ('high', 'regular')),
  fax_default_id     uuid REFERENCES fax_defaults(id) ON DELETE SET NULL,
  smart_document_id  uuid REFERENCES smart_templates(id) ON DELETE SET NULL,
  scheduled_at       timestamptz,
  schedule_ref       text,             -- pg-boss job id of a scheduled fax
  options            jsonb NOT NULL DEFAULT '{}'::jsonb,
  page_count         integer,
  pages_sent         integer NOT NULL DEFAULT 0,
  attempts           integer NOT NULL DEFAULT 0,
  next_attempt_at    timestamptz,
  failure_code       text,
  failure_reason     text,
  request_id         text,
  dispatched_at      timestamptz,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  completed_at       timestamptz
);
CREATE INDEX fax_jobs_account_page ON fax_jobs (account_id, created_at DESC, id DESC);
CREATE INDEX fax_jobs_account_state ON fax_jobs (account_id, state, created_at DESC, id DESC);
-- The dispatcher's sweep: accepted jobs whose command publish was never confirmed.
CREATE INDEX fax_jobs_undispatched ON fax_jobs (created_at) WHERE dispatched_at IS NULL;

CREATE TABLE fax_job_transitions (
  id          bigserial PRIMARY KEY,
  job_id      uuid NOT NULL REFERENCES fax_jobs(id) ON DELETE CASCADE,
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  from_state  text,
  to_state    text NOT NULL,
  attempt     integer NOT NULL DEFAULT 0,
  at          timestamptz NOT NULL DEFAULT now(),
  detail      jsonb
);
CREATE INDEX fax_job_transitions_job ON fax_job_transitions (job_id, id);

-- Documents of a job, in order. `content` holds the PDF (PostgreSQL is the built-in store);
-- file_url documents are fetched by the worker and stored here too.
CREATE TABLE fax_documents (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  job_id      uuid NOT NULL REFERENCES fax_jobs(id) ON DELETE CASCADE,
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  position    integer NOT NULL,
  file_name   text NOT NULL,
  file_url    text,
  content     bytea,
  byte_size   integer,
  created_at  timestamptz NOT NULL DEFAULT now(),
  UNIQUE (job_id, position)
);
