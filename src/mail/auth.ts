// SPF, DKIM and DMARC of a received message, with mailauth (a maintained implementation of the
// three). The DNS resolver is injectable (tests answer from a table; production uses the system's).
import type { DNSResolver } from 'mailauth';

export interface AuthResult {
  spf: string;
  dkim: string;
  dmarc: string;
  /** What `enforce` lets through: DMARC pass, or (the domain publishes no DMARC record) SPF pass. */
  passed: boolean;
}

export type SenderCheck = (
  raw: Buffer,
  client: { ip: string; helo: string; sender: string },
) => Promise<AuthResult>;

export function senderCheck(o: { mta: string; resolver?: DNSResolver }): SenderCheck {
  return async (raw, client) => {
    // Loaded on first use: mailauth and its dependencies are large, and most processes never check mail.
    const { authenticate } = await import('mailauth');
    const r = await authenticate(raw, {
      ip: client.ip,
      helo: client.helo,
      sender: client.sender,
      mta: o.mta,
      disableArc: true,
      disableBimi: true,
      ...(o.resolver ? { resolver: o.resolver } : {}),
    });
    const spf = r.spf ? String(r.spf.status.result) : 'none';
    const dmarc = r.dmarc ? String(r.dmarc.status.result) : 'none';
    const dkim = r.dkim.results?.[0]?.status.result ? String(r.dkim.results[0].status.result) : 'none';
    const passed = dmarc === 'pass' || (dmarc === 'none' && spf === 'pass');
    return { spf, dkim, dmarc, passed };
  };
}
