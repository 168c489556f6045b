// The header line (issue 21, item 2): templates checked, filled in per page, and drawn by the real
// render processes in a band at the top of every page at each quality, the page's content fitted
// below it (nothing covered, nothing cut), read back with libtiff.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PDFDocument, rgb } from 'pdf-lib';
import { fillHeaderLine, headerDateTime, headerLineProblem } from '../src/domain/header-line.ts';
import { headerLineOf, headerPdf, headerTexts, type HeaderLine } from '../src/documents/header.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import { FAX_WIDTH, headerRows, place, type Quality } from '../src/documents/render/raster.ts';
import { renderFax } from '../src/documents/render/render.ts';
import { decodeWithLibtiff, type RawPage } from './support/render-tiff.ts';

/** A Letter page, white but for a 10 pt black bar along its top edge and another along its bottom. */
async function barsPdf(pages = 1): Promise<Uint8Array> {
  const doc = await PDFDocument.create();
  for (let i = 0; i < pages; i++) {
    const p = doc.addPage([612, 792]);
    p.drawRectangle({ x: 0, y: 782, width: 612, height: 10, color: rgb(0, 0, 0) });
    p.drawRectangle({ x: 0, y: 0, width: 612, height: 10, color: rgb(0, 0, 0) });
  }
  return doc.save();
}

const black = (p: RawPage, x: number, y: number) =>
  ((p.rows[y * Math.ceil(p.width / 8) + (x >> 3)]! >> (7 - (x & 7))) & 1) === 1;
/** Black pixels of rows [from, to). */
function ink(p: RawPage, from: number, to: number): number {
  let n = 0;
  const rb = Math.ceil(p.width / 8);
  for (let i = from * rb; i < to * rb; i++) n += p.rows[i]!.toString(2).replace(/0/g, '').length;
  return n;
}
/** Rows of [from, to) with any black pixel. */
function inkedRows(p: RawPage, from: number, to: number): number {
  let n = 0;
  for (let y = from; y < to; y++) if (ink(p, y, y + 1) > 0) n++;
  return n;
}

const header: HeaderLine = {
  template: 'FROM {sender_name} {sender_number} {date} {time} TO {to_name} {to_number} PAGE {page}/{pages}',
  values: {
    sender_name: 'Demo Clinic',
    sender_number: '+15550001111',
    to_name: 'Dr. Ada Moreau',
    to_number: '+15551234567',
    date: '2026-11-26',
    time: '19:30 UTC',
  },
};

describe('header line templates (pure)', () => {
  it('accepts the documented placeholders and refuses unknown ones by name', () => {
    assert.equal(headerLineProblem(header.template), null);
    assert.match(headerLineProblem('From {sender} page {page}')!, /unknown placeholder \{sender\};/);
    assert.match(headerLineProblem('{Page} {x y}')!, /unknown placeholders \{Page\}, \{x y\}/);
    assert.match(headerLineProblem('page {page')!, /\{ at position 6 without its \}/);
    assert.match(headerLineProblem('page page}')!, /\} at position 10 without its \{/);
    assert.match(headerLineProblem('x'.repeat(121))!, /longer than 120 characters/);
    assert.match(headerLineProblem('two\nlines')!, /one line/);
  });

  it('fills page n of m and the values, in the account time zone', () => {
    assert.equal(fillHeaderLine('{page}/{pages}  {to_name}', header.values, 2, 9), '2/9 Dr. Ada Moreau');
    const at = new Date('2026-11-26T23:30:00Z');
    assert.deepEqual(headerDateTime(at, 'Europe/Paris'), { date: '2026-11-27', time: '00:30 GMT+1' });
    assert.deepEqual(headerDateTime(at, 'America/New_York'), { date: '2026-11-26', time: '18:30 EST' });
    assert.deepEqual(headerDateTime(at, 'No/Such_Zone'), { date: '2026-11-26', time: '23:30 UTC' });
    assert.deepEqual(headerTexts({ template: 'p {page} of {pages}', values: header.values }, 3, 2, 7), [
      'p 4 of 7',
      'p 5 of 7',
    ]);
    const ctx = {
      timeZone: 'UTC',
      faxDefault: null,
      smartTemplate: null,
      faxNumber: '+1',
      callerId: '+2',
      options: {},
    };
    assert.equal(headerLineOf(ctx, at), null, 'no Fax Default: no header line');
  });

  it('fits the band: the content of a Letter page is scaled below it, centred, uncut', () => {
    for (const q of ['low', 'standard', 'hd'] as Quality[]) {
      const band = headerRows(q);
      const pl = place(612, 792, q, band);
      assert.equal(pl.y, band, q);
      assert.equal(pl.y + pl.h, pl.height, `${q}: the page ends on the last row`);
      assert.ok(pl.w < FAX_WIDTH && pl.x > 0, q);
    }
  });
});

