// The drawn cover set straight onto the fax page (src/documents/render/cover-raster.ts, issue 33):
// it must be the page PDFium renders from the same cover drawn as a PDF, to within a pixel, at
// every quality, with and without a header line; and the render processes must give it as a fax
// page and as a preview image.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { coverValues, drawCoverPage, type CoverContext } from '../src/documents/cover.ts';
import { COVER_STYLES, coverFonts, layoutCover, type CoverValues } from '../src/documents/cover-layout.ts';
import { headerPdf } from '../src/documents/header.ts';
import { CoverPainter } from '../src/documents/render/cover-raster.ts';
import { Pdfium } from '../src/documents/render/engine.ts';
import { encodeT6 } from '../src/documents/render/g4.ts';
import { RenderPool, readPages } from '../src/documents/render/pool.ts';
import type { Quality } from '../src/documents/render/raster.ts';
import { benchCover } from '../bench/render-cover.ts';
import { nearShare } from './support/bilevel.ts';

// The bench's typical cover, with text that tests the fonts' edges: characters outside them, the
// few whose widths differ between pdf-lib and PDFium (€, «), and a message long enough to be cut.
const ctx: CoverContext = {
  ...benchCover,
  timeZone: 'America/New_York',
  faxDefault: {
    ...benchCover.faxDefault!,
    sender_company: 'Demo Clinic (Zoë & Søren) « € »',
    cover_footer:
      'CONFIDENTIAL: this fax is meant for the named recipient only. If you received it in error, call us.',
  },
  options: {
    recipient_name: 'Dr. Ada Moreau — Łódź 東京',
    subject: 'Referral: lab results {urgent} [#4471] ~ 100% ¶ § © ®',
    // Long enough to be shortened: the layout's every style (the note is bold 10 pt) is drawn.
    message: Array.from(
      { length: 60 },
      (_, i) => `Line ${i}: ÄÖÜ äöü ß çé €ÿ 0123456789 !"#$%&'()*+,-./:;<=>?@`,
    ).join('\n'),
  },
};
const values: CoverValues = coverValues(ctx, new Date('2026-11-26T14:30:00Z'), 4);

let pdfium: Pdfium;
let painter: CoverPainter;
before(async () => {
  pdfium = await Pdfium.load();
  painter = await CoverPainter.create(pdfium);
});

function compare(q: Quality, header: Uint8Array | null, pdf: Uint8Array) {
  const doc = pdfium.open(pdf);
  const head = header ? pdfium.open(header) : null;
  try {
    const h = head ? { doc: head, index: 0 } : undefined;
    const want = doc.render(0, q, undefined, h);
    const got = painter.paint(values, q, h);
    assert.equal(got.width, want.width);
    assert.equal(got.height, want.height);
    const a = nearShare(want.rows, got.rows, want.width, want.height);
    const b = nearShare(got.rows, want.rows, want.width, want.height);
    const label = `${q}${header ? ' with a header line' : ''}`;
    assert.ok(a.black > 20_000, `${label}: PDFium drew the cover (${a.black} black pixels)`);
    // Every pixel PDFium blackens has one of ours within a pixel, and the other way round.
    assert.ok(a.share >= 0.999, `${label}: ${(a.share * 100).toFixed(2)} % of PDFium's pixels are near ours`);
    assert.ok(b.share >= 0.999, `${label}: ${(b.share * 100).toFixed(2)} % of ours are near PDFium's`);
    assert.ok(Math.abs(a.black - b.black) / a.black < 0.02, `${label}: black ${b.black} against ${a.black}`);
    // And it costs the line what PDFium's page would.
    const want6 = encodeT6(want.rows, want.width, want.height).length;
    const got6 = encodeT6(got.rows, got.width, got.height).length;
    assert.ok(Math.abs(got6 - want6) / want6 < 0.03, `${label}: ${got6} bytes against ${want6}`);
  } finally {
    doc.close();
    head?.close();
  }
}

describe('the drawn cover set onto the fax page', () => {
  it('uses only the fonts and sizes it keeps glyphs of', async () => {
    const styles = new Set(COVER_STYLES.map(([f, s]) => `${f} ${s}`));
    const used = new Set(
      layoutCover(values, await coverFonts()).flatMap((op) =>
        op.kind === 'text' ? [`${op.font} ${op.size}`] : [],
      ),
    );
    assert.deepEqual(
      [...used].filter((s) => !styles.has(s)),
      [],
    );
    assert.ok(used.has('bold 10'), 'the shortened message note is drawn');
  });

  for (const q of ['low', 'standard', 'hd'] as const)
    it(`matches PDFium's render of the cover as a PDF at ${q}, to within a pixel`, async () => {
      compare(q, null, await drawCoverPage(values));
    });

  it('matches it below a header line too', async () => {
    const header = await headerPdf(['Nov 26 2026 09:30 From: Demo Clinic +15550100001  Page 1 of 4']);
    compare('standard', header, await drawCoverPage(values));
  });

  it('shows each cover its own values', () => {
    const a = painter.paint(values, 'low');
    const rowsA = a.rows.slice();
    const b = painter.paint({ ...values, to_fax: '+15559990000' }, 'low');
    assert.notDeepEqual(b.rows, rowsA);
  });
});

describe('the drawn cover in the render processes', () => {
  let pool: RenderPool;
  before(() => {
    pool = new RenderPool(1);
  });
  after(async () => {
    await pool.close();
  });

  it('gives one fax page and a preview image of it, and no second page', async () => {
    const r = await pool.run({ kind: 'fax-pages', cover: values, first: 0, count: 1, quality: 'standard' });
    assert.equal(r.kind, 'fax-pages');
    if (r.kind !== 'fax-pages') return;
    assert.equal(r.pageCount, 1);
    const [page] = await readPages(r);
    assert.ok(page);
    const img = await pool.run({ kind: 'page-image', cover: values, page: 0, quality: 'standard' });
    assert.equal(img.kind, 'page-image');
    if (img.kind !== 'page-image') return;
    assert.deepEqual(Buffer.from(encodeT6(img.rows, img.width, img.height)), Buffer.from(page.data));
    await assert.rejects(
      pool.run({ kind: 'page-image', cover: values, page: 1, quality: 'standard' }),
      /1 page/,
    );
  });
});
