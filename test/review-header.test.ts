// Security review: the header line template is customer input printed on every page. Names that
// only exist on Object.prototype are not placeholders, and the longest legal filled-in line is
// fitted in bounded time (the fitting once measured characters one by one: quadratic work per page).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import { fillHeaderLine, headerLineProblem } from '../src/domain/header-line.ts';
import { fitLine, headerPdf } from '../src/documents/header.ts';

const values = {
  sender_name: 'S',
  sender_number: '+15551230000',
  to_name: 'T',
  to_number: '+15551239999',
  date: 'D',
  time: 'H',
};

describe('header line: template checks and fitting', () => {
  it('refuses names inherited from Object.prototype and never prints them', () => {
    for (const t of ['{constructor}', '{__proto__}', 'x {constructor} y'])
      assert.match(headerLineProblem(t) ?? '', /unknown placeholder/, t);
    assert.equal(fillHeaderLine('{constructor}|{__proto__}', values, 1, 1), '{constructor}|{__proto__}');
  });

  it('fits the longest legal line quickly and the same way as before', async () => {
    const doc = await PDFDocument.create();
    const font = await doc.embedFont(StandardFonts.HelveticaBold);
    // 13 placeholders of a 200-character name: the most a 120-character template can draw.
    const long = fillHeaderLine('{to_name}'.repeat(13), { ...values, to_name: 'W'.repeat(200) }, 1, 1);
    assert.equal(long.length, 2600);
    const fitted = fitLine(font, long);
    assert.equal(fitted.size, 8);
    assert.ok(fitted.text.endsWith('…'));
    // The cut is the longest prefix that fits: one more character would not.
    const room = (1728 / 204) * 72 - 2 * 10.8;
    const kept = fitted.text.slice(0, -1);
    assert.ok(font.widthOfTextAtSize(fitted.text, 8) <= room);
    assert.ok(font.widthOfTextAtSize(`${long.slice(0, kept.length + 1)}…`, 8) > room);
    // Short text is untouched.
    assert.deepEqual(fitLine(font, 'page 1 of 2'), { text: 'page 1 of 2', size: 10 });
    const start = performance.now();
    await headerPdf(Array.from({ length: 20 }, () => long));
    const ms = performance.now() - start;
    assert.ok(ms < 1500, `20 header pages took ${Math.round(ms)} ms`);
  });
});
