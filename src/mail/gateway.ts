// Email to fax: one received message → the fax jobs it asks for, through the same intake as
// POST /v1/faxes/send (acceptSend, or acceptBroadcast for several numbers), with its validation,
// limits and idempotency (the Message-ID is the Idempotency-Key, so a DATA retried after a crash
// makes no second fax). The listener answers 250 only after this resolved with 'accepted' or
// 'dropped' (the jobs are committed, or the message is deliberately discarded).
//
// Who gets what:
// - an allowed sender whose message makes faxes: 250, a receipt (receipts 'all'), results later;
// - an allowed sender whose message cannot be a fax (no attachment, a file type not taken, a
//   document the intake refuses): 250 and one mail saying why;
// - an unknown sender, a failed SPF/DKIM/DMARC check (enforce), a missing subject token: 250 and
//   nothing at all (no fax, no reply: no backscatter), counted and logged without content;
// - trouble on our side (database, broker, the account's message rate): 451, the server retries.
import { createHash } from 'node:crypto';
import PostalMime, { type Address, type Email } from 'postal-mime';
import { ApiError } from '../domain/envelope.ts';
import { sendFaxBody, type SendFaxBody } from '../domain/schemas.ts';
import type { Pool } from '../db/pool.ts';
import { withTx } from '../db/pool.ts';
import { sniffFormat } from '../documents/formats.ts';
import { acceptBroadcast } from '../intake/broadcast.ts';
import { acceptSend, type HttpIntakeDeps } from '../intake/send.ts';
import type { Logger } from '../log.ts';
import { subjectWithoutToken, type MailSettings } from '../domain/mail.ts';
import type { SenderCheck } from './auth.ts';
import type { MailMetrics } from './metrics.ts';
import { enqueue, findSender, loadSettings, recordMailJobs, takeMessage } from '../accounts/mail.ts';
import { textPagePdf } from './text-page.ts';
import { recordAudit, type AuditEvent } from '../audit/record.ts';

export interface GatewayDeps {
  /** The schema owner's pool: sender lookup across accounts, mail tables. */
  db: Pool;
  intake: HttpIntakeDeps;
  log: Logger;
  metrics: MailMetrics;
  /** MAIL_MESSAGES_PER_MINUTE. */
  perMinute: number;
  /** SPF/DKIM/DMARC of a message (src/mail/auth.ts). */
  checkSender: SenderCheck;
}

/** What the SMTP session knew about the message. */
export interface Envelope {
  /** MAIL FROM ('' for the null sender). */
  mailFrom: string;
  /** The fax numbers of the accepted RCPTs, in order, without repeats. */
  numbers: string[];
  /** The client's address (Postfix's XFORWARD ADDR when it forwards one). */
  clientAddress: string;
  /** EHLO/HELO name (XFORWARD HELO when forwarded). */
  helo: string;
}

export type Outcome =
  | { kind: 'accepted'; jobIds: string[] }
  /** 250, nothing made: refused with a mail to the sender, or dropped silently. */
  | { kind: 'dropped'; reason: string }
  /** A temporary refusal (451): the sending server tries again. */
  | { kind: 'later'; reply: string }
  /** A permanent refusal at SMTP (5xx): the message could not be read. */
  | { kind: 'rejected'; reply: string };

const FILE_TYPES = 'PDF, TIFF, JPEG or PNG';

function firstMailbox(a: Address | undefined): { address: string; name: string } | null {
  if (!a) return null;
  if (a.address) return { address: a.address, name: a.name };
  const m = a.group?.[0];
  return m ? { address: m.address, name: m.name } : null;
}

