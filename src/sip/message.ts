// SIP messages (RFC 3261 section 7): parsing with strict limits, serializing, and the header values
// the user agent reads (Via, name-addr, CSeq, URIs). Every peer may be hostile: a message over the
// limits is refused whole, before anything else looks at it.

/** Largest SIP message accepted or sent (bytes, start line to end of body). */
export const MAX_MESSAGE_BYTES = 64 * 1024;
/** Most header fields in one message (after unfolding, before splitting comma lists). */
export const MAX_HEADERS = 128;

export interface Header {
  /** Long form, as written by us (compact forms are expanded on parse). */
  name: string;
  value: string;
}

export interface SipRequest {
  kind: 'request';
  method: string;
  uri: string;
  headers: Header[];
  body: Buffer;
}

export interface SipResponse {
  kind: 'response';
  status: number;
  reason: string;
  headers: Header[];
  body: Buffer;
}

export type SipMessage = SipRequest | SipResponse;

export class SipParseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SipParseError';
  }
}

const compact: Record<string, string> = {
  i: 'Call-ID',
  m: 'Contact',
  e: 'Content-Encoding',
  l: 'Content-Length',
  c: 'Content-Type',
  f: 'From',
  s: 'Subject',
  k: 'Supported',
  t: 'To',
  v: 'Via',
  r: 'Refer-To',
  o: 'Event',
  u: 'Allow-Events',
  b: 'Referred-By',
  x: 'Session-Expires',
};

const canonical = new Map(
  [
    'Via',
    'From',
    'To',
    'Call-ID',
    'CSeq',
    'Contact',
    'Max-Forwards',
    'Route',
    'Record-Route',
    'Content-Type',
    'Content-Length',
    'Content-Encoding',
    'Allow',
    'Supported',
    'Require',
    'Expires',
    'User-Agent',
    'WWW-Authenticate',
    'Proxy-Authenticate',
    'Authorization',
    'Proxy-Authorization',
    'Subject',
    'Event',
    'Refer-To',
    'Referred-By',
    'Allow-Events',
    'Session-Expires',
    'Reason',
    'Server',
    'Min-Expires',
    'Retry-After',
  ].map((n) => [n.toLowerCase(), n]),
);

function headerName(raw: string): string {
  const lower = raw.toLowerCase();
  return compact[lower] ?? canonical.get(lower) ?? raw;
}

const TOKEN = /^[A-Za-z0-9\-.!%*_+`'~]+$/;

/** Where the header block ends (index of the blank line's CRLFCRLF), or -1. */
export function headerEnd(buf: Buffer, from = 0): number {
  return buf.indexOf('\r\n\r\n', from, 'latin1');
}

/**
 * Parses the start line and headers (everything before the blank line). The body is attached by
 * the caller: from the datagram (UDP) or from the stream after Content-Length bytes (TCP).
 */
export function parseHead(text: string): Omit<SipRequest, 'body'> | Omit<SipResponse, 'body'> {
  const lines = text.split('\r\n');
  const start = lines.shift() ?? '';
  const headers: Header[] = [];
  for (const line of lines) {
    if (line === '') continue;
    if (line.startsWith(' ') || line.startsWith('\t')) {
      // Folding (RFC 3261 7.3.1): a continuation of the previous header's value.
      const last = headers.at(-1);
      if (!last) throw new SipParseError('continuation line before any header');
      last.value = `${last.value} ${line.trim()}`;
      continue;
    }
    const colon = line.indexOf(':');
    if (colon <= 0) throw new SipParseError(`malformed header line "${line.slice(0, 40)}"`);
    const name = line.slice(0, colon).trim();
    if (!TOKEN.test(name)) throw new SipParseError(`malformed header name "${name.slice(0, 40)}"`);
    headers.push({ name: headerName(name), value: line.slice(colon + 1).trim() });
    if (headers.length > MAX_HEADERS) throw new SipParseError(`more than ${MAX_HEADERS} header fields`);
  }
  const resp = /^SIP\/2\.0 ([1-6]\d\d) ?(.*)$/.exec(start);
  if (resp) return { kind: 'response', status: Number(resp[1]), reason: resp[2] ?? '', headers };
  const req = /^([A-Za-z0-9\-.!%*_+`'~]+) (\S+) SIP\/2\.0$/.exec(start);
  if (req) return { kind: 'request', method: req[1] as string, uri: req[2] as string, headers };
  throw new SipParseError(`malformed start line "${start.slice(0, 60)}"`);
}

/** The Content-Length header's value, or undefined without one; throws when it is not a number. */
export function contentLength(headers: Header[]): number | undefined {
  const h = headers.find((x) => x.name === 'Content-Length');
  if (!h) return undefined;
  if (!/^\d{1,6}$/.test(h.value)) throw new SipParseError(`bad Content-Length "${h.value.slice(0, 20)}"`);
  return Number(h.value);
}

