// Writes before/after crops of corpus pages as PNG (docs/documents-rendering.md shows them): the
// page rendered at `standard` by this tree's renderer and by another tree's (`before=<checkout>`).
//
//   node bench/line-images.ts before=/work/main [out=docs/images] [full=1]
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { bilevelToPng } from '../src/documents/render/png.ts';
import { X_DPI, Y_DPI, type Quality } from '../src/documents/render/raster.ts';

const args = Object.fromEntries(process.argv.slice(2).map((a) => a.split('=') as [string, string]));
const outDir = args.out ?? new URL('../docs/images/', import.meta.url).pathname;
const q: Quality = (args.quality as Quality | undefined) ?? 'standard';

interface Engine {
  open(bytes: Uint8Array): {
    render(i: number, q: Quality): { rows: Uint8Array; width: number; height: number };
    close(): void;
  };
}
async function loadEngine(root: string): Promise<Engine> {
  const m = (await import(join(root, 'src/documents/render/engine.ts'))) as {
    Pdfium: { load(): Promise<Engine> };
  };
  return m.Pdfium.load();
}

/** Rows [y0, y0 + h) and columns [x0, x0 + w) of packed rows, as packed rows. */
function crop(rows: Uint8Array, width: number, x0: number, y0: number, w: number, h: number): Uint8Array {
  const rb = (width + 7) >> 3;
  const ob = (w + 7) >> 3;
  const out = new Uint8Array(ob * h);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++)
      if ((rows[(y0 + y) * rb + ((x0 + x) >> 3)]! >> (7 - ((x0 + x) & 7))) & 1)
        out[y * ob + (x >> 3)]! |= 0x80 >> (x & 7);
  return out;
}

/** Page, and the crop (in pixels at 204 dpi across, rows at the quality) shown of it. */
const shots: { name: string; doc: string; page: number; x: number; y: number; w: number; h: number }[] = [
  { name: 'text', doc: 'letters.pdf', page: 0, x: 60, y: 0, w: 860, h: 700 },
  { name: 'form', doc: 'forms.pdf', page: 0, x: 420, y: 230, w: 860, h: 700 },
  { name: 'colour', doc: 'timetables.pdf', page: 0, x: 60, y: 0, w: 860, h: 700 },
  { name: 'photo', doc: 'photos.pdf', page: 0, x: 100, y: 80, w: 860, h: 900 },
];
const trees: [string, string][] = [['after', new URL('..', import.meta.url).pathname]];
if (args.before) trees.push(['before', args.before]);
for (const [label, root] of trees) {
  const e = await loadEngine(root);
  for (const s of shots) {
    const d = e.open(readFileSync(new URL(`../test/fixtures/line-corpus/${s.doc}`, import.meta.url)));
    const p = d.render(s.page, q);
    d.close();
    const yScale = Y_DPI[q] / X_DPI;
    const full = args.full === '1';
    const [x, y, w, h] = full
      ? [0, 0, p.width, p.height]
      : [s.x, Math.round(s.y * yScale), s.w, Math.round(s.h * yScale)];
    const png = bilevelToPng(crop(p.rows, p.width, x, y, w, h), w, h, X_DPI, Y_DPI[q]);
    writeFileSync(join(outDir, `line-${s.name}-${label}.png`), png);
  }
}
