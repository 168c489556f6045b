// Fetching file_url documents without letting a customer aim the worker at the network it runs in.
// - http(s) only; the host is resolved here and EVERY address it resolves to must be public
//   (src/documents/addresses.ts) unless the host or address is on the allow-list;
// - the connection is pinned to the address that was checked (a custom `lookup`), so a DNS answer
//   that changes between the check and the connect (rebinding) cannot move it;
// - redirects are followed by hand, each target checked the same way, at most `maxRedirects`;
// - one deadline covers DNS, connects, redirects and the body (a slow drip cannot hold a worker);
// - the body is streamed with a size cap, and must be a PDF, TIFF, JPEG or PNG by its bytes whatever its Content-Type says;
// - nothing is decompressed (Accept-Encoding: identity).
// Every refusal is a DocumentError with its own code: the job fails permanently with that reason.
import { lookup as dnsLookup } from 'node:dns/promises';
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import {
  type AllowList,
  addressAllowed,
  blockedReason,
  hostAllowed,
  parseAddress,
  type ParsedAddress,
} from './addresses.ts';
import { deadline } from '../deadline.ts';
import { inSpan, SpanKind } from '../trace.ts';
import { DocumentError } from './errors.ts';
import { ACCEPTED_FORMATS, sniffFormat } from './formats.ts';
import type { Fetcher } from './prepare.ts';

export interface FetchOptions {
  maxBytes: number;
  /** Total time for one document: DNS, connects, redirects and body. */
  timeoutMs: number;
  maxRedirects: number;
  allow: AllowList;
  /** Every address of a host name. Defaults to the system resolver (getaddrinfo, /etc/hosts). */
  resolve?: (host: string) => Promise<string[]>;
  /** Where the details of a refusal go (the address a host resolved to, its range, the resolver's error). */
  log?: { warn(details: object, message: string): void };
}

/** The refusal codes a fetch can end with (shown as the job's failure_code). */
export const fetchCodes = {
  invalid: 'url_invalid',
  scheme: 'url_scheme',
  dns: 'url_dns_failed',
  forbidden: 'url_forbidden_address',
  redirectInvalid: 'url_redirect_invalid',
  tooManyRedirects: 'url_too_many_redirects',
  status: 'url_http_status',
  unreachable: 'url_unreachable',
  timeout: 'url_timeout',
  tooLarge: 'file_too_large',
  notPdf: 'not_a_pdf',
} as const;

const systemResolve = async (host: string): Promise<string[]> =>
  (await dnsLookup(host, { all: true, verbatim: true })).map((a) => a.address);

function parseUrl(text: string, code: string, what: string): URL {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    throw new DocumentError(code, `${what} is not a valid URL`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw new DocumentError(
      code === fetchCodes.invalid ? fetchCodes.scheme : code,
      `${what} must use http or https, not ${u.protocol.replace(/:$/, '')}`,
    );
  return u;
}

/** What the customer reads when a host did not resolve: nothing of the resolver's own words. */
const dnsFailed = (host: string) => `file_url host ${host} could not be resolved (DNS lookup failed)`;

/** Resolves the URL's host and checks every address; returns them, in the resolver's order. */
async function checkTarget(u: URL, o: FetchOptions, signal: AbortSignal): Promise<ParsedAddress[]> {
  // WHATWG URL parsing has already turned 2130706433, 0x7f.1, 0177.0.0.1 and 127.1 into 127.0.0.1
  // and [::ffff:127.0.0.1] into [::ffff:7f00:1], so every spelling of an address arrives here as one.
  const host = u.hostname.replace(/^\[|\]$/g, '').replace(/\.$/, ''); // `localhost.` is `localhost`
  const literal = parseAddress(host);
  let addresses: ParsedAddress[];
  if (literal) {
    addresses = [literal];
  } else {
    let found: string[];
    try {
      found = await Promise.race([
        (o.resolve ?? systemResolve)(host),
        new Promise<never>((_, reject) => {
          if (signal.aborted) reject(signal.reason as Error);
          signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
        }),
      ]);
    } catch (err) {
      if (signal.aborted) throw err;
      o.log?.warn({ host, err: (err as Error).message }, 'file_url refused: DNS lookup failed');
      throw new DocumentError(fetchCodes.dns, dnsFailed(host));
    }
    addresses = found.map((a) => parseAddress(a)).filter((a): a is ParsedAddress => a !== null);
    if (addresses.length === 0) {
      o.log?.warn({ host, found }, 'file_url refused: no usable address');
      throw new DocumentError(fetchCodes.dns, dnsFailed(host));
    }
  }
  if (!hostAllowed(o.allow, host)) {
    for (const a of addresses) {
      if (addressAllowed(o.allow, a)) continue;
      const why = blockedReason(a);
      if (why) {
        // The customer reads the job's failure reason (GET /v1/faxes/{id}): what a name resolves to,
        // and which range that is, would map the network the worker runs in. Both go to the log only.
        o.log?.warn({ host, address: a.text, range: why }, 'file_url refused: address not allowed');
        throw new DocumentError(
          fetchCodes.forbidden,
          `file_url host ${host} is not allowed: only public addresses are fetched`,
        );
      }
    }
  }
  return addresses;
}

/** A `lookup` that answers with the already-checked address, whatever DNS would say now. */
function pinned(a: ParsedAddress): LookupFunction {
  return ((_host: string, opts: { all?: boolean }, cb: (...args: unknown[]) => void) => {
    if (opts?.all) cb(null, [{ address: a.text, family: a.family }]);
    else cb(null, a.text, a.family);
  }) as unknown as LookupFunction;
}

function request(u: URL, a: ParsedAddress, signal: AbortSignal): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => {
    const mod = u.protocol === 'https:' ? https : http;
    const req = mod.request(u, {
      method: 'GET',
      agent: false,
      signal,
      lookup: pinned(a),
      headers: {
        'user-agent': 'faxline-document-fetch',
        accept: 'application/pdf, */*;q=0.1',
        'accept-encoding': 'identity',
      },
    });
    req.once('response', resolve);
    req.once('error', reject);
    req.end();
  });
}

