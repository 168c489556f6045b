-- faxline schema, version 21: received faxes (issue 20).
--
-- 1. One row per answered inbound fax call. The receiving side inserts it when it answers the call
--    (status 'receiving', no image) and completes it in ONE transaction with its images and its event
--    (src/receive/store.ts): a row is either still receiving, or complete with what it says it holds.
--    A row left 'receiving' by a process that died is failed by the sweep (never shown as received).
--    Images: the TIFF exactly as received and a PDF wrapping its T.4/T.6 strips (no re-encoding).
--    Retention and deletion empty `tiff`/`pdf` and keep the metadata; a deleted row (deleted_at) is no
--    longer shown to the customer at all.
CREATE TABLE received_faxes (
  id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id      uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  number_id       uuid REFERENCES numbers(id) ON DELETE SET NULL,
  to_number       text NOT NULL,
  from_number     text,                 -- caller id of the INVITE (E.164 when it could be normalised)
  remote_csid     text,                 -- the sender's T.30 TSI
  station_id      text,                 -- our CSI sent to the caller
  call_id         text,                 -- SIP Call-ID
  status          text NOT NULL DEFAULT 'receiving'
                  CHECK (status IN ('receiving', 'received', 'partial', 'failed')),
  pages           integer NOT NULL DEFAULT 0 CHECK (pages >= 0),
  x_dpi           integer,
  y_dpi           integer,
  resolution      text CHECK (resolution IN ('low', 'standard', 'hd', 'other')),  -- a send's quality names
  encoding        text CHECK (encoding IN ('T.4 1-D', 'T.4 2-D', 'T.6')),
  bit_rate        integer,
  ecm             boolean,
  transport       text CHECK (transport IN ('t38', 'audio')),
  duration_ms     integer,
  result_code     integer,              -- SpanDSP T.30 completion code, 0 when ok
  result_text     text,
  created_at      timestamptz NOT NULL DEFAULT now(),   -- the call was answered
  received_at     timestamptz,                          -- the reception ended and was stored
  read_at         timestamptz,
  tiff            bytea,
  pdf             bytea,
  tiff_bytes      integer,
  pdf_bytes       integer,
  images_deleted_at     timestamptz,
  images_deleted_reason text CHECK (images_deleted_reason IN ('retention', 'request')),
  deleted_at      timestamptz,
  CHECK ((status = 'receiving') = (received_at IS NULL))
);
-- The customer's list, newest first, per account (keyset over created_at, id).
CREATE INDEX received_faxes_page ON received_faxes (account_id, created_at, id) WHERE deleted_at IS NULL;
-- The retention purge walks only rows that still hold images.
CREATE INDEX received_faxes_images ON received_faxes (received_at) WHERE tiff IS NOT NULL OR pdf IS NOT NULL;
-- The sweep of receptions whose process died.
CREATE INDEX received_faxes_receiving ON received_faxes (created_at) WHERE status = 'receiving';

SELECT faxline_enable_tenant_rls('received_faxes');
-- The API role reads its account's received faxes, marks them read, deletes them (marks deleted_at
-- and empties the images); it never inserts one nor changes what was received.
REVOKE ALL ON received_faxes FROM faxline_api;
GRANT SELECT ON received_faxes TO faxline_api;
GRANT UPDATE (read_at, deleted_at, tiff, pdf, images_deleted_at, images_deleted_reason) ON received_faxes
  TO faxline_api;

-- 2. The outbox of received-fax events (fax.receiving, fax.received, fax.receive_failed), written in
--    the same transaction as the row change it announces; the event relay publishes it to
--    <prefix>.events and fans it out to webhooks like event_outbox. Not readable by the API role.
CREATE TABLE received_fax_outbox (
  id                bigserial PRIMARY KEY,
  event_id          uuid NOT NULL DEFAULT gen_random_uuid(),
  received_fax_id   uuid NOT NULL REFERENCES received_faxes(id) ON DELETE CASCADE,
  type              text NOT NULL CHECK (type IN ('fax.receiving', 'fax.received', 'fax.receive_failed')),
  details           jsonb NOT NULL,       -- what the event says, as it was when written
  created_at        timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON received_fax_outbox FROM faxline_api;
REVOKE ALL ON SEQUENCE received_fax_outbox_id_seq FROM faxline_api;

-- 3. Per-account retention of received faxes' images (days; NULL: the installation's
--    DOCUMENT_RETENTION_DAYS; 0: kept forever). Set by the operator (admin CLI).
ALTER TABLE accounts ADD COLUMN received_retention_days numeric CHECK (received_retention_days >= 0);
