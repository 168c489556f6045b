// The drawn cover straight onto a fax page, in a render process: the layout of cover-layout.ts, its
// text set from glyph images and its rules filled, then T.6 coded like any page. A cover drawn as a
// PDF cost every fax about 10 ms of CPU at standard (pdf-lib drawing and saving it, PDFium parsing
// and rendering it, the page binarised, T.6); this costs about 1.5 with its T.6 coding
// (docs/documents-rendering.md, "The drawn cover"; npm run bench:cover).
//
// The glyph images are PDFium's own: once per process and placement, a few sheets holding every
// character of both fonts at each size the layout uses are rendered like a page, and each glyph's
// black runs are kept, relative to its origin pixel. A cover then puts each glyph's runs at its own
// origin, rounded to a pixel, as PDFium places unsmoothed glyphs; the result matches PDFium's
// rendering of the same cover as a PDF to within a pixel (test/cover-raster.test.ts).
import { PDFDocument, StandardFonts, rgb } from 'pdf-lib';
import {
  COVER_STYLES,
  characterSet,
  coverFonts,
  layoutCover,
  LETTER,
  type CoverFont,
  type CoverFonts,
  type CoverValues,
} from '../cover-layout.ts';
import type { HeaderSource, Pdfium } from './engine.ts';
import { headerRows, place, type Placement, type Quality } from './raster.ts';

/** A glyph's black runs: (row, first column, end column) triples relative to its origin pixel. */
type Runs = Int16Array;

/** Where a sheet draws one glyph, in points. */
interface SheetCell {
  font: CoverFont;
  size: number;
  ch: string;
  page: number;
  x: number;
  y: number;
}

/**
 * The sheets' PDF (the same at every resolution: it is in points), where each glyph is on it, and,
 * on its last page, each font's characters in one line of text at 10 pt (`lines`: the order of the
 * fonts' lines), from which PDFium's own advance widths are read.
 */
interface Sheets {
  pdf: Uint8Array;
  cells: SheetCell[];
  lines: { font: CoverFont; chars: string[] }[];
}

/** The size of the lines the advances are read from. */
const ADVANCE_SIZE = 10;

const styleKey = (font: CoverFont, size: number) => `${font}:${size}`;

/** One PDF with every character of each style the layout uses, each in a cell of its own. */
async function drawSheets(): Promise<Sheets> {
  const doc = await PDFDocument.create();
  const fonts: CoverFonts = {
    regular: await doc.embedFont(StandardFonts.Helvetica),
    bold: await doc.embedFont(StandardFonts.HelveticaBold),
  };
  const cells: SheetCell[] = [];
  const [pw, ph] = LETTER;
  let page = doc.addPage(LETTER);
  let pageIndex = 0;
  let top = ph - 10; // the top of the next row of cells
  for (const [font, size] of COVER_STYLES) {
    // A cell is wider and taller than any glyph of the font (Helvetica's box: -0.17 to 1.0 em
    // across, -0.23 to 0.93 em up), so no glyph reaches into its neighbour's cell. Each style starts
    // a row of its own.
    const cw = size * 1.5;
    const chh = size * 1.6;
    let x = pw; // full: the first glyph starts a row
    for (const cp of characterSet(fonts[font])) {
      const ch = String.fromCodePoint(cp);
      if (ch.trim() === '') continue; // nothing to draw
      if (x + cw > pw - 10) {
        x = 10;
        top -= chh;
        if (top < 10) {
          page = doc.addPage(LETTER);
          pageIndex++;
          top = ph - 10 - chh;
        }
      }
      const ox = x + size * 0.25;
      const oy = top + size * 0.4;
      page.drawText(ch, { x: ox, y: oy, size, font: fonts[font], color: rgb(0, 0, 0) });
      cells.push({ font, size, ch, page: pageIndex, x: ox, y: oy });
      x += cw;
    }
  }
  // The advances: PDFium's widths are those of its own Helvetica, which differ from pdf-lib's (the
  // metrics the layout measures with) for a few characters (the euro sign, guillemets, quotes, Ÿ):
  // each glyph is set where PDFium would set it, so that the page reads as PDFium would draw it.
  const lines: Sheets['lines'] = [];
  const last = doc.addPage(LETTER);
  let y = ph - 20;
  for (const font of ['regular', 'bold'] as const) {
    const chars = [...characterSet(fonts[font])].map((cp) => String.fromCodePoint(cp));
    // Each character once, in lines short enough for the page, and a full stop to end each.
    for (let i = 0; i < chars.length; i += 40) {
      const part = chars.slice(i, i + 40);
      last.drawText(`${part.join('')}.`, { x: 10, y, size: ADVANCE_SIZE, font: fonts[font] });
      lines.push({ font, chars: part });
      y -= 14;
    }
  }
  return { pdf: await doc.save(), cells, lines };
}

