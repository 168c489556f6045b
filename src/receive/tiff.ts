// Reads the pages of a received TIFF Class F (as SpanDSP writes it: one IFD per page, bilevel,
// CCITT T.4 or T.6 strips) without decoding a pixel: where each strip is, how it is coded, the page's
// size and resolution. Only what a PDF wrapper needs; anything else is refused with a reason.

export interface TiffStrip {
  /** The coded bytes as stored in the file (fill order as `lsbFirst` says). */
  data: Uint8Array;
  /** Rows this strip holds. */
  rows: number;
}

export interface TiffPage {
  width: number;
  height: number;
  /** 3: T.4 (CCITT Group 3), 4: T.6 (CCITT Group 4). */
  compression: 3 | 4;
  /** T.4 only: 2-D coding allowed (T4Options bit 0). */
  twoD: boolean;
  /** T.4 only: each EOL ends on a byte boundary (T4Options bit 2). */
  byteAligned: boolean;
  /** FillOrder 2: the first pixel is in the least significant bit of each byte. */
  lsbFirst: boolean;
  /** PhotometricInterpretation 1 (min-is-black): a decoded white run is a 1 bit. */
  minIsBlack: boolean;
  xDpi: number;
  yDpi: number;
  strips: TiffStrip[];
}

export class TiffError extends Error {
  override readonly name = 'TiffError';
}

const MAX_PAGES = 10_000;

/** The pages of a TIFF Class F file, in order. Throws TiffError on anything it cannot wrap. */
export function readFaxTiff(buf: Uint8Array): TiffPage[] {
  const v = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  if (buf.length < 8) throw new TiffError('too short to be a TIFF file');
  const order = String.fromCharCode(buf[0]!, buf[1]!);
  if (order !== 'II' && order !== 'MM') throw new TiffError('not a TIFF file (no II/MM byte order mark)');
  const le = order === 'II';
  const u16 = (at: number) => {
    if (at + 2 > buf.length) throw new TiffError(`offset ${at} is beyond the end of the file`);
    return v.getUint16(at, le);
  };
  const u32 = (at: number) => {
    if (at + 4 > buf.length) throw new TiffError(`offset ${at} is beyond the end of the file`);
    return v.getUint32(at, le);
  };
  if (u16(2) !== 42) throw new TiffError('not a classic TIFF file (version is not 42)');
  const pages: TiffPage[] = [];
  const seen = new Set<number>();
  let ifd = u32(4);
  while (ifd !== 0) {
    if (seen.has(ifd) || pages.length >= MAX_PAGES) throw new TiffError('the IFD chain loops or is too long');
    seen.add(ifd);
    const n = u16(ifd);
    const tags = new Map<number, number[]>();
    for (let i = 0; i < n; i++) {
      const at = ifd + 2 + i * 12;
      const tag = u16(at);
      const type = u16(at + 2);
      const count = u32(at + 4);
      const size = type === 3 ? 2 : type === 4 ? 4 : type === 5 ? 8 : 0;
      if (size === 0 || count > 1_000_000) continue; // a type we never need (ASCII, bytes…)
      const inline = size * count <= 4;
      const base = inline ? at + 8 : u32(at + 8);
      const values: number[] = [];
      for (let k = 0; k < count; k++) {
        if (type === 3) values.push(u16(base + k * 2));
        else if (type === 4) values.push(u32(base + k * 4));
        else {
          const den = u32(base + k * 8 + 4);
          values.push(den === 0 ? 0 : u32(base + k * 8) / den);
        }
      }
      tags.set(tag, values);
    }
    const one = (tag: number, def?: number): number => {
      const x = tags.get(tag)?.[0] ?? def;
      if (x === undefined) throw new TiffError(`page ${pages.length + 1}: tag ${tag} is missing`);
      return x;
    };
    const width = one(256);
    const height = one(257);
    const compression = one(259, 1);
    if (compression !== 3 && compression !== 4)
      throw new TiffError(`page ${pages.length + 1}: compression ${compression} is not CCITT T.4 or T.6`);
    if (one(258, 1) !== 1 || one(277, 1) !== 1)
      throw new TiffError(`page ${pages.length + 1}: not a bilevel image`);
    const t4 = one(292, 0);
    if (compression === 3 && t4 & 2)
      throw new TiffError(`page ${pages.length + 1}: uncompressed mode in T.4 is not supported`);
    const unit = one(296, 2);
    const perInch = unit === 3 ? 2.54 : 1;
    const xDpi = Math.round(one(282, 204) * perInch);
    const yDpi = Math.round(one(283, 196) * perInch);
    const offsets = tags.get(273) ?? [];
    const counts = tags.get(279) ?? [];
    if (offsets.length === 0 || offsets.length !== counts.length)
      throw new TiffError(`page ${pages.length + 1}: strip offsets and byte counts do not match`);
    const rowsPerStrip = Math.min(one(278, height), height);
    const strips: TiffStrip[] = offsets.map((off, i) => {
      const len = counts[i]!;
      if (off + len > buf.length) throw new TiffError(`page ${pages.length + 1}: a strip is beyond the end`);
      return {
        data: buf.subarray(off, off + len),
        rows: Math.max(0, Math.min(rowsPerStrip, height - i * rowsPerStrip)),
      };
    });
    if (width < 1 || width > 10_000 || height < 1 || height > 100_000 || xDpi < 1 || yDpi < 1)
      throw new TiffError(
        `page ${pages.length + 1}: size ${width}x${height} at ${xDpi}x${yDpi} dpi is out of range`,
      );
    pages.push({
      width,
      height,
      compression,
      twoD: compression === 3 && (t4 & 1) === 1,
      byteAligned: compression === 3 && (t4 & 4) === 4,
      lsbFirst: one(266, 1) === 2,
      minIsBlack: one(262, 0) === 1,
      xDpi,
      yDpi,
      strips: strips.filter((s) => s.rows > 0),
    });
    ifd = u32(ifd + 2 + n * 12);
  }
  return pages;
}

