// The mail gateway's metrics (docs/observability.md names them). No address, account or number in a label.
import client from 'prom-client';

export interface MailMetrics {
  /** Messages the listener took to the end of DATA, by outcome. */
  messages: client.Counter<'outcome'>;
  /** SPF and DMARC results of messages from allowed senders. */
  auth: client.Counter<'spf' | 'dmarc'>;
  /** RCPTs refused (not the fax domain, not a number), and MAIL FROM without STARTTLS when required. */
  rcptRefused: client.Counter<'reason'>;
  /** Outgoing mails, by kind and outcome (sent, not_wanted, retry, failed). */
  outgoing: client.Counter<'kind' | 'outcome'>;
}

export function createMailMetrics(registry: client.Registry): MailMetrics {
  return {
    messages: new client.Counter({
      name: 'faxline_mail_messages_total',
      help: 'Messages received by the SMTP gateway, by outcome: accepted (faxes made), refused (the sender was told why), unknown_sender, sender_auth_failed, subject_token_missing (dropped without reply), rate_limited and later (451), unparseable (554).',
      labelNames: ['outcome'],
      registers: [registry],
    }),
    auth: new client.Counter({
      name: 'faxline_mail_auth_total',
      help: 'SPF and DMARC results of messages from allowed senders (mail setting sender_auth record or enforce).',
      labelNames: ['spf', 'dmarc'],
      registers: [registry],
    }),
    rcptRefused: new client.Counter({
      name: 'faxline_mail_rcpt_refused_total',
      help: 'RCPT TO refused by the SMTP gateway: other_domain (no relay) or not_a_number; and MAIL FROM refused with tls_required (SMTP_REQUIRE_TLS, no STARTTLS).',
      labelNames: ['reason'],
      registers: [registry],
    }),
    outgoing: new client.Counter({
      name: 'faxline_mail_outgoing_total',
      help: "Mails sent through SMTP_RELAY by kind (receipt, result, refused, received, text) and outcome (sent; not_wanted: the account's receipts setting; retry; failed: given up after MAIL_GIVE_UP_HOURS).",
      labelNames: ['kind', 'outcome'],
      registers: [registry],
    }),
  };
}
