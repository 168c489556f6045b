// PDFium (WebAssembly, @embedpdf/pdfium) behind a small interface: open a PDF from bytes, render one
// page onto a fax page as packed bilevel rows. Runs inside a render worker thread; nothing here
// touches the event loop of the service.
import { init, type WrappedPdfiumModule } from '@embedpdf/pdfium';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { FAX_WIDTH, headerRows, place, toBilevel, Y_DPI, type Placement, type Quality } from './raster.ts';

/** A failure of the document itself (not of the machine): shown on the job, never retried. */
export class RenderError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = 'RenderError';
    this.code = code;
  }
}

// PDFium's FPDF_GetLastError values.
const LOAD_ERRORS: Record<number, [string, string]> = {
  1: ['pdf_broken', 'the PDF cannot be read (unknown error)'],
  2: ['pdf_broken', 'the PDF cannot be read (file error)'],
  3: ['pdf_broken', 'the PDF cannot be read (broken structure)'],
  4: ['pdf_encrypted', 'the PDF is encrypted'],
  5: ['pdf_encrypted', 'the PDF uses an unsupported security handler'],
  6: ['pdf_broken', 'the PDF cannot be read (page not found or broken)'],
};

// FPDF_RenderPageBitmap flags (fpdfview.h).
const FPDF_ANNOT = 0x01;
const FPDF_RENDER_LIMITEDIMAGECACHE = 0x200;
const FPDF_PRINTING = 0x800;
const FPDF_RENDER_NO_SMOOTHTEXT = 0x1000;
// Text is drawn without smoothing (crisp glyphs, pure black). Paths are smoothed: a rule thinner than
// a pixel row then shows as a grey row, which the binarisation keeps as a stroke (raster.ts), where
// an unsmoothed one vanishes whenever it misses the pixel centres (a 0.25 pt rule at 98 rows/in).
const RENDER_FLAGS = FPDF_ANNOT | FPDF_RENDER_LIMITEDIMAGECACHE | FPDF_PRINTING | FPDF_RENDER_NO_SMOOTHTEXT;
const FPDFBitmap_Gray = 1;

export interface RenderedPage {
  /** Packed rows, 1 = black, (width / 8) bytes each. */
  rows: Uint8Array;
  width: number;
  height: number;
  placement: Placement;
}

/** A page of another document drawn in the header band of the page rendered (the header line). */
export interface HeaderSource {
  doc: OpenDocument;
  index: number;
}

export interface OpenDocument {
  readonly pageCount: number;
  /**
   * With `reuse`, the rows are written into that buffer when it is large enough. With `header`, that
   * page is drawn across the band at the top and this page is fitted below it.
   */
  render(index: number, quality: Quality, reuse?: Uint8Array, header?: HeaderSource): RenderedPage;
  /** Draws page `index` stretched onto the box (x, y, w, h) of a bitmap (PDFium handles). */
  drawOn(bitmap: number, index: number, x: number, y: number, w: number, h: number): void;
  /**
   * A page's size in points as PDFium sees it, without parsing its content: /Rotate applied, a
   * missing or unreadable MediaBox defaulted to Letter (612 x 792), as PDFium does. Null when PDFium
   * cannot find the page in the page tree.
   */
  pageSize(index: number): { width: number; height: number } | null;
  /** The text PDFium extracts from a page (used by tests to read what a cover says). */
  text(index: number): string;
  /**
   * Each character of a page's text as PDFium lays it out: its code point and its origin in points
   * (characters PDFium adds between text objects, such as line breaks, are left out).
   */
  charOrigins(index: number): { cp: number; x: number; y: number }[];
  close(): void;
}

export class Pdfium {
  private readonly m: WrappedPdfiumModule;
  private constructor(m: WrappedPdfiumModule) {
    this.m = m;
  }

