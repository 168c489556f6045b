// The mail gateway's address rules, pure: which recipient is a fax number, which sender entry an
// address matches, and the settings' words. No I/O.
import { isE164 } from './e164.ts';

/**
 * The fax number of a recipient `<number>@<domain>`, or null when the domain is not the fax domain
 * or the local part is not a number. The local part is E.164 with or without '+', and may carry
 * spaces, dots, dashes and parentheses (as people write numbers): "+1 555-010.0123" → "+15550100123".
 */
export function faxNumberOf(address: string, mailDomain: string): string | null {
  const at = address.lastIndexOf('@');
  if (at <= 0) return null;
  if (address.slice(at + 1).toLowerCase() !== mailDomain.toLowerCase()) return null;
  const local = address.slice(0, at).replace(/^"|"$/g, '');
  if (!/^\+?[0-9 .()-]+$/.test(local)) return null;
  const digits = local.replace(/[^0-9]/g, '');
  const number = `+${digits}`;
  return isE164(number) ? number : null;
}

/** Whether `address` is in the fax domain at all (RCPT of another domain is refused: no relay). */
export function inDomain(address: string, mailDomain: string): boolean {
  const at = address.lastIndexOf('@');
  return at > 0 && address.slice(at + 1).toLowerCase() === mailDomain.toLowerCase();
}

/** A sender entry as stored: lower-case `user@domain` or `*@domain`; null when it is not one. */
export function senderEntry(raw: string): string | null {
  const a = raw.trim().toLowerCase();
  if (a.length > 254) return null;
  return /^(\*|[^@\s*]+)@[^@\s*]+\.[^@\s*]+$/.test(a) ? a : null;
}

/** The stored entries that would allow `address`, most specific first: itself, then `*@domain`. */
export function entriesFor(address: string): string[] {
  const a = address.trim().toLowerCase();
  const at = a.lastIndexOf('@');
  if (at <= 0) return [];
  return [a, `*@${a.slice(at + 1)}`];
}

/** What the body of a mail does (mail_settings.body). */
export const bodyModes = ['cover', 'ignore', 'page'] as const;
export type BodyMode = (typeof bodyModes)[number];
/** Which result mails a sender gets (mail_settings.receipts). */
export const receiptModes = ['all', 'failures', 'none'] as const;
export type ReceiptMode = (typeof receiptModes)[number];
/** What SPF/DKIM/DMARC decide (mail_settings.sender_auth). */
export const authModes = ['enforce', 'record', 'off'] as const;
export type AuthMode = (typeof authModes)[number];

export interface MailSettings {
  body: BodyMode;
  receipts: ReceiptMode;
  sender_auth: AuthMode;
  subject_token: string | null;
}

export const DEFAULT_MAIL_SETTINGS: MailSettings = {
  body: 'cover',
  receipts: 'all',
  sender_auth: 'record',
  subject_token: null,
};

/**
 * The subject with the account's secret token taken out, or null when a token is required and the
 * subject lacks it. The token may stand anywhere in the subject (e.g. "[k7Qx9…] Lab results").
 */
export function subjectWithoutToken(subject: string, token: string | null): string | null {
  if (!token) return subject;
  const i = subject.indexOf(token);
  if (i < 0) return null;
  return (subject.slice(0, i) + subject.slice(i + token.length)).replace(/\s+/g, ' ').trim();
}
