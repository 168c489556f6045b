// Fax rendering: our T.6 encoder and TIFF Class F writer checked by an independent reader (libtiff's
// tiffinfo, tiffdump and tiffcp from Debian), page geometry, and real PDFs from other authors
// (test/fixtures/README.md) rendered through the worker pool.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { PDFDocument, degrees } from 'pdf-lib';
import { DocumentError } from '../src/documents/errors.ts';
import { codeTables, encodeT6 } from '../src/documents/render/g4.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import { FAX_WIDTH, place, toBilevel, Y_DPI, type Quality } from '../src/documents/render/raster.ts';
import { renderFax } from '../src/documents/render/render.ts';
import { writeTiffClassF } from '../src/documents/render/tiff.ts';
import { decodeWithLibtiff, libtiff } from './support/render-tiff.ts';

const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));

/** Deterministic pseudo-random numbers (xorshift), so a failure can be reproduced. */
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

function bitmap(width: number, height: number, pixel: (x: number, y: number) => boolean): Uint8Array {
  const stride = (width + 7) >> 3;
  const rows = new Uint8Array(stride * height);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) if (pixel(x, y)) rows[y * stride + (x >> 3)]! |= 0x80 >> (x & 7);
  return rows;
}

/** Encodes pages with our encoder, decodes them with libtiff, and demands identical pixels. */
function roundTrip(pages: { rows: Uint8Array; width: number; height: number }[]): void {
  const tiff = writeTiffClassF(
    pages.map((p) => ({
      data: encodeT6(p.rows, p.width, p.height),
      width: p.width,
      height: p.height,
      xDpi: 204,
      yDpi: 196,
    })),
  );
  const decoded = decodeWithLibtiff(tiff);
  assert.equal(decoded.length, pages.length);
  pages.forEach((p, i) => {
    const d = decoded[i]!;
    assert.equal(d.width, p.width);
    assert.equal(d.height, p.height);
    assert.equal(d.tags.get(262)?.[0], 0, 'min-is-white kept');
    assert.ok(Buffer.from(d.rows).equals(Buffer.from(p.rows)), `page ${i + 1}: pixels differ after decoding`);
  });
}

describe('T.6 (MMR) encoder', () => {
  it('has prefix-free code sets for each colour (as the recommendation requires)', () => {
    const { WHITE_TERM, BLACK_TERM, WHITE_MAKEUP, BLACK_MAKEUP, EXT_MAKEUP } = codeTables;
    const str = ([v, n]: readonly [number, number]) => v.toString(2).padStart(n, '0');
    for (const set of [
      [...WHITE_TERM, ...WHITE_MAKEUP, ...EXT_MAKEUP],
      [...BLACK_TERM, ...BLACK_MAKEUP, ...EXT_MAKEUP],
    ]) {
      const codes = set.map(str);
      assert.equal(new Set(codes).size, codes.length, 'codes are distinct');
      for (const a of codes)
        for (const b of codes) if (a !== b) assert.ok(!b.startsWith(a), `${a} prefixes ${b}`);
    }
    assert.equal(WHITE_TERM.length, 64);
    assert.equal(BLACK_TERM.length, 64);
    assert.equal(WHITE_MAKEUP.length, 27);
    assert.equal(BLACK_MAKEUP.length, 27);
    assert.equal(EXT_MAKEUP.length, 13);
  });

  it('round-trips synthetic pages through libtiff pixel for pixel', () => {
    const W = FAX_WIDTH;
    const r = rng(42);
    const noise = (p: number) => bitmap(W, 40, () => r() < p);
    roundTrip([
      { rows: bitmap(W, 30, () => false), width: W, height: 30 }, // all white
      { rows: bitmap(W, 30, () => true), width: W, height: 30 }, // all black
      { rows: noise(0.5), width: W, height: 40 }, // every mode, short runs
      { rows: noise(0.02), width: W, height: 40 }, // long white runs, make-up codes
      { rows: noise(0.97), width: W, height: 40 }, // long black runs
      { rows: bitmap(W, 20, (x) => x === 0 || x === W - 1), width: W, height: 20 }, // edges
      { rows: bitmap(W, 64, (x, y) => ((x >> 3) + (y >> 3)) % 2 === 0), width: W, height: 64 }, // checks
      { rows: bitmap(W, 64, (x, y) => Math.abs(x - 27 * y) < 5), width: W, height: 64 }, // steep slant
      { rows: bitmap(W, 64, (x, y) => (x + y) % 7 < 3), width: W, height: 64 }, // diagonal stripes
      { rows: bitmap(W, 64, (x, y) => x > y * 3 && x < y * 3 + 200), width: W, height: 64 }, // drifting run
    ]);
  });

  it('codes runs longer than 2560 pixels (extended make-up codes) and odd widths', () => {
    const r = rng(7);
    roundTrip([
      {
        rows: bitmap(6000, 8, (x, y) => (y % 2 === 0 ? x > 5900 : x < 2700 || r() < 0.01)),
        width: 6000,
        height: 8,
      },
      { rows: bitmap(13, 5, () => r() < 0.5), width: 13, height: 5 },
    ]);
  });
});