const redirects = new Set([301, 302, 303, 307, 308]);
const connectErrors = new Set([
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EADDRNOTAVAIL',
  'EAFNOSUPPORT',
]);

export function httpFetcher(o: FetchOptions): Fetcher {
  // One client span per download: redirects followed, the final status and the bytes read; never the
  // URL (its host, path and query can name a patient or carry a token). A failure records its class.
  const traced = fetchOnce(o);
  return (url, signal) =>
    inSpan('document.fetch', { kind: SpanKind.CLIENT }, async (span) => {
      const r = await traced(url, signal);
      span?.setAttributes({
        'http.request.method': 'GET',
        'http.response.status_code': r.status,
        'faxline.redirects': r.redirects,
        'faxline.bytes': r.body.length,
      });
      return r.body;
    });
}

function fetchOnce(
  o: FetchOptions,
): (url: string, signal: AbortSignal) => Promise<{ body: Buffer; status: number; redirects: number }> {
  return async (url, signal) => {
    let u = parseUrl(url, fetchCodes.invalid, 'file_url');
    // Shutdown or the download's deadline; released when the fetch ends (see src/deadline.ts).
    const limit = deadline(o.timeoutMs, signal, 'the download');
    const sig = limit.signal;
    const onAbort = (err: unknown): never => {
      if (signal.aborted) throw signal.reason; // shutdown: not the document's fault, retried later
      if (limit.timedOut)
        throw new DocumentError(
          fetchCodes.timeout,
          `file_url did not deliver the document within ${o.timeoutMs / 1000} s`,
        );
      throw err;
    };

    try {
      for (let hop = 0; ; hop++) {
        const addresses = await checkTarget(u, o, sig);
        let res: http.IncomingMessage | undefined;
        for (let i = 0; !res; i++) {
          try {
            res = await request(u, addresses[i]!, sig);
          } catch (err) {
            if (sig.aborted) throw err;
            const code = (err as { code?: string }).code;
            // Not connected at all: the next checked address may answer (e.g. ::1 then 127.0.0.1).
            if (i + 1 < addresses.length && code && connectErrors.has(code)) continue;
            throw new DocumentError(
              fetchCodes.unreachable,
              `file_url could not be fetched from ${u.host}: ${code ?? (err as Error).message}`,
            );
          }
        }
        const status = res.statusCode ?? 0;
        if (redirects.has(status)) {
          res.destroy();
          const location = res.headers.location;
          if (hop >= o.maxRedirects)
            throw new DocumentError(
              fetchCodes.tooManyRedirects,
              `file_url redirected more than ${o.maxRedirects} times`,
            );
          if (!location)
            throw new DocumentError(
              fetchCodes.redirectInvalid,
              `file_url answered ${status} with no Location`,
            );
          let next: string;
          try {
            next = new URL(location, u).toString();
          } catch {
            throw new DocumentError(fetchCodes.redirectInvalid, `file_url redirected to an invalid URL`);
          }
          u = parseUrl(next, fetchCodes.redirectInvalid, 'file_url redirect target');
          continue;
        }
        if (status < 200 || status > 299) {
          res.destroy();
          throw new DocumentError(fetchCodes.status, `file_url answered HTTP ${status}`);
        }
        return { body: await readBody(res, o.maxBytes), status, redirects: hop };
      }
    } catch (err) {
      if (sig.aborted) onAbort(err);
      const code = (err as { code?: unknown }).code;
      if (!(err instanceof DocumentError) && typeof code === 'string')
        // The connection broke during the download (ECONNRESET, a malformed response, …).
        throw new DocumentError(
          fetchCodes.unreachable,
          `file_url download from ${u.host} broke off: ${code}`,
        );
      throw err;
    } finally {
      limit.dispose();
    }
  };
}

async function readBody(res: http.IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    res.destroy();
    throw new DocumentError(fetchCodes.tooLarge, `file_url is larger than ${maxBytes} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let judged = false;
  try {
    for await (const chunk of res) {
      const b = chunk as Buffer;
      size += b.length;
      if (size > maxBytes)
        throw new DocumentError(fetchCodes.tooLarge, `file_url is larger than ${maxBytes} bytes`);
      chunks.push(b);
      // Judge the content by its bytes as soon as there are enough (a PDF's header may come anywhere
      // in the first 1024, as PDFium allows): no point downloading 20 MB of HTML.
      if (!judged && size >= SNIFF_BYTES) {
        if (sniffFormat(Buffer.concat(chunks)) === null) throw notPdf(res);
        judged = true;
      }
    }
  } finally {
    res.destroy();
  }
  const body = Buffer.concat(chunks);
  if (sniffFormat(body) === null) throw notPdf(res);
  return body;
}

/** Bytes enough to tell a PDF (header within the first 1024), TIFF, JPEG or PNG from anything else. */
const SNIFF_BYTES = 1024;

function notPdf(res: http.IncomingMessage): DocumentError {
  const type = res.headers['content-type'];
  return new DocumentError(
    fetchCodes.notPdf,
    `file_url content is not ${ACCEPTED_FORMATS} (recognised by its content${type ? `; Content-Type was ${type.slice(0, 80)}` : ''})`,
  );
}
