// Messages between the render pool (pool.ts) and its render processes (child.ts).
import type { CoverValues } from '../cover-layout.ts';
import type { Quality } from './raster.ts';

/**
 * What a task renders: a PDF's pages, or the drawn cover (one page, our own layout) from its values,
 * set straight onto the fax page (cover-raster.ts) without a PDF.
 */
export type RenderSource = { pdf: Uint8Array; cover?: undefined } | { cover: CoverValues; pdf?: undefined };

export type RenderTask =
  /**
   * Render pages [first, first + count) of a PDF to T.6-compressed fax pages. With `header` (a PDF
   * of `count` one-line pages, src/documents/header.ts), its page i is drawn in the band at the top
   * of page first + i, and the page's content is fitted below it.
   */
  | ({
      kind: 'fax-pages';
      first: number;
      count: number;
      quality: Quality;
      header?: Uint8Array;
    } & RenderSource)
  /** Render one page (from 0) to packed bilevel rows, for previews; `header`: a one-page header PDF. */
  | ({ kind: 'page-image'; page: number; quality: Quality; header?: Uint8Array } & RenderSource);

export interface EncodedPage {
  data: Uint8Array;
  width: number;
  height: number;
}

/** What the render process says of a fax page it wrote to the task's file: its size in bytes. */
export interface PageMeta {
  size: number;
  width: number;
  height: number;
  /**
   * The page itself, for the drawn cover (a few KB of our own making, never a customer's page):
   * sent with its size instead of through the task's file, which is then not written.
   */
  data?: Uint8Array;
}

export type RenderResult =
  /**
   * `file` holds the pages' T.6 data one after the other (`pages` gives their sizes): the caller reads
   * it (readPages) or leaves it (discardPages); the pool removes it with its directory at close.
   */
  | { kind: 'fax-pages'; pageCount: number; pages: PageMeta[]; file: string }
  | { kind: 'page-image'; pageCount: number; rows: Uint8Array; width: number; height: number };

/**
 * Parent → child: one task at a time. A fax-pages task writes its pages to the file `out` (created
 * by the child), never through the IPC channel: the parent's event loop then neither copies nor
 * collects the bytes of a fax that fails (a hostile one reaches FAX_MAX_TIFF_BYTES, 64 MiB), and
 * reads those of a fax that succeeds once, off its thread.
 */
export interface RenderRequest {
  id: number;
  task: RenderTask;
  out?: string;
}

export type ChildReply =
  /** One fax page written (sent as each page is done, so the parent counts time and bytes per page). */
  | { id: number; page: PageMeta }
  /** The end of a task; a fax-pages result carries no pages (they came one by one). */
  | { id: number; ok: true; result: { kind: 'fax-pages'; pageCount: number } | RenderResultImage }
  /**
   * `code` is set when the document itself is at fault (a permanent failure of the job); `io` when
   * the output file could not be written (the machine's fault: a retryable error).
   */
  | { id: number; ok: false; code: string | null; message: string; io?: true };

type RenderResultImage = Extract<RenderResult, { kind: 'page-image' }>;
