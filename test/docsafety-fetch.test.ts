// file_url fetching against a real local HTTP server on 127.0.0.1. Refusals run WITHOUT an
// allow-list (so the local server counts as "inside the network") and must never reach the server;
// the happy paths allow-list it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { blockedReason, parseAddress, parseAllowList } from '../src/documents/addresses.ts';
import { DocumentError } from '../src/documents/errors.ts';
import { type FetchOptions, httpFetcher } from '../src/documents/fetch.ts';
import { makePdf } from './support/pdf.ts';
import { eventually } from './support/wait.ts';

let server: http.Server;
let port = 0;
let hits = 0;
/** Answers of /slow that have begun: their head and first bytes are on the wire. */
let slowStarted = 0;
let pdf: Buffer;

function route(req: http.IncomingMessage, res: http.ServerResponse): void {
  hits++;
  const u = new URL(req.url ?? '/', 'http://x');
  switch (u.pathname) {
    case '/doc.pdf':
      res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(pdf);
      return;
    case '/reset':
      res.writeHead(200, { 'content-type': 'application/pdf', 'content-length': '100000' });
      // Cut the connection once the first bytes of the body are on the wire.
      res.write('%PDF-1.7\n', () => res.socket?.destroy());
      return;
    case '/html.pdf':
      res.writeHead(200, { 'content-type': 'application/pdf' }).end('<html><body>not a pdf</body></html>');
      return;
    case '/redirect':
      res.writeHead(302, { location: u.searchParams.get('to') ?? '/' }).end();
      return;
    case '/loop':
      res.writeHead(301, { location: '/loop' }).end();
      return;
    case '/big': {
      // No Content-Length: the cap must be enforced while streaming.
      res.writeHead(200, { 'content-type': 'application/pdf' });
      res.write('%PDF-1.7\n');
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      let sent = 0;
      const more = () => {
        while (sent < 64 && !res.destroyed) {
          sent++;
          if (!res.write(chunk)) return void res.once('drain', more);
        }
        res.end();
      };
      more();
      return;
    }
    case '/big-declared':
      res.writeHead(200, { 'content-type': 'application/pdf', 'content-length': String(1 << 30) });
      res.write('%PDF-1.7\n');
      return; // never finishes: the declared length alone must refuse it
    case '/slow': {
      res.writeHead(200, { 'content-type': 'application/pdf' });
      res.write('%PDF-1.7\n', () => slowStarted++);
      const t = setInterval(() => (res.destroyed ? clearInterval(t) : res.write(' ')), 100);
      res.on('close', () => clearInterval(t));
      return;
    }
    default:
      res.writeHead(404).end('no');
  }
}

