// Hostile documents through the real service (HTTP send → RabbitMQ → send worker → sandbox), each
// ending as a failed job whose failure code GET /v1/faxes/{job_id} shows, while good faxes sent
// alongside them are delivered by the same worker.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { makePdf } from './support/pdf.ts';
import {
  assemblePdf,
  bombPdf,
  encryptedPdf,
  hugeImagePdf,
  noPagesPdf,
  pageSizePdf,
} from './fixtures/hostile/build.ts';

type Service = Awaited<ReturnType<typeof startService>>;
const final = new Set(['delivered', 'failed', 'cancelled', 'rejected', 'unknown']);

async function send(
  s: Service,
  token: string,
  doc: { file_data?: string; file_url?: string },
  name = 'doc.pdf',
) {
  const r = await call(s.url, 'POST', '/v1/faxes/send', {
    token,
    body: { fax_number: '+15551234567', fax_data: [{ file_name: name, ...doc }] },
  });
  assert.equal(r.http, 200, JSON.stringify(r.body));
  return r.body.data.job_id as string;
}

async function outcome(s: Service, token: string, id: string) {
  return eventually(
    async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${id}`, { token });
      return final.has(r.body.data?.state) ? r.body.data : null;
    },
    60_000,
    100,
  );
}

let server: http.Server;
let port = 0;
let hits = 0;
let onceHits = 0;
let goodPdf: Buffer;

before(async () => {
  goodPdf = await makePdf(1);
  server = http.createServer((req, res) => {
    hits++;
    const u = new URL(req.url ?? '/', 'http://x');
    if (u.pathname === '/doc.pdf') return void res.writeHead(200).end(goodPdf);
    if (u.pathname === '/once.pdf') {
      // Like a presigned URL: serves the document once, then is gone.
      onceHits++;
      return void (onceHits === 1 ? res.writeHead(200).end(goodPdf) : res.writeHead(403).end());
    }
    if (u.pathname === '/html.pdf')
      return void res.writeHead(200, { 'content-type': 'application/pdf' }).end('<html>hello</html>');
    if (u.pathname === '/redirect')
      return void res.writeHead(302, { location: u.searchParams.get('to') ?? '/' }).end();
    if (u.pathname === '/big') {
      res.writeHead(200, { 'content-type': 'application/pdf' });
      res.write('%PDF-1.7\n');
      for (let i = 0; i < 8; i++) res.write(Buffer.alloc(64 * 1024, 0x20));
      return void res.end();
    }
    if (u.pathname === '/slow') {
      res.writeHead(200, { 'content-type': 'application/pdf' });
      res.write('%PDF-1.7\n');
      const t = setInterval(() => res.write(' '), 100);
      return void res.on('close', () => clearInterval(t));
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

describe('hostile documents (no fetch allow-list)', () => {
  let s: Service;
  let token: string;
  before(async () => {
    s = await startService({
      env: { PDF_MAX_PAGES: '5', PDF_CHECK_MEMORY_MB: '256', PDF_MAX_STREAM_BYTES: String(64 * 1024 * 1024) },
    });
    token = await tokenFor(s.url, (await seedAccount(s)).api_key);
  });
  after(async () => {
    await s.dropAll();
  });

  it('fails each hostile file with its own code and keeps delivering good faxes', async () => {
    const b64 = (b: Buffer) => b.toString('base64');
    const good = () => send(s, token, { file_data: b64(goodPdf) }, 'good.pdf');
    const cases: [string, Buffer, string][] = [
      ['bomb.pdf', bombPdf(1024), 'pdf_decompression_bomb'],
      ['encrypted.pdf', encryptedPdf(), 'pdf_encrypted'],
      ['truncated.pdf', (await makePdf(3)).subarray(0, 900), 'pdf_truncated'],
      ['broken.pdf', Buffer.from('%PDF-1.7\n1 0 obj <</Type /Catalog>>\n%%EOF\n'), 'pdf_broken'],
      ['empty.pdf', noPagesPdf(), 'pdf_no_pages'],
      ['long.pdf', await makePdf(6), 'pdf_too_many_pages'],
      ['image.pdf', hugeImagePdf(200_000, 200_000), 'pdf_image_too_large'],
    ];
    const first = await good();
    const hostile = await Promise.all(
      cases.map(async ([name, bytes]) => send(s, token, { file_data: b64(bytes) }, name)),
    );
    const last = await good();

    for (let i = 0; i < cases.length; i++) {
      const [name, , code] = cases[i]!;
      const job = await outcome(s, token, hostile[i]!);
      assert.equal(job.state, 'failed', name);
      assert.equal(job.failure.code, code, `${name}: ${JSON.stringify(job.failure)}`);
      assert.ok(job.failure.reason.includes(name), job.failure.reason);
    }
    assert.equal((await outcome(s, token, first)).state, 'delivered');
    assert.equal((await outcome(s, token, last)).state, 'delivered');
  });

  it('delivers what PDFium opens: cut-off files it repairs, pages without MediaBox, odd sizes, looping page trees', async () => {
    const three = await makePdf(3);
    const content = '<< /Length 44 >>\nstream\nBT /F1 24 Tf 72 700 Td (no MediaBox) Tj ET\nendstream';
    const cases: [string, Buffer][] = [
      // No cross-reference table, no trailer, no %%EOF: PDFium rebuilds it from the objects.
      ['cut-at-xref.pdf', three.subarray(0, three.lastIndexOf('xref'))],
      // No MediaBox anywhere: Letter, as PDFium (and viewers) default it.
      [
        'no-mediabox.pdf',
        assemblePdf([
          '<< /Type /Catalog /Pages 2 0 R >>',
          '<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
          '<< /Type /Page /Parent 2 0 R /Contents 4 0 R >>',
          content,
        ]),
      ],
      // A page tree that lists itself among its kids (pdf-lib's walk ran out of stack on these).
      [
        'looping-tree.pdf',
        assemblePdf([
          '<< /Type /Catalog /Pages 2 0 R >>',
          '<< /Type /Pages /Kids [3 0 R 2 0 R] /Count 1 >>',
          '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>',
        ]),
      ],
      // Any size with an area is scaled onto the fax page.
      ['poster.pdf', pageSizePdf(20_000, 20_000)],
      ['sliver.pdf', pageSizePdf(612, 2)],
    ];
    const ids = await Promise.all(
      cases.map(([name, bytes]) => send(s, token, { file_data: bytes.toString('base64') }, name)),
    );
    for (const [i, [name]] of cases.entries()) {
      const job = await outcome(s, token, ids[i]!);
      assert.equal(job.state, 'delivered', `${name}: ${JSON.stringify(job.failure)}`);
    }
  });

  it('refuses a non-PDF named .pdf at the door', async () => {
    const r = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [
          { file_name: 'photo.pdf', file_data: Buffer.from('\x89PNG\r\n\x1a\n....').toString('base64') },
        ],
      },
    });
    assert.equal(r.http, 422);
    assert.match(r.body.message, /not a PDF/);
  });

  it('fails file_url jobs aimed inside the network, in any spelling, without fetching', async () => {
    const before = hits;
    const urls = [
      `http://127.0.0.1:${port}/doc.pdf`,
      `http://localhost:${port}/doc.pdf`,
      `http://2130706433:${port}/doc.pdf`,
      `http://0x7f.1:${port}/doc.pdf`,
      `http://127.1:${port}/doc.pdf`,
      `http://0177.0.0.1:${port}/doc.pdf`,
      `http://0.0.0.0:${port}/doc.pdf`,
      `http://[::1]:${port}/doc.pdf`,
      `http://[::ffff:127.0.0.1]:${port}/doc.pdf`,
      'http://169.254.169.254/latest/meta-data/iam/security-credentials/',
      'http://10.0.0.8/doc.pdf',
      'http://[fd00::1]/doc.pdf',
    ];
    const ids = await Promise.all(urls.map((u) => send(s, token, { file_url: u })));
    const good = await send(s, token, { file_data: goodPdf.toString('base64') });
    for (let i = 0; i < urls.length; i++) {
      const job = await outcome(s, token, ids[i]!);
      assert.equal(job.state, 'failed', urls[i]);
      assert.equal(job.failure.code, 'url_forbidden_address', `${urls[i]}: ${JSON.stringify(job.failure)}`);
    }
    const ftp = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.pdf', file_url: 'ftp://example.com/a.pdf' }],
      },
    });
    assert.equal(ftp.http, 422, 'other schemes are refused at the door');
    assert.equal(hits, before, 'nothing reached the local server');
    assert.equal((await outcome(s, token, good)).state, 'delivered');
  });
});

