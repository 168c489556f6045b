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

// Binarisation for the line. A fax line pays for every change between black and white (T.6 codes
// the edges of each row against the row above), so greys are not all treated alike. The page is cut
// into tiles of TILE x TILE pixels, and each tile is classed by what its pixels look like:
// - vector (flat colours, the usual PDF page: PDFium renders text and paths without smoothing):
//   dark pixels are black, light ones white; a mid tone is black where it is a stroke (grey or
//   coloured text, thin rules, hairlines) and white inside a fill (a shaded field, a coloured cell),
//   whose rim stays as a thin outline. Text on a fill stays black on white: crisp, cheap, legible.
// - photo (many small steps between neighbours, as in a photograph, and mostly mid tones): a
//   clustered-dot screen, whose dots line up row after row (cheap for T.6, unlike the scattered dots
//   of error diffusion or a Bayer matrix), over the mid tones only: highlights and paper white,
//   shadows black.
// - scan (many small steps, but mostly light and dark: a scanned text page, paper grain): one
//   threshold, so paper and its noise become white and ink black.
// - white (nothing but paper, or nothing darker than LIGHT): skipped.

/** Tile edge in pixels (both directions). */
const TILE = 32;
/** Darker than this: always black (black and dark colours: text, dark fills). */
const DARK = 100;
/** From this on: always white (paper, light tints, zebra rows, highlight colours). */
const LIGHT = 240;
/**
 * Inside a fill, a tone darker than this becomes horizontal lines (a coarse pattern T.6 codes in a
 * few bits a row, that keeps a dark field or a chart's bars visible); a lighter one becomes white.
 */
const FILL_PATTERN = 176;
/** A mid tone at least this much darker than what lies a few pixels away is a stroke's. */
const CONTRAST = 24;
/** A step between neighbours of at most this (and not 0) is a smooth step: an image's. */
const SMOOTH_STEP = 24;
/** Threshold of image tiles that carry little mid tone (scans). */
const SCAN_THRESHOLD = 150; // scanNibble has it built in
/** Image tones screened: darker is black, from IMAGE_LIGHT on white. */
const IMAGE_DARK = 56;
const IMAGE_LIGHT = 200;
/** 1 for a step between neighbours (gray - gray before + 255) that is smooth, else 0. */
const SMOOTH_OF = Uint8Array.from({ length: 511 }, (_, i) => {
  const d = Math.abs(i - 255);
  return d !== 0 && d <= SMOOTH_STEP ? 1 : 0;
});
/** 1 for a mid tone of an image (IMAGE_DARK..IMAGE_LIGHT), else 0. */
const MID_OF = Uint8Array.from({ length: 256 }, (_, g) => (g >= IMAGE_DARK && g < IMAGE_LIGHT ? 1 : 0));
/** Image gray stretched over the screen: IMAGE_DARK..IMAGE_LIGHT to 0..255. */
const STRETCH = Uint8Array.from({ length: 256 }, (_, g) =>
  Math.max(0, Math.min(255, Math.round(((g - IMAGE_DARK) * 255) / (IMAGE_LIGHT - IMAGE_DARK)))),
);

/**
 * The clustered-dot screen: thresholds over a cell of 8 pixels across and `rows` down (the cell is
 * about square on paper at every vertical resolution), two dots per cell on a 45-degree grid, each
 * dot growing from its centre. Values 1..254: pure white never prints, pure black always does.
 */
function screen(rows: number): Uint8Array[] {
  const w = 8;
  const sy = 8 / rows; // paper distance of one row, in pixels across
  const centres = [
    [2, rows / 4],
    [6, (3 * rows) / 4],
    [-2, (3 * rows) / 4],
    [10, rows / 4],
    [6, -rows / 4],
    [2, (5 * rows) / 4],
  ] as const;
  const cells: { x: number; y: number; d: number }[] = [];
  for (let y = 0; y < rows; y++)
    for (let x = 0; x < w; x++) {
      let d = Infinity;
      for (const [cx, cy] of centres) d = Math.min(d, Math.hypot(x + 0.5 - cx, (y + 0.5 - cy) * sy));
      cells.push({ x, y, d });
    }
  cells.sort((a, b) => a.d - b.d || a.y - b.y || a.x - b.x);
  const out = Array.from({ length: rows }, () => new Uint8Array(w));
  // The first pixels to turn black are the dot centres: they get the highest thresholds.
  cells.forEach((c, i) => (out[c.y]![c.x] = 254 - Math.round((i * 253) / (cells.length - 1 || 1))));
  return out;
}

