// The benchmark's document: 300 pages cycled from the real fixture PDFs (A4 text, Letter text with
// figures, an odd-size page with a raster chart), copied with pdf-lib.
import { readFileSync } from 'node:fs';
import { PDFDocument } from 'pdf-lib';

export const FIXTURES = ['a4-text-5p.pdf', 'letter-text-2p.pdf', 'odd-raster-1p.pdf'];

export async function buildCorpus(pages: number): Promise<Uint8Array> {
  const out = await PDFDocument.create();
  const sources = await Promise.all(
    FIXTURES.map(async (f) => {
      const bytes = readFileSync(new URL(`../test/fixtures/${f}`, import.meta.url));
      return PDFDocument.load(bytes, { updateMetadata: false });
    }),
  );
  const order = sources.flatMap((doc) => doc.getPageIndices().map((i) => [doc, i] as const));
  for (let n = 0; n < pages; n++) {
    const [doc, i] = order[n % order.length]!;
    const [p] = await out.copyPages(doc, [i]);
    out.addPage(p!);
  }
  return out.save();
}
