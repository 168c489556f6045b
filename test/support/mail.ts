// Mail test helpers: a capture SMTP server (smtp-server, parsing what arrives with postal-mime), a
// DNS table for the gateway's SPF/DKIM/DMARC checks, and swaks (Debian), an SMTP client of nobody's
// code here, to send messages to the gateway.
import { spawn } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import type { DNSResolver } from 'mailauth';
import PostalMime, { type Email } from 'postal-mime';
import { SMTPServer } from 'smtp-server';

export interface Captured {
  envelopeTo: string[];
  mail: Email;
}

export interface Capture {
  port: number;
  messages: Captured[];
  close(): Promise<void>;
}

/** A capture server on loopback: every message is accepted and kept, parsed. `port` 0: any. */
export async function startCapture(port = 0): Promise<Capture> {
  const messages: Captured[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['AUTH', 'STARTTLS'],
    disableReverseLookup: true,
    logger: false,
    onData(stream, session, cb) {
      const parts: Buffer[] = [];
      stream.on('data', (c: Buffer) => parts.push(c));
      stream.on('end', () => {
        PostalMime.parse(Buffer.concat(parts)).then(
          (mail) => {
            messages.push({ envelopeTo: session.envelope.rcptTo.map((r) => r.address), mail });
            cb();
          },
          (err: unknown) => cb(err as Error),
        );
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    port: (server.server.address() as AddressInfo).port,
    messages,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A DNS resolver answering TXT records from a table; every other name and type: ENOTFOUND. */
export function dnsTable(txt: Record<string, string>): DNSResolver {
  return (name, type) => {
    const v = type === 'TXT' ? txt[name.toLowerCase()] : undefined;
    if (v !== undefined) return Promise.resolve([[v]]);
    return Promise.reject(Object.assign(new Error(`ENOTFOUND ${name}`), { code: 'ENOTFOUND' }));
  };
}

export interface SwaksResult {
  code: number;
  out: string;
}

/**
 * Sends one message with swaks; resolves with its exit code and the SMTP dialogue it printed. Run
 * asynchronously: the servers it talks to may live in this very process. (swaks takes an argument
 * starting with '+' for an option: write numbers without it, e.g. 1-555-010-0000@fax.test.)
 */
export function swaks(args: string[]): Promise<SwaksResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('swaks', ['--timeout', '120', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, out });
    });
  });
}

/** The last SMTP reply to DATA's end (the line after the message was sent). */
export function lastReply(out: string): string {
  const replies = out.split('\n').filter((l) => /^<[-~*]+\s+\d{3}[ -]/.test(l));
  return replies.at(-2) ?? replies.at(-1) ?? '';
}