  static async load(): Promise<Pdfium> {
    const wasm = await readFile(fileURLToPath(import.meta.resolve('@embedpdf/pdfium/pdfium.wasm')));
    const m = await init({ wasmBinary: wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.length) });
    m.PDFiumExt_Init();
    return new Pdfium(m);
  }

  open(bytes: Uint8Array): OpenDocument {
    const { m } = this;
    // The module's memory view (replaced when the WebAssembly memory grows, so read it each time).
    const heap = () => (m.pdfium as unknown as { HEAPU8: Uint8Array }).HEAPU8;
    const mem = m.pdfium.wasmExports.malloc(bytes.length);
    if (!mem) throw new RenderError('pdf_too_large', 'the PDF does not fit in the renderer’s memory');
    heap().set(bytes, mem);
    const doc = m.FPDF_LoadMemDocument(mem, bytes.length, '');
    if (!doc) {
      const err = m.FPDF_GetLastError();
      m.pdfium.wasmExports.free(mem);
      const [code, message] = LOAD_ERRORS[err] ?? ['pdf_broken', `the PDF cannot be read (error ${err})`];
      throw new RenderError(code, message);
    }
    const pageCount = m.FPDF_GetPageCount(doc);
    let closed = false;
    return {
      pageCount,
      drawOn: (bitmap, index, x, y, w, h) => {
        const page = m.FPDF_LoadPage(doc, index);
        if (!page) throw new RenderError('render_failed', `header line page ${index + 1} cannot be read`);
        try {
          m.FPDF_RenderPageBitmap(bitmap, page, x, y, w, h, 0, RENDER_FLAGS);
        } finally {
          m.FPDF_ClosePage(page);
        }
      },
      render: (index, quality, reuse, header) => {
        const page = m.FPDF_LoadPage(doc, index);
        if (!page) throw new RenderError('pdf_broken', `page ${index + 1} cannot be read`);
        let bmp = 0;
        try {
          const band = header ? headerRows(quality) : 0;
          // Width and height as displayed: PDFium applies the page's /Rotate here.
          const pl = place(m.FPDF_GetPageWidthF(page), m.FPDF_GetPageHeightF(page), quality, band);
          bmp = m.FPDFBitmap_CreateEx(pl.width, pl.height, FPDFBitmap_Gray, 0, 0);
          if (!bmp) throw new RenderError('render_failed', `page ${index + 1}: no memory for the image`);
          m.FPDFBitmap_FillRect(bmp, 0, 0, pl.width, pl.height, 0xffffffff);
          if (header) header.doc.drawOn(bmp, header.index, 0, 0, FAX_WIDTH, band);
          m.FPDF_RenderPageBitmap(bmp, page, pl.x, pl.y, pl.w, pl.h, pl.rotate, RENDER_FLAGS);
          const stride = m.FPDFBitmap_GetStride(bmp);
          const buf = m.FPDFBitmap_GetBuffer(bmp);
          const gray = heap().subarray(buf, buf + stride * pl.height);
          return {
            rows: toBilevel(gray, pl.width, pl.height, stride, reuse, Y_DPI[quality]),
            width: pl.width,
            height: pl.height,
            placement: pl,
          };
        } finally {
          if (bmp) m.FPDFBitmap_Destroy(bmp);
          m.FPDF_ClosePage(page);
        }
      },
      pageSize: (index) => {
        const out = m.pdfium.wasmExports.malloc(16);
        try {
          if (!m.FPDF_GetPageSizeByIndex(doc, index, out, out + 8)) return null;
          const h = heap();
          const view = new DataView(h.buffer, h.byteOffset + out, 16);
          return { width: view.getFloat64(0, true), height: view.getFloat64(8, true) };
        } finally {
          m.pdfium.wasmExports.free(out);
        }
      },
      text: (index) => {
        const page = m.FPDF_LoadPage(doc, index);
        if (!page) throw new RenderError('pdf_broken', `page ${index + 1} cannot be read`);
        const tp = m.FPDFText_LoadPage(page);
        try {
          const n = m.FPDFText_CountChars(tp);
          const out = m.pdfium.wasmExports.malloc((n + 1) * 2);
          try {
            m.FPDFText_GetText(tp, 0, n, out);
            return Buffer.from(heap().slice(out, out + n * 2)).toString('utf16le');
          } finally {
            m.pdfium.wasmExports.free(out);
          }
        } finally {
          m.FPDFText_ClosePage(tp);
          m.FPDF_ClosePage(page);
        }
      },
      charOrigins: (index) => {
        const page = m.FPDF_LoadPage(doc, index);
        if (!page) throw new RenderError('pdf_broken', `page ${index + 1} cannot be read`);
        const tp = m.FPDFText_LoadPage(page);
        const out = m.pdfium.wasmExports.malloc(16);
        try {
          const chars: { cp: number; x: number; y: number }[] = [];
          const n = m.FPDFText_CountChars(tp);
          for (let i = 0; i < n; i++) {
            if (m.FPDFText_IsGenerated(tp, i) === 1 || !m.FPDFText_GetCharOrigin(tp, i, out, out + 8))
              continue;
            const h = heap();
            const view = new DataView(h.buffer, h.byteOffset + out, 16);
            chars.push({
              cp: m.FPDFText_GetUnicode(tp, i),
              x: view.getFloat64(0, true),
              y: view.getFloat64(8, true),
            });
          }
          return chars;
        } finally {
          m.pdfium.wasmExports.free(out);
          m.FPDFText_ClosePage(tp);
          m.FPDF_ClosePage(page);
        }
      },
      close: () => {
        if (closed) return;
        closed = true;
        m.FPDF_CloseDocument(doc);
        m.pdfium.wasmExports.free(mem);
      },
    };
  }
}