/** One whole message from a datagram. */
export function parseMessage(buf: Buffer): SipMessage {
  if (buf.length > MAX_MESSAGE_BYTES) throw new SipParseError(`message over ${MAX_MESSAGE_BYTES} bytes`);
  let from = 0;
  while (buf[from] === 0x0d || buf[from] === 0x0a) from++;
  const end = headerEnd(buf, from);
  if (end < 0) throw new SipParseError('no blank line after the headers');
  const head = parseHead(buf.toString('latin1', from, end));
  const rest = buf.subarray(end + 4);
  const len = contentLength(head.headers);
  if (len !== undefined && len > rest.length) throw new SipParseError('body shorter than Content-Length');
  const body = Buffer.from(len === undefined ? rest : rest.subarray(0, len));
  checkRequired(head);
  return { ...head, body } as SipMessage;
}

function checkRequired(m: { headers: Header[] }): void {
  for (const name of ['Via', 'From', 'To', 'Call-ID', 'CSeq']) {
    if (!m.headers.some((h) => h.name === name)) throw new SipParseError(`missing ${name} header`);
  }
  parseCSeq(header(m, 'CSeq') ?? '');
}

/** Splits a stream (TCP) into messages by Content-Length. */
export class StreamFramer {
  private buf: Buffer = Buffer.alloc(0);

  /** Adds bytes; returns the whole messages now complete. Throws on a bad or oversized message. */
  push(chunk: Buffer): SipMessage[] {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    const out: SipMessage[] = [];
    for (;;) {
      let from = 0;
      while (this.buf[from] === 0x0d || this.buf[from] === 0x0a) from++; // keep-alive CRLFs
      if (from > 0) this.buf = this.buf.subarray(from);
      const end = headerEnd(this.buf);
      if (end < 0) {
        if (this.buf.length > MAX_MESSAGE_BYTES)
          throw new SipParseError(`headers over ${MAX_MESSAGE_BYTES} bytes`);
        return out;
      }
      const head = parseHead(this.buf.toString('latin1', 0, end));
      const len = contentLength(head.headers);
      if (len === undefined) throw new SipParseError('Content-Length is required over a stream');
      const total = end + 4 + len;
      if (total > MAX_MESSAGE_BYTES) throw new SipParseError(`message over ${MAX_MESSAGE_BYTES} bytes`);
      if (this.buf.length < total) return out;
      checkRequired(head);
      out.push({ ...head, body: Buffer.from(this.buf.subarray(end + 4, total)) } as SipMessage);
      this.buf = this.buf.subarray(total);
    }
  }
}

/** Writes a message; Content-Length is always set from the body. */
export function serialize(m: SipMessage): Buffer {
  const start = m.kind === 'request' ? `${m.method} ${m.uri} SIP/2.0` : `SIP/2.0 ${m.status} ${m.reason}`;
  const lines = [start];
  for (const h of m.headers) {
    if (h.name === 'Content-Length') continue;
    if (/[\r\n]/.test(h.value)) throw new Error(`header ${h.name} holds a line break`);
    lines.push(`${h.name}: ${h.value}`);
  }
  lines.push(`Content-Length: ${m.body.length}`, '', '');
  const out = Buffer.concat([Buffer.from(lines.join('\r\n'), 'latin1'), m.body]);
  if (out.length > MAX_MESSAGE_BYTES) throw new Error(`SIP message over ${MAX_MESSAGE_BYTES} bytes`);
  return out;
}

/** The first value of a header (the whole field: a comma list stays whole). */
export function header(m: { headers: Header[] }, name: string): string | undefined {
  const lower = name.toLowerCase();
  return m.headers.find((h) => h.name.toLowerCase() === lower)?.value;
}

/** Splits a field value at commas outside quotes and angle brackets. */
export function splitList(value: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  let angle = false;
  for (let i = 0; i < value.length; i++) {
    const ch = value[i] as string;
    if (quoted && ch === '\\') {
      cur += ch + (value[i + 1] ?? '');
      i++;
      continue;
    }
    if (ch === '"') quoted = !quoted;
    else if (!quoted && ch === '<') angle = true;
    else if (!quoted && ch === '>') angle = false;
    if (ch === ',' && !quoted && !angle) {
      if (cur.trim()) out.push(cur.trim());
      cur = '';
    } else cur += ch;
  }
  if (cur.trim()) out.push(cur.trim());
  return out;
}

/** Every value of a list header (Via, Route, Record-Route, Contact...), in order, lists split. */
export function headerValues(m: { headers: Header[] }, name: string): string[] {
  const lower = name.toLowerCase();
  return m.headers.filter((h) => h.name.toLowerCase() === lower).flatMap((h) => splitList(h.value));
}

