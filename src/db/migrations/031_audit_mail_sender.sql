-- faxline schema, version 31: the mail gateway's faxes in the audit trail (issue 32; docs/audit-retention.md).
-- A fax sent by mail is an event with actor_type 'mail_sender' and, as actor_id, the id of the
-- allowed-sender entry (mail_senders.id) that let the message in.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_actor_type_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_actor_type_check
  CHECK (actor_type IN ('api_key', 'user', 'amqp_sender', 'mail_sender', 'system', 'admin'));