describe('file_url with an allow-listed host', () => {
  let s: Service;
  let token: string;
  before(async () => {
    s = await startService({
      env: {
        FETCH_ALLOW_HOSTS: 'localhost',
        // The slow body trickles forever and must hit this deadline; the good downloads must not,
        // even when a loaded CI machine makes the test's own server (in this process) answer late.
        FETCH_TIMEOUT_SECONDS: '5',
        MAX_DOCUMENT_BYTES: String(256 * 1024),
      },
    });
    token = await tokenFor(s.url, (await seedAccount(s)).api_key);
  });
  after(async () => {
    await s.dropAll();
  });

  it('delivers from the allowed host and fails redirects inside, oversized, slow and non-PDF bodies', async () => {
    const at = (p: string) => `http://localhost:${port}${p}`;
    const cases: [string, string][] = [
      [at(`/redirect?to=${encodeURIComponent(`http://127.0.0.1:${port}/doc.pdf`)}`), 'url_forbidden_address'],
      [at(`/redirect?to=${encodeURIComponent(`http://[::1]:${port}/doc.pdf`)}`), 'url_forbidden_address'],
      [at('/big'), 'file_too_large'],
      [at('/slow'), 'url_timeout'],
      [at('/html.pdf'), 'not_a_pdf'],
      [at('/gone.pdf'), 'url_http_status'],
    ];
    const ok = await send(s, token, { file_url: at('/doc.pdf') });
    const viaRedirect = await send(s, token, {
      file_url: at(`/redirect?to=${encodeURIComponent(at('/doc.pdf'))}`),
    });
    const ids = await Promise.all(cases.map(([u]) => send(s, token, { file_url: u })));
    for (let i = 0; i < cases.length; i++) {
      const job = await outcome(s, token, ids[i]!);
      assert.equal(job.failure?.code, cases[i]![1], `${cases[i]![0]}: ${JSON.stringify(job.failure)}`);
    }
    const delivered = await outcome(s, token, ok);
    assert.equal(delivered.state, 'delivered', JSON.stringify(delivered.failure));
    assert.equal(delivered.page_count, 1);
    assert.equal((await outcome(s, token, viaRedirect)).state, 'delivered');
  });

  it('a forward sends the bytes fetched for the original without fetching its file_url again', async () => {
    const at = (p: string) => `http://localhost:${port}${p}`;
    const original = await send(s, token, { file_url: at('/once.pdf') });
    assert.equal((await outcome(s, token, original)).state, 'delivered');
    assert.equal(onceHits, 1);
    const fwd = await call(s.url, 'POST', '/v1/faxes/forward', {
      token,
      body: { job_id: original, fax_number: '+15550001111' },
    });
    assert.equal(fwd.http, 200, JSON.stringify(fwd.body));
    const forwarded = await outcome(s, token, fwd.body.data.job_id as string);
    assert.equal(forwarded.state, 'delivered', JSON.stringify(forwarded.failure));
    assert.equal(forwarded.page_count, 1);
    assert.equal(onceHits, 1, 'the URL (which now answers 403) was not fetched again');
  });
});
