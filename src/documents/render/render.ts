// From PDFs to one fax document: every page of every PDF, in order, rendered in the render
// processes at the job's quality and written as one multi-page TIFF Class F (MMR). The fax has a
// budget of render time and of TIFF bytes, counted page by page as pages arrive; the first failure
// of any task (a limit, a broken page) stops every other task of the fax at once.
import { DocumentError } from '../errors.ts';
import { headerPdf, headerTexts, type HeaderLine } from '../header.ts';
import { discardPages, readPages, renderCodes, type RenderPool } from './pool.ts';
import type { CoverValues } from '../cover-layout.ts';
import type { EncodedPage, PageMeta, RenderSource } from './protocol.ts';
import { X_DPI, Y_DPI, type Quality } from './raster.ts';
import { writeTiffClassF } from './tiff.ts';

export interface RenderInput {
  name: string;
  /** The PDF (empty for the drawn cover). */
  bytes: Uint8Array;
  /** The drawn cover's values: set onto its page by the render process, without a PDF. */
  drawn?: CoverValues;
  /** Page count from the PDF check, used to split large documents over the processes. */
  pages: number;
}

export interface RenderedFax {
  /** The whole job as TIFF Class F, T.6 compressed, one IFD per page. */
  tiff: Buffer;
  pageCount: number;
  /** Compressed size of each page: what goes on the line. */
  pageBytes: number[];
  /** Render CPU time of all the pages, in milliseconds (the render processes', as they count it). */
  renderMs: number;
}

export interface RenderFaxOptions {
  /** Whose fax this is (fair share of the pool between accounts). */
  accountId?: string;
  /** The header line drawn at the top of every page (page n of the whole fax), or none. */
  header?: HeaderLine | null;
}

/**
 * Pages of one render task at most: while one account's long document renders, another account's
 * task waits for at most one such chunk (with one render process) or not at all (with more: the
 * pool keeps a process free for another account).
 */
export const MAX_PAGES_PER_TASK = 8;

/** What the render process draws for an input: its PDF, or the drawn cover from its values. */
export const renderSource = (d: RenderInput): RenderSource =>
  d.drawn ? { cover: d.drawn } : { pdf: d.bytes };

export async function renderFax(
  pool: RenderPool,
  docs: RenderInput[],
  quality: Quality,
  signal?: AbortSignal,
  o: RenderFaxOptions = {},
): Promise<RenderedFax> {
  const r = await renderPages(pool, docs, quality, signal, o);
  return assembleFax(r.pages, quality, r.renderMs);
}

/** Encoded pages (in order) as the fax: one TIFF Class F at the quality's resolution. */
export function assembleFax(pages: EncodedPage[], quality: Quality, renderMs: number): RenderedFax {
  const yDpi = Y_DPI[quality];
  const tiff = writeTiffClassF(pages.map((p) => ({ ...p, xDpi: X_DPI, yDpi })));
  return { tiff, pageCount: pages.length, pageBytes: pages.map((p) => p.data.length), renderMs };
}

/**
 * Every page of `docs`, in order, encoded for the line, and their render CPU time; the fax's budgets
 * apply to these pages (a broadcast renders its documents once with this, and each recipient's
 * cover alone).
 */
export async function renderPages(
  pool: RenderPool,
  docs: RenderInput[],
  quality: Quality,
  signal?: AbortSignal,
  o: RenderFaxOptions = {},
): Promise<{ pages: EncodedPage[]; renderMs: number }> {
  const { faxTimeoutMs, maxTiffBytes } = pool.limits;
  // Aborted by the caller (shutdown), or by the first failure: stops the fax's other tasks.
  const stop = new AbortController();
  const onAbort = () => stop.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  if (signal?.aborted) onAbort();
  let spentMs = 0;
  let bytes = 0;
  // The tasks' page files: read once every task has succeeded, discarded when the fax fails (a fax
  // that fails on its image size never has its bytes in this process).
  const chunks: Promise<{ pages: PageMeta[]; file: string }>[] = [];
  const totalPages = docs.reduce((n, d) => n + d.pages, 0);
  let offset = 0; // fax page index of the document's first page
  for (const d of docs) {
    // Documents are split into short tasks, so that another account's task never waits long for a
    // process; each task opens the document afresh, so at most MAX_PAGES_PER_TASK pages' worth of
    // PDFium's caches build up in a process between two recycling checks.
    const per = MAX_PAGES_PER_TASK;
    const onPage = (page: PageMeta, ms: number) => {
      spentMs += ms;
      bytes += page.size;
      if (bytes > maxTiffBytes)
        throw new DocumentError(
          renderCodes.tooLarge,
          `the fax image grew past ${maxTiffBytes} bytes (the pages compress badly, e.g. noise or photos)`,
        );
      if (spentMs > faxTimeoutMs)
        throw new DocumentError(
          renderCodes.timeout,
          `the fax took more than ${faxTimeoutMs / 1000} s of render (CPU) time in all`,
        );
    };
    for (let first = 0; first < d.pages; first += per) {
      const count = Math.min(per, d.pages - first);
      const h = o.header;
      const pageOffset = offset;
      chunks.push(
        (h ? headerPdf(headerTexts(h, pageOffset + first, count, totalPages)) : Promise.resolve(undefined))
          .then((header) =>
            pool.run(
              {
                kind: 'fax-pages',
                ...renderSource(d),
                first,
                count,
                quality,
                ...(header ? { header } : {}),
              },
              {
                signal: stop.signal,
                onPage,
                ...(o.accountId !== undefined ? { accountId: o.accountId } : {}),
              },
            ),
          )
          .then((r) => {
            if (r.kind !== 'fax-pages') throw new Error('unexpected render result');
            if (r.pageCount !== d.pages) {
              void discardPages(r);
              throw new DocumentError(
                'pdf_broken',
                `${d.name}: the PDF's page tree is inconsistent (${d.pages} pages counted, ${r.pageCount} renderable)`,
              );
            }
            return r;
          })
          .catch((err: unknown) => {
            if (stop.signal.aborted && err === stop.signal.reason) throw err; // another task's end
            const e =
              err instanceof DocumentError && !err.message.startsWith(`${d.name}:`)
                ? new DocumentError(err.code, `${d.name}: ${err.message}`)
                : (err as Error);
            stop.abort(e);
            throw e;
          }),
      );
    }
    offset += d.pages;
  }
  try {
    const done = await Promise.all(chunks);
    return { pages: (await Promise.all(done.map(readPages))).flat(), renderMs: spentMs };
  } catch (err) {
    // Every task has ended or is being stopped; the files of those that finished are not wanted.
    void Promise.allSettled(chunks).then((all) => {
      for (const c of all) if (c.status === 'fulfilled') void discardPages(c.value);
    });
    throw err;
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
}