describe('page geometry', () => {
  it('puts Letter and A4 on their own paper length at each quality, 1728 wide', () => {
    const heights: Record<Quality, [number, number]> = {
      low: [1078, 1146],
      standard: [2156, 2292],
      hd: [4301, 4572],
    };
    for (const q of ['low', 'standard', 'hd'] as const) {
      const letter = place(612, 792, q);
      const a4 = place(595.28, 841.89, q);
      assert.deepEqual([letter.paper, a4.paper], ['letter', 'a4']);
      assert.deepEqual([letter.height, a4.height], heights[q]);
      assert.equal(letter.width, 1728);
      // Letter is a hair wider than the fax line: it is scaled down a little, never cropped.
      assert.ok(letter.x >= 0 && letter.x + letter.w <= 1728 && letter.y + letter.h <= letter.height);
      assert.equal(a4.rotate, 0);
    }
  });

  it('turns landscape pages and scales odd sizes to fit without cropping', () => {
    const land = place(842, 595, 'standard');
    assert.equal(land.rotate, 1);
    assert.equal(land.paper, 'a4');
    const tiny = place(200, 300, 'standard'); // a label: scaled up to fill the page
    assert.ok(tiny.w > 1500 || tiny.h > 2100);
    const tall = place(612, 2000, 'low'); // a receipt roll: scaled down to the page length
    assert.ok(tall.h <= tall.height && tall.w < 800, `receipt ${tall.w}x${tall.h}`);
    assert.equal(tall.y, 0);
  });

  it('binarises for the line: strokes black, light fills white, dark fills lines, photos screened', () => {
    const w = 128;
    const h = 64;
    const gray = new Uint8Array(w * h).fill(255);
    const put = (x0: number, y0: number, x1: number, y1: number, v: (x: number, y: number) => number) => {
      for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) gray[y * w + x] = v(x, y);
    };
    put(4, 4, 28, 28, () => 215); // a light tint (a shaded field), paper around it
    put(32, 0, 64, 32, () => 128); // a 50 % gray fill
    put(70, 4, 90, 5, () => 160); // a grey hairline on white
    put(70, 10, 90, 12, () => 0); // a black rule
    // A photograph: smooth steps between neighbours, mid tones.
    put(0, 32, 64, 64, (x, y) => 90 + ((x * 3 + y * 2) % 60));
    const bits = toBilevel(gray, w, h, w, undefined, 196);
    const count = (x0: number, y0: number, x1: number, y1: number) => {
      let n = 0;
      for (let y = y0; y < y1; y++)
        for (let x = x0; x < x1; x++) n += (bits[y * (w / 8) + (x >> 3)]! >> (7 - (x & 7))) & 1;
      return n;
    };
    assert.equal(count(10, 10, 22, 22), 0, 'inside the light tint: white');
    assert.ok(count(0, 0, 32, 32) > 0, 'the tint keeps a rim');
    const dark = count(36, 4, 60, 28) / (24 * 24);
    assert.ok(dark > 0.3 && dark < 0.7, `the 50 % fill: lines (${dark.toFixed(2)} black)`);
    assert.equal(count(70, 4, 90, 5), 20, 'the grey hairline: black');
    assert.equal(count(70, 10, 90, 12), 40, 'the black rule');
    assert.equal(count(96, 20, 128, 64), 0, 'paper stays white');
    const photo = count(4, 36, 60, 60) / (56 * 24);
    assert.ok(photo > 0.2 && photo < 0.8, `the photograph: screened (${photo.toFixed(2)} black)`);
  });

  it('a scan: every pixel against one threshold (150), every gray from 0 to 255, light and dark runs', () => {
    // Two tiles of a scan (paper grain: small steps between neighbours, little mid tone). The first
    // rows of each hold every gray in turn, so each value meets the threshold in every one of the
    // 8 places of a byte; the rest is grain, with runs of eight lighter than 240 (white whatever the
    // class) and of eight darker than 100 (ink).
    const w = 64;
    const h = 32;
    const gray = new Uint8Array(w * h);
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) gray[y * w + x] = 240 + ((x * 7 + y * 13) % 16);
    for (let v = 0; v < 256; v++) {
      gray[Math.floor(v / 32) * w + (v % 32)] = v; // tile 0: values in order
      gray[Math.floor(v / 32) * w + 32 + ((v * 9) % 32)] = 255 - v; // tile 1: reversed, shuffled
    }
    for (let x = 8; x < 16; x++) gray[20 * w + x] = 20 + x; // a dark run: ink
    for (let x = 40; x < 48; x++) gray[24 * w + x] = 90 + (x & 1) * 9; // 90 and 99: darker than 100
    const bits = toBilevel(gray, w, h, w, undefined, 391);
    const wrong: string[] = [];
    for (let y = 0; y < h; y++)
      for (let x = 0; x < w; x++) {
        const black = ((bits[y * (w / 8) + (x >> 3)]! >> (7 - (x & 7))) & 1) === 1;
        if (black !== gray[y * w + x]! < 150) wrong.push(`(${x},${y}) gray ${gray[y * w + x]}`);
      }
    assert.deepEqual(wrong, [], 'black exactly where the gray is below 150');
  });

  it('a vector fill of 70 and 100: darker than 100 is always black, 100 a mid tone that takes the fill pattern', () => {
    // Columns of 70 and 100 in turn: steps of 30, none smooth (a vector tile), and never a flat
    // fill. At 391 rows/in the pattern's period is 8 rows, 5 of them black for a gray of 100; on the
    // other 3 the 100s are white, while every 70 (darker than 100) stays black.
    const w = 64;
    const h = 64;
    const gray = new Uint8Array(w * h).fill(255);
    for (let y = 16; y < 48; y++) for (let x = 16; x < 48; x++) gray[y * w + x] = x & 1 ? 100 : 70;
    const bits = toBilevel(gray, w, h, w, undefined, 391);
    const at = (x: number, y: number) => (bits[y * (w / 8) + (x >> 3)]! >> (7 - (x & 7))) & 1;
    for (let y = 24; y < 40; y++)
      for (let x = 24; x < 40; x++)
        assert.equal(at(x, y), x & 1 && y % 8 >= 5 ? 0 : 1, `(${x},${y}) gray ${gray[y * w + x]}`);
  });
});

