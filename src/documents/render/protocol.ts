// Messages between the render pool (pool.ts) and its render processes (child.ts).
import type { Quality } from './raster.ts';

export type RenderTask =
  /**
   * Render pages [first, first + count) of a PDF to T.6-compressed fax pages. With `header` (a PDF
   * of `count` one-line pages, src/documents/header.ts), its page i is drawn in the band at the top
   * of page first + i, and the page's content is fitted below it.
   */
  | {
      kind: 'fax-pages';
      pdf: Uint8Array;
      first: number;
      count: number;
      quality: Quality;
      header?: Uint8Array;
    }
  /** Render one page (from 0) to packed bilevel rows, for previews; `header`: a one-page header PDF. */
  | { kind: 'page-image'; pdf: Uint8Array; page: number; quality: Quality; header?: Uint8Array };

export interface EncodedPage {
  data: Uint8Array;
  width: number;
  height: number;
}

export type RenderResult =
  | { kind: 'fax-pages'; pageCount: number; pages: EncodedPage[] }
  | { kind: 'page-image'; pageCount: number; rows: Uint8Array; width: number; height: number };

/** Parent → child: one task at a time. */
export interface RenderRequest {
  id: number;
  task: RenderTask;
}

export type ChildReply =
  /** One fax page encoded (sent as each page is done, so the parent counts time and bytes per page). */
  | { id: number; page: EncodedPage }
  /** The end of a task; a fax-pages result carries no pages (they came one by one). */
  | { id: number; ok: true; result: RenderResult }
  /** `code` is set when the document itself is at fault (a permanent failure of the job). */
  | { id: number; ok: false; code: string | null; message: string };