/** Pixel position of a point of a Letter page placed by `pl` (PDF y grows upwards). */
const toX = (pl: Placement, x: number) => pl.x + (x * pl.w) / LETTER[0];
const toY = (pl: Placement, y: number) => pl.y + ((LETTER[1] - y) * pl.h) / LETTER[1];

/** The glyphs of every style at one placement: cut from the sheets as PDFium rendered them. */
interface Atlas {
  placement: Placement;
  rowBytes: number;
  /** Per style (styleKey), each character's runs. */
  glyphs: Map<string, Map<string, Runs>>;
}

export class CoverPainter {
  private readonly atlases = new Map<string, Atlas>();
  /** Advance widths in points per 1 pt of size, per font and character (PDFium's, else pdf-lib's). */
  private readonly advances: Record<CoverFont, Map<string, number>> = { regular: new Map(), bold: new Map() };
  private readonly pdfium: Pdfium;
  private readonly sheets: Sheets;
  private readonly fonts: CoverFonts;
  /** A blank one-page PDF: drawn with a header, it only makes room for the header band. */
  private readonly blank: Uint8Array;

  private constructor(pdfium: Pdfium, sheets: Sheets, fonts: CoverFonts, blank: Uint8Array) {
    this.pdfium = pdfium;
    this.sheets = sheets;
    this.fonts = fonts;
    this.blank = blank;
  }

  static async create(pdfium: Pdfium): Promise<CoverPainter> {
    const fonts = await coverFonts();
    const blankDoc = await PDFDocument.create();
    blankDoc.addPage(LETTER);
    const painter = new CoverPainter(pdfium, await drawSheets(), fonts, await blankDoc.save());
    painter.readAdvances();
    return painter;
  }

  /** PDFium's advance of each character, from the origins of the sheets' lines of text. */
  private readAdvances(): void {
    const doc = this.pdfium.open(this.sheets.pdf);
    try {
      const origins = doc.charOrigins(doc.pageCount - 1);
      let at = 0;
      for (const line of this.sheets.lines) {
        // The line's characters, then its full stop: each advance is the next origin's distance.
        for (const ch of line.chars) {
          const here = origins[at];
          const next = origins[at + 1];
          at++;
          if (!here || !next || here.cp !== ch.codePointAt(0) || next.y !== here.y) continue;
          this.advances[line.font].set(ch, (next.x - here.x) / ADVANCE_SIZE);
        }
        at++; // the full stop
      }
    } finally {
      doc.close();
    }
  }

  /**
   * The cover with `values` as packed bilevel rows (1 = black) at `quality`; with `header`, that page
   * is drawn in the band at the top and the cover fitted below it, as a PDF page would be.
   */
  paint(
    values: CoverValues,
    quality: Quality,
    header?: HeaderSource,
    reuse?: Uint8Array,
  ): { rows: Uint8Array; width: number; height: number } {
    const atlas = this.atlas(quality, header !== undefined);
    const pl = atlas.placement;
    let rows: Uint8Array;
    if (header) {
      // The band as PDFium draws it, over a blank page placed below it.
      const doc = this.pdfium.open(this.blank);
      try {
        rows = doc.render(0, quality, reuse, header).rows;
      } finally {
        doc.close();
      }
    } else {
      const size = atlas.rowBytes * pl.height;
      rows = reuse && reuse.length >= size ? reuse.subarray(0, size).fill(0) : new Uint8Array(size);
    }
    const sx = pl.w / LETTER[0];
    for (const op of layoutCover(values, this.fonts)) {
      if (op.kind === 'rule') {
        const c = toY(pl, op.y);
        const half = (op.thickness * pl.h) / LETTER[1] / 2;
        // Every row the rule touches by more than a sliver: PDFium draws the rows it covers in part
        // grey, and the binarisation keeps a grey stroke black (raster.ts).
        const top = Math.floor(c - half + 0.1);
        const bottom = Math.max(top + 1, Math.ceil(c + half - 0.1));
        const x0 = Math.round(toX(pl, op.x1));
        const x1 = Math.round(toX(pl, op.x2));
        for (let r = top; r < bottom; r++) fill(rows, atlas.rowBytes, pl.width, pl.height, r, x0, x1);
        continue;
      }
      const glyphs = atlas.glyphs.get(styleKey(op.font, op.size));
      if (!glyphs) throw new Error(`the cover's layout uses ${op.font} ${op.size} pt, which has no glyphs`);
      const oy = Math.round(toY(pl, op.y));
      let x = op.x;
      for (const ch of op.text) {
        const runs = glyphs.get(ch);
        if (runs) {
          const ox = Math.round(pl.x + x * sx);
          for (let i = 0; i < runs.length; i += 3)
            fill(
              rows,
              atlas.rowBytes,
              pl.width,
              pl.height,
              oy + runs[i]!,
              ox + runs[i + 1]!,
              ox + runs[i + 2]!,
            );
        }
        x += this.advance(op.font, ch) * op.size;
      }
    }
    return { rows, width: pl.width, height: pl.height };
  }