describe('rendering real PDFs in the worker pool', () => {
  let pool: RenderPool;
  before(() => {
    pool = new RenderPool(2);
  });
  after(async () => {
    await pool.close();
  });

  it('renders A4 and Letter PDFs to TIFF Class F that libtiff reads, at every quality', async () => {
    const a4 = fixture('a4-text-5p.pdf');
    const letter = fixture('letter-text-2p.pdf');
    for (const q of ['low', 'standard', 'hd'] as const) {
      const fax = await renderFax(
        pool,
        [
          { name: 'a4-text-5p.pdf', bytes: a4, pages: 5 },
          { name: 'letter-text-2p.pdf', bytes: letter, pages: 2 },
        ],
        q,
      );
      assert.equal(fax.pageCount, 7);
      const info = libtiff('tiffinfo', fax.tiff);
      assert.equal(info.match(/TIFF Directory at offset/g)?.length, 7, 'seven pages');
      assert.equal(info.match(/Image Width: 1728 /g)?.length, 7);
      assert.equal(info.match(/Compression Scheme: CCITT Group 4/g)?.length, 7);
      assert.equal(info.match(new RegExp(`Resolution: 204, ${Y_DPI[q]} pixels/inch`, 'g'))?.length, 7);
      assert.equal(info.match(/Photometric Interpretation: min-is-white/g)?.length, 7);
      assert.match(info, /Page Number: 6-7/);
      const heights = [...info.matchAll(/Image Length: (\d+)/g)].map((m) => Number(m[1]));
      const [letterH, a4H] = [place(612, 792, q).height, place(595, 842, q).height];
      assert.deepEqual(heights, [a4H, a4H, a4H, a4H, a4H, letterH, letterH]);

      const dump = libtiff('tiffdump', fax.tiff);
      assert.equal(dump.match(/Group4Options \(293\) LONG \(4\) 1<0>/g)?.length, 7);
      assert.equal(dump.match(/ResolutionUnit \(296\) SHORT \(3\) 1<2>/g)?.length, 7);
      assert.equal(dump.match(/SubFileType \(254\) LONG \(4\) 1<2>/g)?.length, 7);
      // The sizes handed to the line are the real strip sizes.
      const counts = [...dump.matchAll(/StripByteCounts \(279\) LONG \(4\) 1<(\d+)>/g)].map((m) =>
        Number(m[1]),
      );
      assert.deepEqual(counts, fax.pageBytes);
      assert.ok(fax.pageBytes.every((b) => b > 1000 && b < 200_000));
    }
  });

  it('decodes (libtiff) to exactly the bilevel image the renderer produced', async () => {
    const pdf = fixture('odd-raster-1p.pdf'); // a raster chart on an odd page size
    const fax = await renderFax(pool, [{ name: 'odd.pdf', bytes: pdf, pages: 1 }], 'standard');
    const img = await pool.run(
      { kind: 'page-image', pdf, page: 0, quality: 'standard' },
      { timeoutMs: 30_000 },
    );
    assert.equal(img.kind, 'page-image');
    if (img.kind !== 'page-image') return;
    const [decoded] = decodeWithLibtiff(fax.tiff);
    assert.equal(decoded!.height, img.height);
    assert.ok(Buffer.from(decoded!.rows).equals(Buffer.from(img.rows)), 'pixels identical');
    let black = 0;
    for (const b of img.rows) black += b.toString(2).replace(/0/g, '').length;
    const share = black / (img.width * img.height);
    assert.ok(share > 0.01 && share < 0.5, `ink coverage ${share}`);
  });

  it('turns landscape pages (MediaBox or /Rotate) to portrait fax pages without cropping', async () => {
    const src = await PDFDocument.load(fixture('a4-text-5p.pdf'));
    const doc = await PDFDocument.create();
    // A landscape A4 page carrying the first page, shrunk, on its left half.
    const [embedded] = await doc.embedPdf(src, [0]);
    const land = doc.addPage([842, 595]);
    land.drawPage(embedded!, { x: 20, y: 20, width: 390, height: 555 });
    // A portrait page shown landscape through /Rotate 90.
    const [copied] = await doc.copyPages(src, [1]);
    copied!.setRotation(degrees(90));
    doc.addPage(copied!);
    const bytes = await doc.save();
    const fax = await renderFax(pool, [{ name: 'landscape.pdf', bytes, pages: 2 }], 'low');
    const pages = decodeWithLibtiff(fax.tiff);
    for (const p of pages) {
      assert.equal(p.width, 1728);
      assert.equal(p.height, place(595, 842, 'low').height, 'portrait A4 length');
    }
    // The landscape page's content (left half of the landscape page) lands in the top half after a
    // quarter turn clockwise.
    const ink = (p: (typeof pages)[number], y0: number, y1: number) => {
      let n = 0;
      for (let y = y0; y < y1; y++) for (let i = 0; i < 216; i++) n += p.rows[y * 216 + i] === 0 ? 0 : 1;
      return n;
    };
    const h = pages[0]!.height;
    assert.ok(ink(pages[0]!, 0, h >> 1) > 20 * ink(pages[0]!, h >> 1, h) + 10, 'content in the top half');
  });

  it('fails broken input with a document error and keeps serving', async () => {
    const truncated = fixture('a4-text-5p.pdf').subarray(0, 3000);
    await assert.rejects(
      renderFax(pool, [{ name: 'cut.pdf', bytes: truncated, pages: 5 }], 'standard'),
      (e: unknown) => e instanceof DocumentError && e.code === 'pdf_broken' && /^cut\.pdf: /.test(e.message),
    );
    await assert.rejects(
      pool.run(
        { kind: 'fax-pages', pdf: Buffer.from('%PDF-1.7 garbage'), first: 0, count: 1, quality: 'low' },
        {
          timeoutMs: 30_000,
        },
      ),
      (e: unknown) => e instanceof DocumentError && e.code === 'pdf_broken',
    );
    const ok = await renderFax(
      pool,
      [{ name: 'ok.pdf', bytes: fixture('letter-text-2p.pdf'), pages: 2 }],
      'low',
    );
    assert.equal(ok.pageCount, 2);
  });

  it('stops a render that overruns its time limit, replaces the worker, and renders the next', async () => {
    const pdf = fixture('a4-text-5p.pdf');
    await assert.rejects(
      pool.run({ kind: 'fax-pages', pdf, first: 0, count: 5, quality: 'hd' }, { timeoutMs: 5 }),
      (e: unknown) => e instanceof DocumentError && e.code === 'render_timeout',
    );
    const ac = new AbortController();
    const aborted = pool.run(
      { kind: 'fax-pages', pdf, first: 0, count: 5, quality: 'hd' },
      {
        timeoutMs: 60_000,
        signal: ac.signal,
      },
    );
    ac.abort(new Error('shutting down'));
    await assert.rejects(aborted, /shutting down/);
    const r = await pool.run(
      { kind: 'fax-pages', pdf, first: 4, count: 1, quality: 'low' },
      { timeoutMs: 30_000 },
    );
    assert.equal(r.kind === 'fax-pages' && r.pages.length, 1);
  });
});
