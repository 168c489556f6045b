// The sender of outgoing mail: a poll loop over mail_outbox. Each mail is claimed in a transaction
// (FOR UPDATE SKIP LOCKED, so several mail processes share the queue), composed from the rows it
// names, handed to SMTP_RELAY with nodemailer, and marked sent, or failed with its next attempt after
// a doubling delay (MAIL_RETRY_SECONDS, at most an hour), or, once it is MAIL_GIVE_UP_HOURS old,
// failed for good (failed_at; counted as outcome "failed"). Nothing lives in memory: a stopped or
// crashed process leaves its mail in the table for the next one; a relay that is down delays mail.
import { createTransport } from 'nodemailer';
import { anyDue, claimDue, markFailed, markSent } from '../accounts/mail.ts';
import { withTx, type Pool } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import { PollLoop } from '../poll-loop.ts';
import { compose, type ComposeOptions } from './compose.ts';
import type { MailMetrics } from './metrics.ts';

export interface OutboxOptions extends ComposeOptions {
  db: Pool;
  relay: string;
  from: string;
  retrySeconds: number;
  /** MAIL_GIVE_UP_HOURS: a mail this old that fails again is marked failed, not retried. */
  giveUpHours: number;
  pollMs: number;
  log: Logger;
  metrics: MailMetrics;
}

/** Mails sent in one pass before the loop looks again (then at once while there are more). */
const PER_PASS = 20;

export function startOutbox(o: OutboxOptions): { stop(): Promise<void> } {
  const transport = createTransport(o.relay, {
    from: o.from,
  });
  // Every wait on the relay is bounded: a mail holds its row's lock only this long.
  Object.assign(transport.options, {
    connectionTimeout: 15_000,
    greetingTimeout: 15_000,
    socketTimeout: 30_000,
  });
  const sendOne = () =>
    withTx(o.db, async (c) => {
      const row = await claimDue(c);
      if (!row) return false;
      try {
        const mail = await compose(c, row, o);
        if (mail) {
          await transport.sendMail({
            to: row.to_addr,
            subject: mail.subject,
            text: mail.text,
            attachments: mail.attachments,
            ...(row.message_id
              ? { inReplyTo: `<${row.message_id}>`, references: `<${row.message_id}>` }
              : {}),
          });
        }
        await markSent(c, row.id);
        o.metrics.outgoing.inc({ kind: row.kind, outcome: mail ? 'sent' : 'not_wanted' });
        o.log.info(
          { mailId: row.id, kind: row.kind, attempts: row.attempts + 1, sent: mail !== null },
          'mail: sent',
        );
      } catch (err) {
        const e = err as Error & { responseCode?: number; code?: string };
        if (row.age_seconds >= o.giveUpHours * 3600) {
          // Given up: never tried again, purged with the sent ones. Logged without content or address.
          await markFailed(c, row.id, null, e.message);
          o.metrics.outgoing.inc({ kind: row.kind, outcome: 'failed' });
          o.log.error(
            {
              mailId: row.id,
              kind: row.kind,
              attempts: row.attempts + 1,
              ageHours: Math.floor(row.age_seconds / 3600),
              code: e.code ?? null,
              responseCode: e.responseCode ?? null,
            },
            'mail: given up after MAIL_GIVE_UP_HOURS; not sent',
          );
          return true;
        }
        const delay = Math.min(3600, o.retrySeconds * 2 ** Math.min(row.attempts, 20));
        await markFailed(c, row.id, delay, e.message);
        o.metrics.outgoing.inc({ kind: row.kind, outcome: 'retry' });
        o.log.warn(
          {
            mailId: row.id,
            kind: row.kind,
            attempts: row.attempts + 1,
            retryInSeconds: delay,
            err: e.message,
          },
          'mail: could not be sent; retried later',
        );
      }
      return true;
    });
  const loop = new PollLoop({
    pass: async () => {
      let n = 0;
      while (n < PER_PASS && (await sendOne())) n++;
      return n;
    },
    again: (n) => n >= PER_PASS,
    probe: () => anyDue(o.db),
    waitMs: (failures) => Math.min(30_000, o.pollMs * 2 ** failures),
    onError: (err, failures) => o.log.warn({ err: err.message, failures }, 'mail: outbox pass failed'),
  });
  loop.start();
  return {
    stop: async () => {
      await loop.stop();
      transport.close();
    },
  };
}