  private advance(font: CoverFont, ch: string): number {
    const known = this.advances[font];
    let a = known.get(ch);
    if (a === undefined) known.set(ch, (a = this.fonts[font].widthOfTextAtSize(ch, 1000) / 1000));
    return a;
  }

  /** The glyphs at this quality (with or without a header band), rendered at the first cover. */
  private atlas(quality: Quality, band: boolean): Atlas {
    const key = `${quality}:${band ? 'band' : 'page'}`;
    const known = this.atlases.get(key);
    if (known) return known;
    const pl = place(LETTER[0], LETTER[1], quality, band ? headerRows(quality) : 0);
    const atlas: Atlas = { placement: pl, rowBytes: (pl.width + 7) >> 3, glyphs: new Map() };
    const doc = this.pdfium.open(this.sheets.pdf);
    const blank = band ? this.pdfium.open(this.blank) : null;
    try {
      // Every page but the last (the lines the advances were read from).
      for (let p = 0; p < doc.pageCount - 1; p++) {
        const page = doc.render(p, quality, undefined, blank ? { doc: blank, index: 0 } : undefined);
        for (const c of this.sheets.cells) {
          if (c.page !== p) continue;
          const key = styleKey(c.font, c.size);
          let glyphs = atlas.glyphs.get(key);
          if (!glyphs) atlas.glyphs.set(key, (glyphs = new Map()));
          glyphs.set(c.ch, cut(page.rows, atlas.rowBytes, pl, c));
        }
      }
    } finally {
      doc.close();
      blank?.close();
    }
    this.atlases.set(key, atlas);
    return atlas;
  }
}

/** The black runs of one sheet cell, relative to the glyph's origin pixel. */
function cut(rows: Uint8Array, rowBytes: number, pl: Placement, c: SheetCell): Runs {
  const ox = Math.round(toX(pl, c.x));
  const oy = Math.round(toY(pl, c.y));
  const left = Math.max(0, Math.floor(toX(pl, c.x - c.size * 0.25)));
  const right = Math.min(pl.width, Math.ceil(toX(pl, c.x + c.size * 1.25)));
  const top = Math.max(0, Math.floor(toY(pl, c.y + c.size * 1.2)));
  const bottom = Math.min(pl.height, Math.ceil(toY(pl, c.y - c.size * 0.4)));
  const out: number[] = [];
  for (let r = top; r < bottom; r++) {
    let start = -1;
    for (let x = left; x <= right; x++) {
      const black = x < right && (rows[r * rowBytes + (x >> 3)]! & (0x80 >> (x & 7))) !== 0;
      if (black && start < 0) start = x;
      else if (!black && start >= 0) {
        out.push(r - oy, start - ox, x - ox);
        start = -1;
      }
    }
  }
  return Int16Array.from(out);
}

/** Sets pixels [x0, x1) of row `r` black, clipped to the page. */
function fill(
  rows: Uint8Array,
  rowBytes: number,
  width: number,
  height: number,
  r: number,
  x0: number,
  x1: number,
) {
  if (r < 0 || r >= height) return;
  const a = Math.max(0, x0);
  const b = Math.min(width, x1);
  if (a >= b) return;
  const base = r * rowBytes;
  let x = a;
  // Up to the first whole byte, then whole bytes, then the rest.
  for (; x < b && x & 7; x++) rows[base + (x >> 3)] = rows[base + (x >> 3)]! | (0x80 >> (x & 7));
  for (; x + 8 <= b; x += 8) rows[base + (x >> 3)] = 0xff;
  for (; x < b; x++) rows[base + (x >> 3)] = rows[base + (x >> 3)]! | (0x80 >> (x & 7));
}