before(async () => {
  pdf = await makePdf(1);
  server = http.createServer(route);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const base = (over: Partial<FetchOptions> = {}): FetchOptions => ({
  maxBytes: 1024 * 1024,
  timeoutMs: 5_000,
  maxRedirects: 3,
  allow: parseAllowList(''),
  ...over,
});

async function refusal(url: string, o: FetchOptions = base()): Promise<DocumentError> {
  const err = await httpFetcher(o)(url, new AbortController().signal).then(
    () => assert.fail(`${url} was fetched`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof DocumentError, `${url}: ${String(err)}`);
  return err;
}

describe('file_url: addresses that are refused (no allow-list)', () => {
  // Every spelling of the local server's address, and the other ranges inside a network.
  const spellings = () => [
    `http://127.0.0.1:${port}/doc.pdf`,
    `http://localhost:${port}/doc.pdf`,
    `http://localhost.:${port}/doc.pdf`,
    `http://2130706433:${port}/doc.pdf`, // decimal
    `http://0x7f000001:${port}/doc.pdf`, // hex
    `http://0x7f.1:${port}/doc.pdf`, // hex, short form
    `http://0177.0.0.1:${port}/doc.pdf`, // octal
    `http://017700000001:${port}/doc.pdf`, // octal, one number
    `http://127.1:${port}/doc.pdf`, // short form
    `http://127.000.000.001:${port}/doc.pdf`,
    `http://0.0.0.0:${port}/doc.pdf`, // reaches local services on Linux
    `http://0:${port}/doc.pdf`,
    `http://[::1]:${port}/doc.pdf`,
    `http://[0:0:0:0:0:0:0:1]:${port}/doc.pdf`,
    `http://[::ffff:127.0.0.1]:${port}/doc.pdf`, // IPv4-mapped
    `http://[::ffff:7f00:1]:${port}/doc.pdf`,
    `http://[0:0:0:0:0:ffff:127.0.0.1]:${port}/doc.pdf`,
    `http://[::127.0.0.1]:${port}/doc.pdf`, // IPv4-compatible
    `http://[64:ff9b::7f00:1]:${port}/doc.pdf`, // NAT64
    `http://[::]:${port}/doc.pdf`,
    `http://user:pw@127.0.0.1:${port}/doc.pdf`,
    `https://127.0.0.1:${port}/doc.pdf`,
    'http://169.254.169.254/latest/meta-data/',
    'http://[fd00:ec2::254]/latest/meta-data/', // AWS metadata over IPv6 (unique-local)
    'http://10.0.0.1/x.pdf',
    'http://172.16.5.4/x.pdf',
    'http://192.168.1.1/x.pdf',
    'http://100.64.0.1/x.pdf', // CGNAT
    'http://169.254.1.1/x.pdf',
    'http://224.0.0.1/x.pdf',
    'http://239.255.255.250/x.pdf',
    'http://255.255.255.255/x.pdf',
    'http://192.0.2.10/x.pdf',
    'http://198.51.100.10/x.pdf',
    'http://203.0.113.10/x.pdf',
    'http://198.18.0.1/x.pdf',
    'http://240.0.0.1/x.pdf',
    'http://[fc00::1]/x.pdf',
    'http://[fe80::1]/x.pdf',
    'http://[ff02::1]/x.pdf',
    'http://[2001:db8::1]/x.pdf',
    'http://[2002:7f00:1::]/x.pdf', // 6to4 of 127.0.0.1
    'http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/x.pdf', // Teredo
  ];

  it('refuses every spelling of loopback and every private or special range, without connecting', async () => {
    const before = hits;
    for (const url of spellings()) {
      const err = await refusal(url);
      assert.equal(err.code, 'url_forbidden_address', `${url}: ${err.code} ${err.message}`);
      assert.match(err.message, /only public addresses are fetched/);
    }
    assert.equal(hits, before, 'no refused request reached the server');
  });

  /** A fetcher's log: the details of each refusal, which the customer no longer reads. */
  const logged = () => {
    const lines: Record<string, unknown>[] = [];
    return { lines, log: { warn: (o: object, msg: string) => void lines.push({ ...o, msg }) } };
  };

  it('tells the customer neither the address a host resolves to nor its range; the log has both', async () => {
    // Issue 27, finding 8: the job's failure reason is visible through GET /v1/faxes/{id}, so naming
    // what an internal name resolves to would map the network the worker runs in.
    for (const [url, address, range] of [
      ['http://169.254.169.254/', '169.254.169.254', /cloud metadata/],
      [`http://0x7f.1:${port}/`, '127.0.0.1', /loopback/],
      ['http://[::ffff:10.1.2.3]/', '::ffff:a01:203', /IPv4-mapped .* private network/],
      ['http://100.100.100.200/', '100.100.100.200', /carrier-grade NAT/],
    ] as const) {
      const l = logged();
      const err = await refusal(url, base({ log: l.log }));
      assert.equal(err.code, 'url_forbidden_address');
      assert.match(err.message, /^file_url host \S+ is not allowed: only public addresses are fetched$/);
      assert.doesNotMatch(err.message, range, url);
      assert.equal(l.lines.length, 1, `${url}: one log line`);
      assert.equal(l.lines[0]!.address, address, url);
      assert.match(String(l.lines[0]!.range), range, url);
    }
  });

  it('refuses a host when ANY of its addresses is inside, and checks DNS answers of any form', async () => {
    const l = logged();
    const o = base({ resolve: async () => ['8.8.8.8', '10.20.30.40'], log: l.log });
    const err = await refusal('http://intranet.example/doc.pdf', o);
    assert.equal(err.code, 'url_forbidden_address');
    assert.equal(
      err.message,
      'file_url host intranet.example is not allowed: only public addresses are fetched',
    );
    assert.doesNotMatch(err.message, /10\.20\.30\.40|private/);
    assert.deepEqual(
      { host: l.lines[0]!.host, address: l.lines[0]!.address },
      { host: 'intranet.example', address: '10.20.30.40' },
    );
    assert.match(String(l.lines[0]!.range), /private network/);
    const mapped = await refusal(
      'http://mapped.example/',
      base({ resolve: async () => ['::ffff:169.254.169.254'] }),
    );
    assert.equal(mapped.code, 'url_forbidden_address');
  });

  it('refuses other schemes and broken URLs with their own codes', async () => {
    for (const url of ['ftp://example.com/a.pdf', 'file:///etc/passwd', 'gopher://x/', 'data:,%PDF-']) {
      assert.equal((await refusal(url)).code, 'url_scheme', url);
    }
    assert.equal((await refusal('http://')).code, 'url_invalid');
    assert.equal((await refusal('not a url')).code, 'url_invalid');
  });

  it('reports a host that does not resolve, the resolver’s own words in the log only', async () => {
    const l = logged();
    const err = await refusal(
      'http://nowhere.example/',
      base({
        resolve: async () => {
          throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
        },
        log: l.log,
      }),
    );
    assert.equal(err.code, 'url_dns_failed');
    assert.equal(err.message, 'file_url host nowhere.example could not be resolved (DNS lookup failed)');
    assert.match(String(l.lines[0]!.err), /ENOTFOUND/);
  });
});

describe('file_url: allowed hosts, redirects, size and time', () => {
  const allowLocal = () => base({ allow: parseAllowList('127.0.0.1') });

  it('fetches from an allow-listed address, judging content by its bytes', async () => {
    const got = await httpFetcher(allowLocal())(
      `http://127.0.0.1:${port}/doc.pdf`,
      new AbortController().signal,
    );
    assert.deepEqual(got, pdf, 'served as application/octet-stream, accepted because it starts with %PDF-');
    // Other spellings of the allowed address are the same address.
    const again = await httpFetcher(allowLocal())(
      `http://2130706433:${port}/doc.pdf`,
      new AbortController().signal,
    );
    assert.deepEqual(again, pdf);
  });

  it('connects to the address it checked (pinned), resolving once per hop', async () => {
    let lookups = 0;
    // First answer passes the allow-list; any later answer would be a rebinding to another address.
    const resolve = async () => (lookups++ === 0 ? ['127.0.0.1'] : ['10.0.0.1']);
    const got = await httpFetcher(base({ allow: parseAllowList('127.0.0.1/32'), resolve }))(
      `http://rebind.invalid:${port}/doc.pdf`,
      new AbortController().signal,
    );
    assert.deepEqual(got, pdf, 'the .invalid name was never looked up by the HTTP client itself');
    assert.equal(lookups, 1);
  });

  it('checks every redirect target the same way', async () => {
    const o = base({ allow: parseAllowList('allowed.example'), resolve: async () => ['127.0.0.1'] });
    for (const target of [
      `http://127.0.0.1:${port}/doc.pdf`,
      `http://[::1]:${port}/doc.pdf`,
      `http://2130706433:${port}/doc.pdf`,
      'http://169.254.169.254/latest/meta-data/',
    ]) {
      const err = await refusal(
        `http://allowed.example:${port}/redirect?to=${encodeURIComponent(target)}`,
        o,
      );
      assert.equal(err.code, 'url_forbidden_address', target);
    }
    // The same redirect to an allowed host is followed.
    const ok = await httpFetcher(o)(
      `http://allowed.example:${port}/redirect?to=${encodeURIComponent(`http://allowed.example:${port}/doc.pdf`)}`,
      new AbortController().signal,
    );
    assert.deepEqual(ok, pdf);
    assert.equal(
      (
        await refusal(
          `http://allowed.example:${port}/redirect?to=${encodeURIComponent('file:///etc/passwd')}`,
          o,
        )
      ).code,
      'url_redirect_invalid',
    );
    assert.equal((await refusal(`http://allowed.example:${port}/loop`, o)).code, 'url_too_many_redirects');
  });

  it('stops an oversized body while streaming, and a declared one at once', async () => {
    const big = await refusal(`http://127.0.0.1:${port}/big`, allowLocal());
    assert.equal(big.code, 'file_too_large');
    const t = Date.now();
    assert.equal(
      (await refusal(`http://127.0.0.1:${port}/big-declared`, allowLocal())).code,
      'file_too_large',
    );
    assert.ok(Date.now() - t < 2_000);
  });

  it('gives up on a slow drip at the total time limit', async () => {
    const t = Date.now();
    const err = await refusal(`http://127.0.0.1:${port}/slow`, base({ ...allowLocal(), timeoutMs: 800 }));
    assert.equal(err.code, 'url_timeout');
    const took = Date.now() - t;
    assert.ok(took >= 700 && took < 3_000, `took ${took} ms`);
  });

  it('refuses content that is not a PDF whatever its Content-Type, and HTTP errors', async () => {
    const err = await refusal(`http://127.0.0.1:${port}/html.pdf`, allowLocal());
    assert.equal(err.code, 'not_a_pdf');
    assert.match(err.message, /Content-Type was application\/pdf/);
    assert.equal(
      (await refusal(`http://127.0.0.1:${port}/missing.pdf`, allowLocal())).code,
      'url_http_status',
    );
  });

  it('reports an allowed host that does not answer', async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const p = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    assert.equal((await refusal(`http://127.0.0.1:${p}/doc.pdf`, allowLocal())).code, 'url_unreachable');
    const cut = await refusal(`http://127.0.0.1:${port}/reset`, allowLocal());
    assert.equal(cut.code, 'url_unreachable');
    assert.match(cut.message, /broke off/);
  });

  it('a shutdown abort is not blamed on the document', async () => {
    const ac = new AbortController();
    const begun = slowStarted;
    const p = httpFetcher(allowLocal())(`http://127.0.0.1:${port}/slow`, ac.signal);
    // Abort mid-download: once the server has begun its answer.
    await eventually(async () => slowStarted > begun, 10_000, 5);
    ac.abort(new Error('shutting down'));
    await assert.rejects(
      p,
      (e: unknown) => !(e instanceof DocumentError) && (e as Error).message === 'shutting down',
    );
  });
});

describe('file_url over https', () => {
  it('keeps certificate checks on and sends the host name (SNI) over the pinned connection', async () => {
    // A self-signed certificate (openssl, from scripts/system-packages.sh): the fetch must reach the
    // TLS handshake through the pinned address, name the host, and then refuse the certificate.
    const dir = mkdtempSync(join(tmpdir(), 'faxline-tls-'));
    let tlsServer: https.Server | undefined;
    try {
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'rsa:2048',
          '-nodes',
          '-days',
          '1',
          '-subj',
          '/CN=localhost',
          '-keyout',
          join(dir, 'key.pem'),
          '-out',
          join(dir, 'cert.pem'),
        ],
        { stdio: 'ignore' },
      );
      const names: string[] = [];
      tlsServer = https.createServer(
        {
          key: readFileSync(join(dir, 'key.pem')),
          cert: readFileSync(join(dir, 'cert.pem')),
          SNICallback: (name, cb) => {
            names.push(name);
            cb(null, undefined);
          },
        },
        (_req, res) => res.end(pdf),
      );
      await new Promise<void>((r) => tlsServer!.listen(0, '127.0.0.1', r));
      const p = (tlsServer.address() as AddressInfo).port;
      const err = await refusal(
        `https://tls.example:${p}/doc.pdf`,
        base({ allow: parseAllowList('tls.example'), resolve: async () => ['127.0.0.1'] }),
      );
      assert.equal(err.code, 'url_unreachable');
      assert.match(err.message, /SELF_SIGNED/);
      assert.deepEqual(names, ['tls.example']);
    } finally {
      tlsServer?.closeAllConnections();
      await new Promise((r) => (tlsServer ? tlsServer.close(r) : r(undefined)));
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('address rules', () => {
  it('lets public unicast addresses through', () => {
    for (const a of [
      '8.8.8.8',
      '1.1.1.1',
      '93.184.216.34',
      '2606:4700:4700::1111',
      '2a00:1450:4001:81c::200e',
    ]) {
      assert.equal(blockedReason(parseAddress(a)!), null, a);
    }
  });

  it('parses IPv6 forms to the same value', () => {
    assert.equal(parseAddress('::ffff:127.0.0.1')!.value, parseAddress('::ffff:7f00:1')!.value);
    assert.equal(parseAddress('[::1]')!.value, 1n);
    assert.equal(parseAddress('fe80::1%eth0'), null);
  });

  it('rejects a malformed allow-list entry', () => {
    assert.throws(() => parseAllowList('10.0.0.0/33'));
    assert.throws(() => parseAllowList('http://x'));
    assert.deepEqual(parseAllowList('docs.example, *.corp.example 10.1.0.0/16').hosts, [
      'docs.example',
      '*.corp.example',
    ]);
  });
});
