// Page geometry and bilevel conversion: pure functions, no I/O.
//
// Every page becomes a fax page: 1728 pixels wide at 204 dpi, A4 or Letter long, portrait.
// Landscape pages are turned a quarter clockwise; pages of other sizes are scaled to fit the paper
// (up or down, keeping their aspect ratio) and centred; nothing is cropped.

export type Quality = 'low' | 'standard' | 'hd';

export const FAX_WIDTH = 1728;
export const X_DPI = 204;
export const Y_DPI: Record<Quality, number> = { low: 98, standard: 196, hd: 391 };
/** 1728 px at 204 dpi: the scan width of a fax line, in inches (about 215 mm). */
const FAX_WIDTH_IN = FAX_WIDTH / X_DPI;

export type Paper = 'letter' | 'a4';
const PAPER_LENGTH_IN: Record<Paper, number> = { letter: 11, a4: 297 / 25.4 };
/** Between Letter's 1.294 and A4's 1.414 height/width ratio: longer pages go on A4. */
const A4_FROM_RATIO = (11 / 8.5 + 297 / 210) / 2;

export interface Placement {
  paper: Paper;
  /** Quarter turns clockwise applied when rendering (0 or 1). */
  rotate: 0 | 1;
  /** Size of the fax image. */
  width: number;
  height: number;
  /** Where the page lands in the fax image, in pixels. */
  x: number;
  y: number;
  w: number;
  h: number;
}

/**
 * Height of the header line's band at the top of a page, in inches: about 6.4 mm, 25 / 49 / 98 rows
 * at `low` / `standard` / `hd`. The page's content is scaled to fit below it (src/documents/header.ts).
 */
export const HEADER_BAND_IN = 0.25;

/** Rows of the header band at `quality`. */
export function headerRows(quality: Quality): number {
  return Math.round(HEADER_BAND_IN * Y_DPI[quality]);
}

/**
 * Places a page of `widthPt` x `heightPt` points (as displayed, /Rotate applied) on a fax page. With
 * `band` rows reserved at the top (the header line), the page is fitted into the rest of the paper
 * (scaled down a little, keeping its aspect ratio): nothing is covered and nothing is cropped.
 */
export function place(widthPt: number, heightPt: number, quality: Quality, band = 0): Placement {
  const rotate = widthPt > heightPt ? 1 : 0;
  const pw = (rotate ? heightPt : widthPt) / 72;
  const ph = (rotate ? widthPt : heightPt) / 72;
  const paper: Paper = ph / pw >= A4_FROM_RATIO ? 'a4' : 'letter';
  const yDpi = Y_DPI[quality];
  const height = Math.round(PAPER_LENGTH_IN[paper] * yDpi);
  const room = height - band;
  // Without a band, exactly the paper's length (the placement of every fax before the header line).
  const k = Math.min(FAX_WIDTH_IN / pw, (PAPER_LENGTH_IN[paper] - band / yDpi) / ph);
  const w = Math.max(1, Math.min(FAX_WIDTH, Math.round(pw * k * X_DPI)));
  const h = Math.max(1, Math.min(room, Math.round(ph * k * yDpi)));
  return {
    paper,
    rotate,
    width: FAX_WIDTH,
    height,
    x: (FAX_WIDTH - w) >> 1,
    y: band + ((room - h) >> 1),
    w,
    h,
  };
}

/** 8x8 Bayer matrix (values 0..63), built by the usual recursive doubling. */
function bayer(n: number): number[][] {
  if (n === 1) return [[0]];
  const m = bayer(n / 2);
  const out: number[][] = [];
  for (let y = 0; y < n; y++) {
    const row: number[] = [];
    for (let x = 0; x < n; x++) {
      const v = m[y % (n / 2)]![x % (n / 2)]!;
      const quad = [0, 2, 3, 1][(y < n / 2 ? 0 : 2) + (x < n / 2 ? 0 : 1)]!;
      row.push(4 * v + quad);
    }
    out.push(row);
  }
  return out;
}

/** Gray level below which a pixel is black, per position in the 8x8 cell: 2 .. 254. */
const THRESHOLDS: Uint8Array[] = bayer(8).map((r) => Uint8Array.from(r, (v) => Math.round((v + 0.5) * 4)));

/**
 * Gray (8 bits, 255 = white) to packed bilevel rows (1 = black), by ordered dithering: pure black and
 * white stay as they are (text rendered without smoothing is already pure), grays become patterns
 * whose density follows the gray level, so light areas stay visible instead of vanishing.
 */
export function toBilevel(
  gray: Uint8Array,
  width: number,
  height: number,
  stride: number,
  reuse?: Uint8Array,
): Uint8Array {
  const rowBytes = (width + 7) >> 3;
  const size = rowBytes * height;
  // A caller that encodes page after page passes its buffer back, so no garbage builds up.
  const out = reuse && reuse.length >= size ? reuse.subarray(0, size).fill(0) : new Uint8Array(size);
  // Most of a page is white: test 8 pixels at a time as two 32-bit words when the rows are aligned.
  const aligned = gray.byteOffset % 4 === 0 && stride % 4 === 0;
  const words = aligned ? new Uint32Array(gray.buffer, gray.byteOffset, (stride * height) >> 2) : null;
  for (let y = 0; y < height; y++) {
    const t = THRESHOLDS[y & 7]!;
    const src = y * stride;
    const dst = y * rowBytes;
    for (let bx = 0; bx < rowBytes; bx++) {
      const x0 = bx << 3;
      if (words && x0 + 8 <= width) {
        const wi = (src + x0) >> 2;
        if (words[wi] === 0xffffffff && words[wi + 1] === 0xffffffff) continue;
      }
      let byte = 0;
      const end = Math.min(8, width - x0);
      for (let k = 0; k < end; k++) {
        const g = gray[src + x0 + k]!;
        if (g !== 255 && g < t[k]!) byte |= 0x80 >> k;
      }
      out[dst + bx] = byte;
    }
  }
  return out;
}
