// TIFF, JPEG and PNG documents through the real service (HTTP send → RabbitMQ → send worker →
// sandbox → render processes → loopback line), uploaded (file_data) and fetched (file_url): each is
// recognised by its content, rendered to fax pages of the job's resolution (read back with
// libtiff), and a damaged or oversized one fails its job with a named reason.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PdfSandbox, defaultSandboxLimits } from '../src/documents/check.ts';
import { DocumentError } from '../src/documents/errors.ts';
import { Pdfium } from '../src/documents/render/engine.ts';
import { getRender } from '../src/documents/render/store.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { crc32, makeJpeg, makePng, makeTiff, tiffcp } from './support/images.ts';
import { decodeWithLibtiff, libtiff, type RawPage } from './support/render-tiff.ts';

type Service = Awaited<ReturnType<typeof startService>>;

/** A PNG whose header declares `w` x `h` pixels, with a tiny (wrong-sized) image. */
function pngDeclaring(w: number, h: number): Buffer {
  const out = Buffer.from(makePng(8, 8));
  out.writeUInt32BE(w, 16);
  out.writeUInt32BE(h, 20);
  // The IHDR checksum must match, or the file would be refused as damaged before its size is read.
  out.writeUInt32BE(crc32(out.subarray(12, 29)), 29);
  return out;
}

/** Share of black pixels in a rectangle of a page (fractions of its width and height). */
function black(p: RawPage, x0: number, y0: number, x1: number, y1: number): number {
  const stride = Math.ceil(p.width / 8);
  let n = 0;
  let ones = 0;
  for (let y = Math.round(y0 * p.height); y < Math.round(y1 * p.height); y++)
    for (let x = Math.round(x0 * p.width); x < Math.round(x1 * p.width); x++) {
      n++;
      ones += (p.rows[y * stride + (x >> 3)]! >> (7 - (x & 7))) & 1;
    }
  return ones / n;
}

/** The test picture (support/images.ts) as rendered: white inside, black bar, dithered gray band. */
function assertPicture(p: RawPage, what: string): void {
  assert.ok(black(p, 0.3, 0.4, 0.7, 0.55) < 0.01, `${what}: white inside`);
  assert.ok(black(p, 0.3, 0.23, 0.7, 0.27) > 0.95, `${what}: the black bar`);
  const gray = black(p, 0.3, 0.62, 0.7, 0.68);
  assert.ok(gray > 0.3 && gray < 0.7, `${what}: the 50 % gray band is dithered (${gray.toFixed(2)} black)`);
}