describe('header line drawn by the render processes', () => {
  let pool: RenderPool;
  before(() => {
    pool = new RenderPool(1);
  });
  after(async () => {
    await pool.close();
  });

  for (const quality of ['low', 'standard', 'hd'] as Quality[]) {
    it(`is drawn on top of every page at ${quality}, the page's bars intact below it`, async () => {
      const pdf = await barsPdf(2);
      const docs = [{ name: 'bars.pdf', bytes: pdf, pages: 2 }];
      const plain = decodeWithLibtiff((await renderFax(pool, docs, quality)).tiff);
      const withHeader = decodeWithLibtiff(
        (await renderFax(pool, docs, quality, undefined, { header })).tiff,
      );
      const band = headerRows(quality);
      assert.equal(withHeader.length, 2);
      for (const [i, p] of withHeader.entries()) {
        const q = plain[i]!;
        assert.deepEqual([p.width, p.height], [q.width, q.height], 'same paper');
        // Without the header the page's top bar lies where the band is (drawn over it, it would be
        // covered); with the header, the band holds text and the bar is below it.
        const firstBlack = Array.from({ length: band }, (_, y) => y).find((y) => black(q, 864, y));
        assert.ok(
          firstBlack !== undefined && firstBlack < band / 4,
          `plain: the top bar starts on row ${firstBlack}`,
        );
        const bandInk = ink(p, 0, band);
        assert.ok(bandInk > 300, `${quality}: header ink ${bandInk}`);
        assert.notDeepEqual(p.rows.subarray(0, band * 216), q.rows.subarray(0, band * 216));
        for (let y = 0; y < band; y++)
          assert.ok(ink(p, y, y + 1) < FAX_WIDTH / 2, `row ${y} is text, not the bar`);
        // Legible: the capitals are at least 8 rows tall even at 98 lines per inch.
        assert.ok(inkedRows(p, 0, band) >= 8, `${quality}: ${inkedRows(p, 0, band)} rows of text`);
        // Nothing covered or cut: the top bar starts right below the band, the bottom bar ends on the last row.
        assert.ok(black(p, 864, band + 1), `${quality}: the top bar is below the band`);
        assert.ok(black(p, 864, p.height - 1), `${quality}: the bottom bar survives`);
        assert.ok(!black(p, 864, Math.round(p.height / 2)), 'the middle of the page is white');
      }
      // Page 1 and page 2 differ in their header ("PAGE 1/2", "PAGE 2/2") and only there.
      const [a, b] = withHeader as [RawPage, RawPage];
      assert.notDeepEqual(a.rows.subarray(0, band * 216), b.rows.subarray(0, band * 216));
      assert.deepEqual(a.rows.subarray(band * 216), b.rows.subarray(band * 216));
    });
  }

  it('cuts a text too long for the line instead of overflowing, and draws a one-page preview header', async () => {
    const long = await headerPdf(['W'.repeat(400)]);
    const img = await pool.run({
      kind: 'page-image',
      pdf: await barsPdf(1),
      page: 0,
      quality: 'low',
      header: long,
    });
    assert.equal(img.kind, 'page-image');
    if (img.kind !== 'page-image') return;
    const p: RawPage = { width: img.width, height: img.height, tags: new Map(), rows: img.rows };
    // The right margin stays white: the text was fitted to the line.
    for (let y = 0; y < headerRows('low'); y++)
      for (let x = FAX_WIDTH - 20; x < FAX_WIDTH; x++) assert.ok(!black(p, x, y), `(${x}, ${y}) is white`);
    assert.ok(ink(p, 0, headerRows('low')) > 1000);
  });
});