/** `;a=b;c` → Map { a: 'b', c: '' } (names lowercased). */
export function parseParams(s: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of s.split(';')) {
    const p = part.trim();
    if (!p) continue;
    const eq = p.indexOf('=');
    if (eq < 0) out.set(p.toLowerCase(), '');
    else
      out.set(
        p.slice(0, eq).trim().toLowerCase(),
        p
          .slice(eq + 1)
          .trim()
          .replace(/^"(.*)"$/, '$1'),
      );
  }
  return out;
}

export interface Via {
  transport: string;
  host: string;
  port: number | undefined;
  params: Map<string, string>;
}

export function parseVia(value: string): Via {
  const m = /^SIP\s*\/\s*2\.0\s*\/\s*([A-Za-z]+)\s+(\[[^\]]+\]|[^\s;:]+)(?::(\d+))?\s*(;.*)?$/.exec(
    value.trim(),
  );
  if (!m) throw new SipParseError(`malformed Via "${value.slice(0, 60)}"`);
  return {
    transport: (m[1] as string).toUpperCase(),
    host: m[2] as string,
    port: m[3] ? Number(m[3]) : undefined,
    params: parseParams(m[4] ?? ''),
  };
}

export interface NameAddr {
  display: string | undefined;
  uri: string;
  params: Map<string, string>;
}

/** `"Name" <sip:u@h>;tag=x` or `sip:u@h;tag=x` (then the parameters belong to the header). */
export function parseNameAddr(value: string): NameAddr {
  const v = value.trim();
  const lt = v.indexOf('<');
  if (lt >= 0) {
    const gt = v.indexOf('>', lt);
    if (gt < 0) throw new SipParseError(`unclosed < in "${v.slice(0, 60)}"`);
    const display =
      v
        .slice(0, lt)
        .trim()
        .replace(/^"(.*)"$/, '$1') || undefined;
    return { display, uri: v.slice(lt + 1, gt), params: parseParams(v.slice(gt + 1)) };
  }
  const semi = v.indexOf(';');
  return {
    display: undefined,
    uri: semi < 0 ? v : v.slice(0, semi),
    params: parseParams(semi < 0 ? '' : v.slice(semi)),
  };
}

export interface SipUri {
  scheme: 'sip' | 'sips';
  user: string | undefined;
  host: string;
  port: number | undefined;
  params: Map<string, string>;
}

export function parseUri(uri: string): SipUri {
  const m = /^(sips?):(?:([^@;?]+)@)?(\[[^\]]+\]|[^;:?]+)(?::(\d{1,5}))?(;[^?]*)?(\?.*)?$/i.exec(uri.trim());
  if (!m) throw new SipParseError(`not a SIP URI: "${uri.slice(0, 60)}"`);
  const user = m[2] === undefined ? undefined : (m[2].split(':')[0] as string);
  return {
    scheme: (m[1] as string).toLowerCase() as 'sip' | 'sips',
    user,
    host: m[3] as string,
    port: m[4] ? Number(m[4]) : undefined,
    params: parseParams(m[5] ?? ''),
  };
}

export function parseCSeq(value: string): { seq: number; method: string } {
  const m = /^(\d{1,10})\s+([A-Za-z]+)$/.exec(value.trim());
  if (!m || Number(m[1]) > 2 ** 31 - 1) throw new SipParseError(`malformed CSeq "${value.slice(0, 40)}"`);
  return { seq: Number(m[1]), method: (m[2] as string).toUpperCase() };
}

/** Default reason phrases for the responses we send. */
export const reasons: Record<number, string> = {
  100: 'Trying',
  180: 'Ringing',
  200: 'OK',
  400: 'Bad Request',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  480: 'Temporarily Unavailable',
  481: 'Call/Transaction Does Not Exist',
  486: 'Busy Here',
  487: 'Request Terminated',
  488: 'Not Acceptable Here',
  500: 'Server Internal Error',
  503: 'Service Unavailable',
  603: 'Decline',
};

/** A response to `req` with its Via, From, To, Call-ID and CSeq copied (RFC 3261 8.2.6.2). */
export function makeResponse(
  req: SipRequest,
  status: number,
  o: { toTag?: string; headers?: Header[]; body?: Buffer; reason?: string } = {},
): SipResponse {
  const headers: Header[] = [];
  for (const h of req.headers) {
    if (h.name === 'Via' || h.name === 'From' || h.name === 'Call-ID' || h.name === 'CSeq')
      headers.push({ ...h });
    else if (h.name === 'To') {
      const hasTag = parseNameAddr(h.value).params.has('tag');
      headers.push({ name: 'To', value: o.toTag && !hasTag ? `${h.value};tag=${o.toTag}` : h.value });
    }
  }
  if (status === 100) {
    const ts = header(req, 'Timestamp');
    if (ts) headers.push({ name: 'Timestamp', value: ts });
  }
  headers.push(...(o.headers ?? []));
  return {
    kind: 'response',
    status,
    reason: o.reason ?? reasons[status] ?? 'Unknown',
    headers,
    body: o.body ?? Buffer.alloc(0),
  };
}
