// The mail component (docs/mail.md): the SMTP listener when SMTP_LISTEN is set, and the sender of
// outgoing mail when SMTP_RELAY is set. Runs alone (`npm run worker:mail`) or in the all-in-one process.
import { hostname } from 'node:os';
import type { DNSResolver } from 'mailauth';
import type { Pool } from '../db/pool.ts';
import type { Config } from '../config.ts';
import type { HttpIntakeDeps } from '../intake/send.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';
import { senderCheck } from './auth.ts';
import { handleMessage } from './gateway.ts';
import { startListener, type Listener } from './listener.ts';
import { createMailMetrics } from './metrics.ts';
import { startOutbox } from './outbox.ts';

export interface MailComponentDeps {
  cfg: Config;
  db: Pool;
  log: Logger;
  metrics: Metrics;
  /** The intake, as the API uses it; absent when SMTP_LISTEN is not set (nothing to take in). */
  intake: HttpIntakeDeps | null;
  /** The API's base URL (links in mails of numbers with email_attach "link", unless MAIL_LINK_BASE). */
  apiUrl: string;
  /** DNS answers for SPF/DKIM/DMARC (tests); the system resolver when absent. */
  resolver?: DNSResolver;
}

export interface MailComponent {
  /** Where the listener listens, when it does. */
  smtp: Listener['address'] | null;
  stop(): Promise<void>;
}

export async function startMail(d: MailComponentDeps): Promise<MailComponent> {
  const { cfg } = d;
  const log = d.log.child({ component: 'mail' });
  const metrics = createMailMetrics(d.metrics.registry);
  let listener: Listener | null = null;
  if (cfg.SMTP_LISTEN !== '') {
    if (cfg.MAIL_DOMAIN === '') throw new Error('SMTP_LISTEN needs MAIL_DOMAIN (the fax domain)');
    if (!d.intake) throw new Error('the mail listener was started without the intake');
    const intake = d.intake;
    const checkSender = senderCheck({
      mta: cfg.MAIL_DOMAIN || hostname(),
      ...(d.resolver ? { resolver: d.resolver } : {}),
    });
    listener = await startListener({
      listen: cfg.SMTP_LISTEN,
      domain: cfg.MAIL_DOMAIN,
      maxBytes: cfg.SMTP_MAX_BYTES,
      tlsCert: cfg.SMTP_TLS_CERT,
      tlsKey: cfg.SMTP_TLS_KEY,
      requireTls: cfg.SMTP_REQUIRE_TLS,
      xforwardFrom: cfg.SMTP_XFORWARD_FROM.split(',')
        .map((s) => s.trim())
        .filter(Boolean),
      log,
      metrics,
      handle: (raw, env) =>
        handleMessage(
          { db: d.db, intake, log, metrics, perMinute: cfg.MAIL_MESSAGES_PER_MINUTE, checkSender },
          raw,
          env,
        ),
    });
  }
  const outbox =
    cfg.SMTP_RELAY !== ''
      ? startOutbox({
          db: d.db,
          relay: cfg.SMTP_RELAY,
          from: cfg.MAIL_FROM || `fax@${cfg.MAIL_DOMAIN || 'localhost'}`,
          retrySeconds: cfg.MAIL_RETRY_SECONDS,
          giveUpHours: cfg.MAIL_GIVE_UP_HOURS,
          pollMs: cfg.MAIL_POLL_MS,
          linkBase: cfg.MAIL_LINK_BASE || d.apiUrl,
          now: () => new Date(),
          log,
          metrics,
        })
      : null;
  return {
    smtp: listener?.address ?? null,
    stop: async () => {
      await listener?.close();
      await outbox?.stop();
    },
  };
}
