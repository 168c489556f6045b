// The drawn cover's cost (not a test; issue 33 item 4: the cover is on every fax). In this one
// process, on one core, at each quality, COVERS covers of the bench's typical values (each its own
// page count, so no two are the same), made two ways in the same run:
//   - as a PDF: drawn and saved with pdf-lib (drawCoverPage), opened and rendered by PDFium and
//     binarised (engine.ts), T.6-coded: what every fax paid before the cover was set from glyphs;
//   - set from glyphs (render/cover-raster.ts), T.6-coded: what a render process does now.
// CPU milliseconds a cover (process.cpuUsage), the coded bytes of both and how many of each one's
// black pixels have one of the other's within a pixel. Writes bench/results/cover-<time>.json and .md.
//
//   npm run bench:cover            (COVERS=300)
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { coverValues, drawCoverPage } from '../src/documents/cover.ts';
import { CoverPainter } from '../src/documents/render/cover-raster.ts';
import { Pdfium } from '../src/documents/render/engine.ts';
import { encodeT6 } from '../src/documents/render/g4.ts';
import type { Quality } from '../src/documents/render/raster.ts';
import { nearShare } from '../test/support/bilevel.ts';
import { benchCover } from './render-cover.ts';

const COVERS = Math.min(Math.max(Number(process.env.COVERS ?? 300), 10), 5000);
const round = (x: number, d = 2) => Number(x.toFixed(d));
const cpuMs = (f: () => Promise<void> | void) => async () => {
  const c0 = process.cpuUsage();
  await f();
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000;
};

async function main(): Promise<void> {
  const pdfium = await Pdfium.load();
  const painter = await CoverPainter.create(pdfium);
  const now = new Date();
  const values = (i: number) => coverValues(benchCover, now, 2 + i);
  const rows: Record<string, number | string>[] = [];
  for (const q of ['low', 'standard', 'hd'] as Quality[]) {
    // Warm-up: the first cover at a quality cuts that quality's glyphs.
    painter.paint(values(0), q);
    const doc = pdfium.open(await drawCoverPage(values(0)));
    doc.render(0, q);
    doc.close();

    let pdfBytes = 0;
    const asPdf = await cpuMs(async () => {
      for (let i = 0; i < COVERS; i++) {
        const d = pdfium.open(await drawCoverPage(values(i)));
        const p = d.render(0, q);
        pdfBytes = encodeT6(p.rows, p.width, p.height).length;
        d.close();
      }
    })();
    let glyphBytes = 0;
    const fromGlyphs = await cpuMs(() => {
      for (let i = 0; i < COVERS; i++) {
        const p = painter.paint(values(i), q);
        glyphBytes = encodeT6(p.rows, p.width, p.height).length;
      }
    })();
    const d = pdfium.open(await drawCoverPage(values(1)));
    const want = d.render(0, q);
    d.close();
    const got = painter.paint(values(1), q);
    rows.push({
      quality: q,
      pdf_ms: round(asPdf / COVERS),
      glyphs_ms: round(fromGlyphs / COVERS),
      ratio: round(asPdf / fromGlyphs, 1),
      pdf_bytes: pdfBytes,
      glyph_bytes: glyphBytes,
      pdfium_near_glyphs: round(nearShare(want.rows, got.rows, want.width, want.height).share, 4),
      glyphs_near_pdfium: round(nearShare(got.rows, want.rows, want.width, want.height).share, 4),
    });
  }
  const at = new Date().toISOString();
  const stamp = at.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
  const machine = `${cpus().length} CPUs (${cpus()[0]?.model.trim()}), load ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`;
  mkdirSync('bench/results', { recursive: true });
  writeFileSync(
    `bench/results/cover-${stamp}.json`,
    JSON.stringify({ at, covers: COVERS, machine, rows }, null, 2),
  );
  const md = [
    `# The drawn cover (${at})`,
    '',
    `\`npm run bench:cover\`: ${COVERS} covers at each quality on one core, ${machine}.`,
    '',
    '| quality | as a PDF, ms | from glyphs, ms | ratio | bytes (PDF / glyphs) | PDFium px near glyphs | glyph px near PDFium |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map(
      (r) =>
        `| ${r.quality} | ${r.pdf_ms} | ${r.glyphs_ms} | ${r.ratio} | ${r.pdf_bytes} / ${r.glyph_bytes} | ${r.pdfium_near_glyphs} | ${r.glyphs_near_pdfium} |`,
    ),
    '',
  ].join('\n');
  writeFileSync(`bench/results/cover-${stamp}.md`, md);
  console.log(md);
}

await main();
