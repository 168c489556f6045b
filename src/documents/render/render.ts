// From PDFs to one fax document: every page of every PDF, in order, rendered in the worker pool at
// the job's quality and written as one multi-page TIFF Class F (MMR).
import { DocumentError } from '../errors.ts';
import type { RenderPool } from './pool.ts';
import type { EncodedPage } from './protocol.ts';
import { X_DPI, Y_DPI, type Quality } from './raster.ts';
import { writeTiffClassF } from './tiff.ts';

export interface RenderInput {
  name: string;
  bytes: Uint8Array;
  /** Page count from the PDF check, used to split large documents over the workers. */
  pages: number;
}

export interface RenderedFax {
  /** The whole job as TIFF Class F, T.6 compressed, one IFD per page. */
  tiff: Buffer;
  pageCount: number;
  /** Compressed size of each page: what goes on the line. */
  pageBytes: number[];
}

/** Time allowed per page before the render is stopped (a pathological page). */
export const RENDER_MS_PER_PAGE = 20_000;
const RENDER_MS_BASE = 10_000;
const MAX_PAGES_PER_TASK = 40;

export async function renderFax(
  pool: RenderPool,
  docs: RenderInput[],
  quality: Quality,
  signal?: AbortSignal,
): Promise<RenderedFax> {
  const chunks: Promise<EncodedPage[]>[] = [];
  for (const d of docs) {
    // One copy of the PDF in shared memory serves every task: posting it to a worker shares it
    // instead of cloning it per task.
    const pdf = new Uint8Array(new SharedArrayBuffer(d.bytes.length));
    pdf.set(d.bytes);
    // Large documents are split so that every worker gets a share; small ones go whole.
    // Each task opens the document afresh, so at most MAX_PAGES_PER_TASK pages' worth of PDFium's
    // caches (fonts, images) build up in a worker's WebAssembly memory, which never shrinks.
    const per = Math.min(MAX_PAGES_PER_TASK, Math.max(8, Math.ceil(d.pages / pool.size)));
    for (let first = 0; first < d.pages; first += per) {
      const count = Math.min(per, d.pages - first);
      chunks.push(
        pool
          .run(
            { kind: 'fax-pages', pdf, first, count, quality },
            { timeoutMs: RENDER_MS_BASE + RENDER_MS_PER_PAGE * count, ...(signal ? { signal } : {}) },
          )
          .then((r) => {
            if (r.kind !== 'fax-pages') throw new Error('unexpected render result');
            if (r.pageCount !== d.pages)
              throw new DocumentError(
                'pdf_broken',
                `${d.name}: the PDF's page tree is inconsistent (${d.pages} pages counted, ${r.pageCount} renderable)`,
              );
            return r.pages;
          })
          .catch((err: unknown) => {
            if (err instanceof DocumentError && !err.message.startsWith(`${d.name}:`))
              throw new DocumentError(err.code, `${d.name}: ${err.message}`);
            throw err;
          }),
      );
    }
  }
  const pages = (await Promise.all(chunks)).flat();
  const yDpi = Y_DPI[quality];
  const tiff = writeTiffClassF(pages.map((p) => ({ ...p, xDpi: X_DPI, yDpi })));
  return { tiff, pageCount: pages.length, pageBytes: pages.map((p) => p.data.length) };
}