const screens = new Map<number, Uint8Array[]>();
function screenFor(yDpi: number): Uint8Array[] {
  const rows = Math.max(2, Math.round((8 * yDpi) / X_DPI));
  let s = screens.get(rows);
  if (!s) screens.set(rows, (s = screen(rows)));
  return s;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
/** Whether each of the 4 pixels of a word is 0 or 255 (all bits of each byte alike). */
const twoLevel = (w: number) => ((w ^ (w >>> 1)) & 0x7f7f7f7f) === 0;
/** The 4 pixels of a two-level word as 4 bits, bit i set when pixel i is white. */
const nibble = (w: number) => (w & 1) | ((w >>> 7) & 2) | ((w >>> 14) & 4) | ((w >>> 21) & 8);
/**
 * The 4 pixels of a word against SCAN_THRESHOLD (150) as 4 bits, bit i set when pixel i is at least
 * 150 (white), as `nibble` gives them: a byte of 128 or more whose low 7 bits are at least 22, seen
 * as the carry into bit 7 of (low 7 bits + 106), which stays inside its byte (127 + 106 < 256).
 */
const scanNibble = (w: number) => {
  const ge = w & ((w & 0x7f7f7f7f) + 0x6a6a6a6a);
  return ((ge >>> 7) & 1) | ((ge >>> 14) & 2) | ((ge >>> 21) & 4) | ((ge >>> 28) & 8);
};
/** Packed black bits (most significant first) of a nibble's 4 pixels. */
const BLACK_OF = Uint8Array.from({ length: 16 }, (_, n) => {
  let b = 0;
  for (let i = 0; i < 4; i++) if (!((n >> i) & 1)) b |= 0x8 >> i;
  return b;
});

/** Tile classes. */
const Kind = { White: 0, Vector: 1, Photo: 2, Scan: 3 } as const;

/**
 * Gray (8 bits, 255 = white) to packed bilevel rows (1 = black) for the line, at `yDpi` rows per inch
 * (204 dpi across): see the classes above. Pure white stays white and pure black stays black.
 */
export function toBilevel(
  gray: Uint8Array,
  width: number,
  height: number,
  stride: number,
  reuse?: Uint8Array,
  yDpi = 196,
): Uint8Array {
  const rowBytes = (width + 7) >> 3;
  const size = rowBytes * height;
  // A caller that encodes page after page passes its buffer back, so no garbage builds up.
  const out = reuse && reuse.length >= size ? reuse.subarray(0, size).fill(0) : new Uint8Array(size);
  // Most of a page is white: test 8 pixels at a time as two 32-bit words when the rows are aligned
  // (and the machine little-endian, as the byte order of the words below assumes).
  const aligned = LITTLE_ENDIAN && gray.byteOffset % 4 === 0 && stride % 4 === 0;
  const words = aligned ? new Uint32Array(gray.buffer, gray.byteOffset, (stride * height) >> 2) : null;
  const kind = classify(gray, words, width, height, stride);
  pixels(gray, words, width, height, stride, yDpi, kind, out);
  return out;
}

/** Pass 1: the class of each tile (row by row, Math.ceil(width / TILE) tiles a row). */
function classify(
  gray: Uint8Array,
  words: Uint32Array | null,
  width: number,
  height: number,
  stride: number,
): Uint8Array {
  const tilesX = Math.ceil(width / TILE);
  const tilesY = Math.ceil(height / TILE);
  const nTiles = tilesX * tilesY;
  const smooth = new Uint16Array(nTiles);
  const tone = new Uint16Array(nTiles);
  // 1 once a tile has a pixel darker than LIGHT (else it is white whatever else it holds).
  const inked = new Uint8Array(nTiles);
  // 1 once a tile's class no longer depends on its counts (below): its noisy pixels are not
  // counted any more, only looked at for ink, a word at a time. The class comes out the same.
  const settled = new Uint8Array(nTiles);
  // Pass 1: what each tile holds.
  for (let y = 0; y < height; y++) {
    const src = y * stride;
    const tRow = (y / TILE) | 0;
    // Every 8 rows: whether each tile of this tile row is settled, from its counts so far and the
    // pixels it has left (this row and those below it in the tile): each pixel adds at most 1 to
    // either count.
    const top = tRow * TILE;
    const th = Math.min(TILE, height - top);
    for (let tx = (y & 7) === 0 ? 0 : tilesX; tx < tilesX; tx++) {
      const t = tRow * tilesX + tx;
      if (settled[t]) continue;
      const tw = Math.min(TILE, width - tx * TILE);
      const n = tw * th;
      const left = (th - (y - top)) * tw;
      const s = smooth[t]!;
      const m = tone[t]!;
      // Smooth for good and toned for good (photo), smooth for good and never toned enough (scan),
      // or never smooth enough (vector): the tests that classify the tile below give that answer.
      if ((s * 8 > n && (m * 2 > n || (m + left) * 2 <= n)) || (s + left) * 8 <= n) settled[t] = 1;
    }
    for (let x0 = 0; x0 < width; x0 += 8) {
      if (words && x0 + 8 <= width) {
        const wi = (src + x0) >> 2;
        const w0 = words[wi]!;
        const w1 = words[wi + 1]!;
        if (w0 === 0xffffffff && w1 === 0xffffffff) continue;
        const t = tRow * tilesX + ((x0 / TILE) | 0);
        // Black and white only (text and rules), not all white: ink, nothing smooth, no mid tone.
        if (twoLevel(w0) && twoLevel(w1)) {
          inked[t] = 1;
          continue;
        }
        // Some pixel darker than LIGHT (0xf0): a byte whose top four bits are not all set (bitwise
        // results are signed 32-bit numbers, hence the | 0 on the constant).
        if ((w0 & w1 & 0xf0f0f0f0) !== (0xf0f0f0f0 | 0)) inked[t] = 1;
        if (settled[t]) continue;
        // One gray over all 8 pixels (a flat fill): only the step from the pixel before can count.
        if (w0 === w1 && w0 === (w0 & 0xff) * 0x01010101) {
          const g = w0 & 0xff;
          const prev = gray[src + (x0 > 0 ? x0 - 1 : 0)]!;
          const d = g > prev ? g - prev : prev - g;
          if (d !== 0 && d <= SMOOTH_STEP) smooth[t] = smooth[t]! + 1;
          if (g >= IMAGE_DARK && g < IMAGE_LIGHT) tone[t] = tone[t]! + 8;
          continue;
        }
        let prev = gray[src + (x0 > 0 ? x0 - 1 : 0)]!;
        let s = 0;
        let m = 0;
        // Table look-ups rather than branches: on a scan or a photo the grays are noise, and branches
        // on them are mispredicted half the time.
        for (let x = x0; x < x0 + 8; x++) {
          const g = gray[src + x]!;
          s += SMOOTH_OF[g - prev + 255]!;
          m += MID_OF[g]!;
          prev = g;
        }
        smooth[t] = smooth[t]! + s;
        tone[t] = tone[t]! + m;
        continue;
      }
      // Unaligned rows, or the last pixels of a row: one at a time.
      const t = tRow * tilesX + ((x0 / TILE) | 0);
      const end = Math.min(width, x0 + 8);
      let prev = gray[src + (x0 > 0 ? x0 - 1 : 0)]!;
      let s = 0;
      let m = 0;
      let lo = 255;
      for (let x = x0; x < end; x++) {
        const g = gray[src + x]!;
        s += SMOOTH_OF[g - prev + 255]!;
        m += MID_OF[g]!;
        lo = lo < g ? lo : g;
        prev = g;
      }
      if (lo < LIGHT) inked[t] = 1;
      if (settled[t]) continue;
      smooth[t] = smooth[t]! + s;
      tone[t] = tone[t]! + m;
    }
  }
  const kind = new Uint8Array(nTiles);
  for (let t = 0; t < nTiles; t++) {
    const tw = Math.min(TILE, width - (t % tilesX) * TILE);
    const th = Math.min(TILE, height - ((t / tilesX) | 0) * TILE);
    const n = tw * th;
    kind[t] = !inked[t]
      ? Kind.White
      : smooth[t]! * 8 > n
        ? tone[t]! * 2 > n
          ? Kind.Photo
          : Kind.Scan
        : Kind.Vector;
  }
  return kind;
}

/** Pass 2: the pixels, by the class of their tile (classify), into the packed rows `out`. */
function pixels(
  gray: Uint8Array,
  words: Uint32Array | null,
  width: number,
  height: number,
  stride: number,
  yDpi: number,
  kind: Uint8Array,
  out: Uint8Array,
): void {
  const rowBytes = (width + 7) >> 3;
  const tilesX = Math.ceil(width / TILE);
  const scr = screenFor(yDpi);
  const sRows = scr.length;
  // How far a mid-tone pixel looks around it: a stroke is darker than what lies this far away on
  // some side; inside a fill, every side is alike. A fill's rim on paper stays as a thin outline.
  const rx = 3;
  const ry = Math.max(2, Math.round((3 * yDpi) / X_DPI));
  // Past the page's edge the edge pixel repeats: a fill that touches the edge has no rim there.
  const level = (x: number, y: number) =>
    gray[(y < 0 ? 0 : y >= height ? height - 1 : y) * stride + (x < 0 ? 0 : x >= width ? width - 1 : x)]!;
  const paper = (x: number, y: number) => level(x, y) >= LIGHT;
  // The fill pattern: a period of `period` rows (about 0.5 mm), of which the darker the fill the more
  // are black (its ink coverage, 1 - gray / 255).
  const period = Math.max(2, Math.round((4 * yDpi) / 196));
  const ryStride = ry * stride;
  /** Whether the rx pixels left and right of the 8 at p all have the gray g. */
  const flatAround = (p: number, g: number) => {
    for (let i = 1; i <= rx; i++) if (gray[p - i] !== g || gray[p + 7 + i] !== g) return false;
    return true;
  };
  // Pass 2: the pixels.
  for (let y = 0; y < height; y++) {
    const src = y * stride;
    const dst = y * rowBytes;
    const tRow = ((y / TILE) | 0) * tilesX;
    const sc = scr[y % sRows]!;
    // Tile by tile along the row (a tile is TILE / 8 bytes of output): white tiles are skipped whole.
    for (let bx = 0; bx < rowBytes; bx++) {
      const x0 = bx << 3;
      const k = kind[tRow + ((x0 / TILE) | 0)]!;
      if (k === Kind.White) {
        bx |= TILE / 8 - 1; // the tile's last byte; the loop moves on to the next tile
        continue;
      }
      if (words && x0 + 8 <= width) {
        const wi = (src + x0) >> 2;
        const w0 = words[wi]!;
        const w1 = words[wi + 1]!;
        if (w0 === 0xffffffff && w1 === 0xffffffff) continue;
        // Black and white only: black stays black in every class.
        if (twoLevel(w0) && twoLevel(w1)) {
          out[dst + bx] = (BLACK_OF[nibble(w0)]! << 4) | BLACK_OF[nibble(w1)]!;
          continue;
        }
        // All 8 at LIGHT or lighter: white in every class (a byte whose top four bits are all set).
        if ((w0 & w1 & 0xf0f0f0f0) === (0xf0f0f0f0 | 0)) continue;
        // All 8 darker than DARK (a byte below 128 whose low 7 bits + 28 do not reach bit 7): black
        // in a vector tile, as below a scan's threshold (a photo's screen still has its say).
        if (
          k !== Kind.Photo &&
          ((w0 | w1 | ((w0 & 0x7f7f7f7f) + 0x1c1c1c1c) | ((w1 & 0x7f7f7f7f) + 0x1c1c1c1c)) & 0x80808080) === 0
        ) {
          out[dst + bx] = 0xff;
          continue;
        }
        // A scan's one threshold, 4 pixels at a time.
        if (k === Kind.Scan) {
          out[dst + bx] = (BLACK_OF[scanNibble(w0)]! << 4) | BLACK_OF[scanNibble(w1)]!;
          continue;
        }
        // Inside a flat mid-tone fill of a vector tile: every pixel this group's pixels look at (rx
        // across, ry up and down) has the same gray, so none is a speck or a stroke, and all 8 take
        // the fill pattern's value of this row.
        if (
          k === Kind.Vector &&
          w0 === w1 &&
          w0 === (w0 & 0xff) * 0x01010101 &&
          x0 >= rx &&
          x0 + 8 + rx <= width &&
          y >= ry &&
          y < height - ry
        ) {
          const g = w0 & 0xff;
          const up = (src - ryStride + x0) >> 2;
          const down = (src + ryStride + x0) >> 2;
          if (
            g >= DARK &&
            g < LIGHT &&
            words[up] === w0 &&
            words[up + 1] === w0 &&
            words[down] === w0 &&
            words[down + 1] === w0 &&
            flatAround(src + x0, g)
          ) {
            const black = g < FILL_PATTERN && y % period < Math.round(((255 - g) * period) / 255);
            out[dst + bx] = black ? 0xff : 0;
            continue;
          }
        }
      }
      let byte = 0;
      const end = Math.min(8, width - x0);
      const p0 = src + x0;
      if (k === Kind.Scan) {
        for (let i = 0; i < end; i++) if (gray[p0 + i]! < SCAN_THRESHOLD) byte |= 0x80 >> i;
      } else if (k === Kind.Photo) {
        // White (255) stretches to 255, above every threshold of the screen: it never prints.
        for (let i = 0; i < end; i++) if (STRETCH[gray[p0 + i]!]! < sc[i]!) byte |= 0x80 >> i;
      } else {
        for (let i = 0; i < end; i++) {
          const x = x0 + i;
          const g = gray[p0 + i]!;
          let black: boolean;
          if (g < DARK) black = true;
          else if (g >= LIGHT) black = false;
          else if (x >= rx && x < width - rx && y >= ry && y < height - ry) {
            // Inside the page by the reach of both looks: no edge to repeat, the neighbours are read
            // directly (the same pixels `level` reads; most mid tones of a page are here).
            const p = p0 + i;
            if (
              gray[p - 1]! >= LIGHT &&
              gray[p + 1]! >= LIGHT &&
              gray[p - stride]! >= LIGHT &&
              gray[p + stride]! >= LIGHT
            )
              black = false; // a lone speck
            else {
              const a = gray[p - rx]!;
              const b = gray[p + rx]!;
              const c = gray[p - ryStride]!;
              const e = gray[p + ryStride]!;
              const hi =
                a > b ? (a > c ? (a > e ? a : e) : c > e ? c : e) : b > c ? (b > e ? b : e) : c > e ? c : e;
              black =
                hi - g >= CONTRAST ||
                (g < FILL_PATTERN && y % period < Math.round(((255 - g) * period) / 255));
            }
          } else if (paper(x - 1, y) && paper(x + 1, y) && paper(x, y - 1) && paper(x, y + 1))
            black = false; // a lone speck
          else if (
            Math.max(level(x - rx, y), level(x + rx, y), level(x, y - ry), level(x, y + ry)) - g >=
            CONTRAST
          )
            black = true; // a stroke, or a fill's rim
          else black = g < FILL_PATTERN && y % period < Math.round(((255 - g) * period) / 255);
          if (black) byte |= 0x80 >> i;
        }
      }
      out[dst + bx] = byte;
    }
  }
}
