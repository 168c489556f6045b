// Fax images for the SIP tests: real PDFs from test/fixtures rendered by faxline's own renderer at a
// quality into a TIFF Class F file (what a send worker puts on the line), and libtiff's `tiffcmp` as
// the independent judge that a received TIFF holds the same pages, pixel for pixel.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PDFDocument } from 'pdf-lib';
import { RenderPool } from '../../../src/documents/render/pool.ts';
import type { Quality } from '../../../src/documents/render/raster.ts';
import { renderFax } from '../../../src/documents/render/render.ts';
import { requireTool } from './tools.ts';

export const fixturePdf = (name: string): Buffer =>
  readFileSync(new URL(`../../fixtures/${name}`, import.meta.url));

export interface FaxFile {
  path: string;
  pages: number;
  quality: Quality;
}

/** Renders the PDFs (file names in test/fixtures) at `quality` into `dir`/`name`. */
export async function renderFaxFile(
  pool: RenderPool,
  dir: string,
  name: string,
  quality: Quality,
  pdfs: string[],
): Promise<FaxFile> {
  const docs = await Promise.all(
    pdfs.map(async (file) => {
      const bytes = fixturePdf(file);
      return { name: file, bytes, pages: (await PDFDocument.load(bytes)).getPageCount() };
    }),
  );
  const fax = await renderFax(pool, docs, quality);
  const path = join(dir, name);
  writeFileSync(path, fax.tiff);
  return { path, pages: fax.pageCount, quality };
}

/** A render pool of one process for a test file (close it in `after`). */
export const testRenderPool = (): RenderPool => new RenderPool({ size: 1 });

/**
 * `tiffcmp` of the sent and the received file: same page count, same size and resolution per page,
 * same decoded pixels (compression may differ: the receiver writes what came over the line).
 * Returns tiffcmp's report ('' when identical).
 */
export function tiffDifferences(sent: string, received: string): string {
  const bin = requireTool('tiffcmp');
  const r = spawnSync(bin, [sent, received], { encoding: 'utf8', timeout: 60_000 });
  if (r.error) throw r.error;
  if (r.status === 0) return '';
  return `tiffcmp exit ${r.status}: ${(r.stdout + r.stderr).trim().slice(0, 2_000)}`;
}