describe('TIFF, JPEG and PNG documents through the service', () => {
  let s: Service;
  let db: pg.Client;
  let token: string;
  let server: http.Server;
  let port = 0;
  const served = new Map<string, Buffer>();

  before(async () => {
    server = http.createServer((req, res) => {
      const body = served.get(req.url ?? '');
      // A misleading Content-Type: the content decides.
      if (body) return void res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(body);
      res.writeHead(404).end();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
    s = await startService({ env: { FETCH_ALLOW_HOSTS: 'localhost', PDF_CHECK_MEMORY_MB: '256' } });
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    token = await tokenFor(s.url, (await seedAccount(s)).api_key);
  });
  after(async () => {
    await db.end();
    await s.dropAll();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  async function send(doc: Record<string, string>, quality: string): Promise<string> {
    const r = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: { fax_number: '+15551234567', fax_quality: quality, fax_data: [doc] },
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    return r.body.data.job_id as string;
  }

  async function outcome(id: string): Promise<any> {
    return eventually(
      async () => {
        const j = await call(s.url, 'GET', `/v1/faxes/${id}`, { token });
        return ['delivered', 'failed'].includes(j.body.data?.state) ? j.body.data : null;
      },
      60_000,
      100,
    );
  }

  it('renders each format at the job resolution, by upload and by URL', async () => {
    const bilevel = makeTiff([
      { w: 1728, h: 1078, bits: 1, xDpi: 204, yDpi: 98 }, // a received fax page, normal resolution
      { w: 1728, h: 2156, bits: 1, xDpi: 204, yDpi: 196 },
      { w: 1275, h: 1650, bits: 1, xDpi: 150, yDpi: 150 },
    ]);
    const gray = makeTiff([{ w: 850, h: 1100, bits: 8, xDpi: 100, yDpi: 100 }]);
    served.set('/scan', tiffcp(gray, 'lzw'));
    served.set('/photo', makeJpeg(1275, 1650));
    // name, document, quality, pages, fax page height at that quality (Letter: 11 in)
    const cases: [string, Record<string, string>, string, number, number][] = [
      ['fax-g4.tif', { file_data: tiffcp(bilevel, 'g4').toString('base64') }, 'standard', 3, 2156],
      ['fax-g3.tif', { file_data: tiffcp(bilevel, 'g3:2d').toString('base64') }, 'low', 3, 1078],
      ['gray-jpeg.tif', { file_data: tiffcp(gray, 'jpeg').toString('base64') }, 'hd', 1, 4301],
      ['gray-deflate.tif', { file_data: tiffcp(gray, 'zip').toString('base64') }, 'standard', 1, 2156],
      ['scan.tif', { file_url: `http://localhost:${port}/scan` }, 'low', 1, 1078],
      ['photo.jpg', { file_url: `http://localhost:${port}/photo` }, 'standard', 1, 2156],
      ['chart.png', { file_data: makePng(850, 1100, [100, 100]).toString('base64') }, 'hd', 1, 4301],
      [
        'colour.tif',
        { file_data: makeTiff([{ w: 850, h: 1100, bits: 24, xDpi: 100, yDpi: 100 }]).toString('base64') },
        'low',
        1,
        1078,
      ],
      ['deep.png', { file_data: makePng(850, 1100, undefined, 'gray16').toString('base64') }, 'low', 1, 1078],
      [
        'indexed.png',
        { file_data: makePng(850, 1100, undefined, 'palette').toString('base64') },
        'low',
        1,
        1078,
      ],
      ['alpha.png', { file_data: makePng(850, 1100, undefined, 'rgba').toString('base64') }, 'low', 1, 1078],
      [
        'adam7.png',
        { file_data: makePng(850, 1100, undefined, 'interlaced').toString('base64') },
        'low',
        1,
        1078,
      ],
      // Named as a PDF: the content decides, not the name.
      ['named-wrong.pdf', { file_data: makePng(850, 1100).toString('base64') }, 'low', 1, 1078],
    ];
    const ids = await Promise.all(
      cases.map(([name, doc, quality]) => send({ file_name: name, ...doc }, quality)),
    );
    for (const [i, [name, , quality, pages, height]] of cases.entries()) {
      const job = await outcome(ids[i]!);
      assert.equal(job.state, 'delivered', `${name}: ${JSON.stringify(job.failure)}`);
      assert.equal(job.page_count, pages, name);
      const r = await getRender(db, ids[i]!);
      assert.ok(r, name);
      assert.equal(r.quality, quality);
      const yDpi = { low: 98, standard: 196, hd: 391 }[quality];
      const info = libtiff('tiffinfo', r.tiff);
      assert.equal(info.match(new RegExp(`Resolution: 204, ${yDpi} pixels/inch`, 'g'))?.length, pages, name);
      const decoded = decodeWithLibtiff(r.tiff);
      assert.equal(decoded.length, pages, name);
      for (const [n, p] of decoded.entries()) {
        assert.equal(p.width, 1728, `${name} page ${n + 1}`);
        assert.equal(p.height, height, `${name} page ${n + 1}`);
        if (!name.startsWith('fax-')) assertPicture(p, `${name} page ${n + 1}`);
        else {
          // Bilevel pages: the bar is black, the inside white, and no gray band to dither.
          assert.ok(black(p, 0.3, 0.4, 0.7, 0.55) < 0.01, `${name} page ${n + 1}: white inside`);
          assert.ok(black(p, 0.3, 0.23, 0.7, 0.27) > 0.95, `${name} page ${n + 1}: the black bar`);
        }
      }
    }
  });

  it('fails a damaged or oversized image with a reason that names it', async () => {
    const jpeg = makeJpeg(400, 500);
    const png = makePng(400, 500);
    const damagedPng = Buffer.from(png);
    damagedPng.fill(0x55, 60, 120);
    const g4 = tiffcp(makeTiff([{ w: 1728, h: 2156, bits: 1, xDpi: 204, yDpi: 196 }]), 'g4');
    const cases: [string, Buffer, string, RegExp][] = [
      ['cut.jpg', jpeg.subarray(0, jpeg.length >> 1), 'image_broken', /JPEG cannot be read: it is truncated/],
      ['noframe.jpg', Buffer.from([0xff, 0xd8, 0xff, 0xd9]), 'image_broken', /no frame header/],
      ['damaged.png', damagedPng, 'image_broken', /PNG is damaged \(the checksum of its \w+ chunk/],
      ['cut.png', png.subarray(0, png.length >> 1), 'image_broken', /PNG is truncated/],
      ['huge.png', pngDeclaring(100_000, 100_000), 'image_too_large', /100000 x 100000 pixels/],
      ['empty.tif', Buffer.concat([Buffer.from('II*\0'), Buffer.alloc(40, 0xee)]), 'image_broken', /TIFF/],
      ['cut.tif', g4.subarray(0, 200), 'image_broken', /TIFF holds no readable image directory/],
      [
        'jbig.tif',
        makeTiff([{ w: 64, h: 64, bits: 1, xDpi: 200, yDpi: 200, compression: 34661 }]),
        'image_broken',
        /uses compression 34661, which this service cannot decode/,
      ],
    ];
    const ids = await Promise.all(
      cases.map(([name, bytes]) =>
        send({ file_name: name, file_data: bytes.toString('base64') }, 'standard'),
      ),
    );
    for (const [i, [name, , code, reason]] of cases.entries()) {
      const job = await outcome(ids[i]!);
      assert.equal(job.state, 'failed', name);
      assert.equal(job.failure.code, code, `${name}: ${JSON.stringify(job.failure)}`);
      assert.ok(job.failure.reason.startsWith(`${name}: `), job.failure.reason);
      assert.match(job.failure.reason, reason);
    }
  });

  it('previews a page of a multi-page TIFF as it will be sent', async () => {
    const tiff = tiffcp(
      makeTiff([
        { w: 1728, h: 1078, bits: 1, xDpi: 204, yDpi: 98 },
        { w: 1275, h: 1650, bits: 1, xDpi: 150, yDpi: 150 },
      ]),
      'g4',
    );
    const r = await call(s.url, 'POST', '/v1/faxes/preview?page=2', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_quality: 'standard',
        fax_data: [{ file_name: 'scan.tif', file_data: tiff.toString('base64') }],
      },
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    assert.equal(r.body.data.document_pages, 2);
    assert.equal(r.body.data.page.number, 2);
    assert.equal(r.body.data.page.fax_width, 1728);
    assert.equal(r.body.data.page.fax_height, 2156);
    const png = Buffer.from(r.body.data.page.png_base64 as string, 'base64');
    assert.equal(png.readUInt32BE(0), 0x89504e47, 'a PNG');
  });

  it('refuses at the door content that is none of the four formats', async () => {
    const gif = Buffer.from('GIF89a\x01\x00\x01\x00\x00\x00\x00;', 'latin1');
    const r = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.png', file_data: gif.toString('base64') }],
      },
    });
    assert.equal(r.http, 422);
    assert.equal(r.body.status, 0);
    assert.match(r.body.message, /fax_data\[0\]\.file_data: is not a PDF, TIFF, JPEG or PNG document/);
  });
});

describe('image limits in the sandbox', () => {
  const sandbox = new PdfSandbox({
    ...defaultSandboxLimits,
    concurrency: 1,
    memoryMb: 256,
    maxPages: 2,
    maxStreamBytes: 4 * 1024 * 1024,
    maxDecodedBytes: 6 * 1024 * 1024,
  });
  after(() => sandbox.close());
  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => assert.fail('accepted'),
      (e: unknown) => {
        assert.ok(e instanceof DocumentError, String(e));
        return e;
      },
    );
  const page = { w: 1700, h: 2200, bits: 8 as const, xDpi: 200, yDpi: 200 };

  it('refuses a TIFF of more pages than PDF_MAX_PAGES', async () => {
    const e = await refusal(sandbox.check(makeTiff([page, page, page]), 'long.tif'));
    assert.equal(e.code, 'image_too_many_pages');
    assert.equal(e.message, 'long.tif: the TIFF has 3 pages; at most 2 are accepted per document');
  });

  it('refuses a page past PDF_MAX_STREAM_BYTES and pages past PDF_MAX_DECODED_BYTES together, before decoding', async () => {
    const big = await refusal(sandbox.check(makeTiff([{ ...page, bits: 24 }]), 'colour.tif'));
    assert.equal(big.code, 'image_too_large');
    assert.match(
      big.message,
      /^colour\.tif: page 1 of the TIFF measures 1700 x 2200 pixels, \d+ bytes decoded/,
    );
    const two = await refusal(sandbox.check(makeTiff([page, page]), 'two.tif'));
    assert.equal(two.code, 'image_too_large');
    assert.match(
      two.message,
      /pages decode to more than 6291456 bytes in total, the limit per document \(passed at page 2\)/,
    );
  });

  it('turns a JPEG by its EXIF Orientation, as viewers do', async () => {
    const pdfium = await Pdfium.load();
    const barAt = async (orientation: number) => {
      const info = await sandbox.check(makeJpeg(425, 550, orientation), 'photo.jpg');
      const doc = pdfium.open(info.pdf!);
      try {
        const r = doc.render(0, 'low');
        const stride = r.width >> 3;
        const row = (y: number) => {
          let n = 0;
          for (let x = r.width >> 2; x < (3 * r.width) >> 2; x++)
            n += (r.rows[y * stride + (x >> 3)]! >> (7 - (x & 7))) & 1;
          return n / (r.width >> 1);
        };
        return { top: row(Math.round(r.height * 0.25)), bottom: row(Math.round(r.height * 0.75)) };
      } finally {
        doc.close();
      }
    };
    const upright = await barAt(1);
    assert.ok(upright.top > 0.95 && upright.bottom < 0.05, JSON.stringify(upright));
    // Orientation 3: stored upside down, shown turned by 180 degrees: the bar at the bottom.
    const turned = await barAt(3);
    assert.ok(turned.bottom > 0.95 && turned.top < 0.05, JSON.stringify(turned));
  });

  it('checks an accepted image into a PDF of one page per image', async () => {
    const info = await sandbox.check(makeTiff([page, { ...page, bits: 1 }]), 'ok.tif');
    assert.equal(info.pageCount, 2);
    assert.ok(info.pdf && Buffer.from(info.pdf).toString('latin1', 0, 5) === '%PDF-');
  });
});