/**
 * The vertical resolution under the names a send's `quality` uses: low 98 (T.30 "standard", 3.85
 * lines/mm), standard 196 ("fine", 7.7), hd 391 ("superfine", 15.4); anything else is other.
 */
export function resolutionName(yDpi: number): 'low' | 'standard' | 'hd' | 'other' {
  if (Math.abs(yDpi - 98) <= 3) return 'low';
  if (Math.abs(yDpi - 196) <= 4) return 'standard';
  if (Math.abs(yDpi - 391) <= 8) return 'hd';
  return 'other';
}

/**
 * The same file without its last page (a copy; the page's data stays in the file, unreferenced), or
 * null when it had one page only. Used when the fax engine rejected the last page it wrote (longer
 * than INBOUND_MAX_PAGE_MM). Throws TiffError on a file whose page chain cannot be followed.
 */
export function dropLastPage(buf: Uint8Array): Uint8Array | null {
  const out = Uint8Array.from(buf);
  const v = new DataView(out.buffer);
  if (out.length < 8) throw new TiffError('too short to be a TIFF file');
  const le = out[0] === 0x49;
  const u16 = (at: number) => {
    if (at + 2 > out.length) throw new TiffError(`offset ${at} is beyond the end of the file`);
    return v.getUint16(at, le);
  };
  const u32 = (at: number) => {
    if (at + 4 > out.length) throw new TiffError(`offset ${at} is beyond the end of the file`);
    return v.getUint32(at, le);
  };
  // Where each IFD's offset is written: the header for the first, the previous IFD's end for the others.
  let pointer = 4;
  let previous = -1;
  const seen = new Set<number>();
  for (let ifd = u32(pointer); ifd !== 0; ifd = u32(pointer)) {
    if (seen.has(ifd) || seen.size >= MAX_PAGES) throw new TiffError('the IFD chain loops or is too long');
    seen.add(ifd);
    previous = pointer;
    pointer = ifd + 2 + u16(ifd) * 12;
  }
  if (previous === -1 || previous === 4) return null;
  v.setUint32(previous, 0, le);
  return out;
}
