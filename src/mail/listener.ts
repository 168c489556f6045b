// The SMTP listener (smtp-server, of the Nodemailer project): takes mail for <number>@MAIL_DOMAIN and
// hands each message to the gateway (gateway.ts). RCPT of another domain is refused 550 (no open
// relay); a message over SMTP_MAX_BYTES 552; the answer to DATA waits for the gateway, so 250 means
// the faxes are committed. STARTTLS with SMTP_TLS_CERT/SMTP_TLS_KEY; no AUTH (who may send is decided
// by the sender's address, its checks and the account's settings). XFORWARD from SMTP_XFORWARD_FROM.
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerDataStream, type SMTPServerSession } from 'smtp-server';
import { faxNumberOf, inDomain } from '../domain/mail.ts';
import type { Logger } from '../log.ts';
import type { Envelope, Outcome } from './gateway.ts';
import type { MailMetrics } from './metrics.ts';

export interface ListenerOptions {
  listen: string;
  domain: string;
  maxBytes: number;
  tlsCert: string;
  tlsKey: string;
  /** SMTP_REQUIRE_TLS: MAIL FROM before STARTTLS is refused 530 (needs tlsCert and tlsKey). */
  requireTls: boolean;
  /** Client addresses allowed to send XFORWARD ([] = not offered). */
  xforwardFrom: string[];
  log: Logger;
  metrics: MailMetrics;
  handle: (raw: Buffer, env: Envelope) => Promise<Outcome>;
}

export interface Listener {
  address: { host: string; port: number };
  close(): Promise<void>;
}

/** An SMTP reply as the error smtp-server sends for it. */
function reply(code: number, text: string): Error {
  return Object.assign(new Error(text), { responseCode: code });
}

/** "451 4.3.0 text" → the error for smtp-server (its code, and the rest as the text). */
function replyOf(line: string): Error {
  const m = /^(\d{3}) (.*)$/.exec(line);
  return m ? reply(Number(m[1]), m[2]!) : reply(451, line);
}

async function readAll(stream: SMTPServerDataStream, limit: number): Promise<Buffer | null> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const chunk of stream) {
    n += (chunk as Buffer).length;
    if (n <= limit) parts.push(chunk as Buffer);
  }
  return stream.sizeExceeded || n > limit ? null : Buffer.concat(parts);
}

export async function startListener(o: ListenerOptions): Promise<Listener> {
  const at = o.listen.lastIndexOf(':');
  const host = o.listen.slice(0, at).replace(/^\[|\]$/g, '');
  const port = Number(o.listen.slice(at + 1));
  const tls = o.tlsCert !== '' && o.tlsKey !== '';
  if (o.requireTls && !tls) throw new Error('SMTP_REQUIRE_TLS needs SMTP_TLS_CERT and SMTP_TLS_KEY');
  const server = new SMTPServer({
    name: o.domain,
    banner: 'faxline mail gateway',
    size: o.maxBytes,
    authOptional: true,
    disabledCommands: tls ? ['AUTH'] : ['AUTH', 'STARTTLS'],
    ...(tls ? { key: readFileSync(o.tlsKey), cert: readFileSync(o.tlsCert) } : {}),
    ...(o.xforwardFrom.length > 0 ? { useXForward: o.xforwardFrom } : {}),
    disableReverseLookup: true,
    logger: false,
    maxClients: 200,
    socketTimeout: 120_000,
    closeTimeout: 10_000,
    onMailFrom(_address, session, cb) {
      if (o.requireTls && !session.secure) {
        o.metrics.rcptRefused.inc({ reason: 'tls_required' });
        return cb(reply(530, '5.7.0 Must issue a STARTTLS command first'));
      }
      cb();
    },
    onRcptTo(address, session, cb) {
      if (!inDomain(address.address, o.domain)) {
        o.metrics.rcptRefused.inc({ reason: 'other_domain' });
        return cb(reply(550, '5.7.1 Relaying denied: this server takes mail for its fax domain only'));
      }
      if (!faxNumberOf(address.address, o.domain)) {
        o.metrics.rcptRefused.inc({ reason: 'not_a_number' });
        return cb(
          reply(550, `5.1.1 Not a fax number: write the number in E.164, e.g. +15550100123@${o.domain}`),
        );
      }
      if (session.envelope.rcptTo.length >= 100) return cb(reply(452, '4.5.3 Too many recipients'));
      cb();
    },
    onData(stream, session, cb) {
      void (async () => {
        const raw = await readAll(stream, o.maxBytes);
        if (!raw) throw reply(552, `5.3.4 Message larger than ${o.maxBytes} bytes`);
        const outcome = await o.handle(raw, envelopeOf(session, o.domain));
        if (outcome.kind === 'later' || outcome.kind === 'rejected') throw replyOf(outcome.reply);
        return outcome.kind === 'accepted'
          ? `Accepted: ${outcome.jobIds.length} fax${outcome.jobIds.length === 1 ? '' : 'es'}`
          : 'Accepted';
      })().then(
        (message) => cb(null, message),
        (err: unknown) => {
          const e = err as Error & { responseCode?: number };
          if (e.responseCode === undefined) o.log.warn({ err: e.message }, 'mail: DATA failed; 451');
          cb(e.responseCode !== undefined ? e : reply(451, '4.3.0 Temporary failure; try again later'));
        },
      );
    },
  });
  server.on('error', (err: Error) => o.log.warn({ err: err.message }, 'mail: SMTP server error'));
  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(port, host, () => {
      server.server.off('error', reject);
      resolve();
    });
  });
  const a = server.server.address() as AddressInfo;
  o.log.info(
    { address: `${a.address}:${a.port}`, domain: o.domain, starttls: tls, requireTls: o.requireTls },
    'mail: SMTP listener started',
  );
  return {
    address: { host: a.address, port: a.port },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The session's envelope: MAIL FROM, the numbers of the RCPTs, and the (forwarded) client. */
function envelopeOf(session: SMTPServerSession, domain: string): Envelope {
  const numbers: string[] = [];
  for (const r of session.envelope.rcptTo) {
    const n = faxNumberOf(r.address, domain);
    if (n && !numbers.includes(n)) numbers.push(n);
  }
  const helo = session.xForward.get('HELO');
  return {
    mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
    numbers,
    clientAddress: session.remoteAddress,
    helo: typeof helo === 'string' && helo !== '[UNAVAILABLE]' ? helo : session.hostNameAppearsAs,
  };
}
