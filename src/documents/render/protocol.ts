// Messages between the render pool and its worker threads.
import type { Quality } from './raster.ts';

export type RenderTask =
  /** Render pages [first, first + count) of a PDF to T.6-compressed fax pages. */
  | { kind: 'fax-pages'; pdf: Uint8Array; first: number; count: number; quality: Quality }
  /** Render one page (from 0) to packed bilevel rows, for previews. */
  | { kind: 'page-image'; pdf: Uint8Array; page: number; quality: Quality };

export interface EncodedPage {
  data: Uint8Array;
  width: number;
  height: number;
}

export type RenderResult =
  | { kind: 'fax-pages'; pageCount: number; pages: EncodedPage[] }
  | { kind: 'page-image'; pageCount: number; rows: Uint8Array; width: number; height: number };

export type WorkerReply =
  | { id: number; ok: true; result: RenderResult }
  /** `code` is set when the document itself is at fault (a permanent failure of the job). */
  | { id: number; ok: false; code: string | null; message: string };