export async function handleMessage(d: GatewayDeps, raw: Buffer, env: Envelope): Promise<Outcome> {
  let mail: Email;
  try {
    mail = await PostalMime.parse(raw, { attachmentEncoding: 'arraybuffer', maxNestingDepth: 32 });
  } catch (err) {
    d.metrics.messages.inc({ outcome: 'unparseable' });
    d.log.warn({ err: (err as Error).message, bytes: raw.length }, 'mail: message could not be parsed');
    return { kind: 'rejected', reply: '554 5.6.0 Message could not be parsed as MIME' };
  }
  const from = firstMailbox(mail.from)?.address ?? env.mailFrom;
  const senderDomain = from.includes('@') ? from.slice(from.lastIndexOf('@') + 1).toLowerCase() : '';
  // Logged without content: the sender's domain and the client, never subject, body or files.
  const drop = (reason: string, extra: Record<string, unknown> = {}): Outcome => {
    d.metrics.messages.inc({ outcome: reason });
    d.log.info(
      { reason, senderDomain, client: env.clientAddress, ...extra },
      'mail: message dropped, no reply',
    );
    return { kind: 'dropped', reason };
  };
  const sender = await findSender(d.db, from);
  if (!sender) return drop('unknown_sender');
  const accountId = sender.account_id;
  const settings = await loadSettings(d.db, accountId);
  if (settings.sender_auth !== 'off') {
    const auth = await d.checkSender(raw, {
      ip: env.clientAddress,
      helo: env.helo,
      sender: env.mailFrom,
    });
    d.metrics.auth.inc({ spf: auth.spf, dmarc: auth.dmarc });
    d.log.info(
      {
        accountId,
        senderDomain,
        client: env.clientAddress,
        spf: auth.spf,
        dkim: auth.dkim,
        dmarc: auth.dmarc,
      },
      'mail: sender authentication',
    );
    if (settings.sender_auth === 'enforce' && !auth.passed) return drop('sender_auth_failed', { accountId });
  }
  const subjectIn = (mail.subject ?? '').trim();
  const subject = subjectWithoutToken(subjectIn, settings.subject_token);
  if (subject === null) return drop('subject_token_missing', { accountId });
  if (!(await takeMessage(d.db, accountId, d.perMinute))) {
    d.metrics.messages.inc({ outcome: 'rate_limited' });
    d.log.info({ accountId }, 'mail: account over MAIL_MESSAGES_PER_MINUTE; 451');
    return { kind: 'later', reply: '451 4.7.1 Too many messages from this account; try again later' };
  }
  const messageId = messageIdOf(mail, raw);
  // The audit trail's view of this message: a send by the allowed-sender entry that let it in, from
  // the SMTP client's address (docs/audit-retention.md); the reason of a refusal stays out (it can
  // quote file names).
  const audit = (e: Pick<AuditEvent, 'result' | 'object' | 'detail'>): AuditEvent => ({
    accountId,
    actor: { type: 'mail_sender', id: sender.id },
    action: 'fax.send',
    ip: env.clientAddress,
    status: null,
    ...e,
  });
  const refuse = async (why: string): Promise<Outcome> => {
    d.metrics.messages.inc({ outcome: 'refused' });
    await recordAudit(d.db, audit({ result: 'refused', object: null, detail: { source: 'email' } }));
    d.log.info({ accountId, reason: why }, 'mail: message refused; the sender is told why');
    await enqueue(d.db, {
      accountId,
      kind: 'refused',
      to: [from],
      messageId,
      subject: `Fax not sent: ${subject || '(no subject)'}`.slice(0, 250),
      body:
        `Your message to ${env.numbers.join(', ')} was not sent as a fax.\n\nReason: ${why}\n\n` +
        `Attach the documents to fax as ${FILE_TYPES} files and send the message again.`,
    });
    return { kind: 'dropped', reason: 'refused' };
  };
  const docs: { file_name: string; file_data: string }[] = [];
  for (const [i, a] of mail.attachments.entries()) {
    const bytes = Buffer.from(a.content as ArrayBuffer);
    const name = (a.filename ?? `attachment-${i + 1}`).slice(0, 255);
    // Inline images of an HTML body (a logo in a signature) are not documents.
    if (a.disposition === 'inline' && a.contentId && !a.filename) continue;
    if (sniffFormat(bytes) === null)
      return refuse(`the attachment "${name}" (${a.mimeType}) is not a ${FILE_TYPES} file`);
    docs.push({ file_name: name || `attachment-${i + 1}`, file_data: bytes.toString('base64') });
  }
  if (docs.length === 0) return refuse(`the message has no attachment (a ${FILE_TYPES} file) to send`);
  const text = (mail.text ?? '').trim();
  const body = await buildBody(settings, env.numbers, docs, subject, text, sender.caller_id);
  const parsed = sendFaxBody.safeParse(body);
  if (!parsed.success)
    return refuse(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
  const idem = {
    key: `mail:${messageId}`.slice(0, 255),
    hash: createHash('sha256').update(JSON.stringify(parsed.data)).digest(),
  };
  const origin = { source: 'email' as const, message_id: messageId };
  let jobIds: string[];
  try {
    if (parsed.data.recipients) {
      const b = await acceptBroadcast(
        d.intake,
        accountId,
        { ...parsed.data, recipients: parsed.data.recipients },
        null,
        idem,
        origin,
      );
      jobIds = b.job_ids;
    } else {
      jobIds = [await acceptSend(d.intake, accountId, parsed.data, null, idem, origin)];
    }
  } catch (err) {
    if (err instanceof ApiError && err.http >= 400 && err.http < 500 && err.http !== 429)
      return refuse(err.message);
    const message = err instanceof Error ? err.message : String(err);
    d.metrics.messages.inc({ outcome: 'later' });
    d.log.warn({ accountId, err: message }, 'mail: intake failed; 451, the sending server retries');
    return { kind: 'later', reply: '451 4.3.0 The fax service cannot take the message now; try again later' };
  }
  await withTx(d.db, async (c) => {
    await recordMailJobs(c, { accountId, replyTo: from, messageId }, jobIds, settings.receipts === 'all');
    // One event per message, as one per request over HTTP: its (first) fax, and how many it made.
    await recordAudit(
      c,
      audit({
        result: 'ok',
        object: { type: 'fax', id: jobIds[0]! },
        detail: { source: 'email', faxes: jobIds.length },
      }),
    );
  });
  d.metrics.messages.inc({ outcome: 'accepted' });
  d.log.info({ accountId, jobIds, recipients: env.numbers.length }, 'mail: faxes accepted');
  return { kind: 'accepted', jobIds };
}

/** The Message-ID without its angle brackets; one made from the message's bytes when it has none. */
function messageIdOf(mail: Email, raw: Buffer): string {
  const id = (mail.messageId ?? '').trim().replace(/^<|>$/g, '');
  if (/^[\x21-\x7e]{1,250}$/.test(id)) return id;
  return `${createHash('sha256').update(raw).digest('hex').slice(0, 32)}@faxline.invalid`;
}

/** The send request a message stands for, per the account's body setting. */
async function buildBody(
  s: MailSettings,
  numbers: string[],
  docs: { file_name: string; file_data: string }[],
  subject: string,
  text: string,
  callerId: string | null,
): Promise<Record<string, unknown>> {
  const fax_data = [...docs];
  const cover: Pick<SendFaxBody, 'subject' | 'message'> = {};
  if (s.body === 'cover') {
    if (subject) cover.subject = subject.slice(0, 200);
    if (text) cover.message = text.slice(0, 5000);
  } else if (s.body === 'page' && (subject || text)) {
    const page = await textPagePdf(subject, text);
    fax_data.unshift({ file_name: 'message.pdf', file_data: Buffer.from(page).toString('base64') });
  }
  const target =
    numbers.length === 1
      ? { fax_number: numbers[0]! }
      : { recipients: numbers.map((n) => ({ fax_number: n })) };
  return {
    ...target,
    fax_data,
    ...cover,
    ...(callerId ? { caller_id: callerId } : {}),
  };
}
