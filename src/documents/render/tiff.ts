// TIFF Class F writer: one IFD per page, one strip per page, bilevel, T.6 (MMR) compressed,
// min-is-white, resolution in dots per inch. Little-endian ("II"). Pages are appended as they are
// encoded, so only the compressed data is held in memory.

export interface FaxPage {
  /** T.6-compressed strip of the whole page. */
  data: Uint8Array;
  width: number;
  height: number;
  xDpi: number;
  yDpi: number;
}

const SHORT = 3;
const LONG = 4;
const RATIONAL = 5;

type Entry = [tag: number, type: number, count: number, value: number | [number, number]];

/** Builds a multi-page TIFF Class F file from encoded pages. */
export function writeTiffClassF(pages: FaxPage[]): Buffer {
  const entriesPerPage = 17;
  const ifdSize = 2 + entriesPerPage * 12 + 4 + 16; // entries, next-IFD offset, two rationals
  let total = 8;
  for (const p of pages) total += p.data.length + (p.data.length & 1) + ifdSize;
  const out = Buffer.alloc(total);
  out.write('II', 0, 'latin1');
  out.writeUInt16LE(42, 2);
  let pos = 8;
  let linkAt = 4; // where the offset of the next IFD is written
  pages.forEach((p, index) => {
    const stripOffset = pos;
    out.set(p.data, pos);
    pos += p.data.length + (p.data.length & 1); // IFDs start on a word boundary
    const ifd = pos;
    out.writeUInt32LE(ifd, linkAt);
    const rationals = ifd + 2 + entriesPerPage * 12 + 4;
    const entries: Entry[] = [
      [254, LONG, 1, 2], // NewSubfileType: single page of a multi-page image
      [256, LONG, 1, p.width], // ImageWidth
      [257, LONG, 1, p.height], // ImageLength
      [258, SHORT, 1, 1], // BitsPerSample
      [259, SHORT, 1, 4], // Compression: CCITT T.6
      [262, SHORT, 1, 0], // PhotometricInterpretation: min-is-white
      [266, SHORT, 1, 1], // FillOrder: most significant bit first
      [273, LONG, 1, stripOffset], // StripOffsets
      [277, SHORT, 1, 1], // SamplesPerPixel
      [278, LONG, 1, p.height], // RowsPerStrip: the whole page
      [279, LONG, 1, p.data.length], // StripByteCounts
      [282, RATIONAL, 1, rationals], // XResolution
      [283, RATIONAL, 1, rationals + 8], // YResolution
      [284, SHORT, 1, 1], // PlanarConfiguration: contiguous
      [293, LONG, 1, 0], // T6Options: no uncompressed mode
      [296, SHORT, 1, 2], // ResolutionUnit: inch
      [297, SHORT, 2, [index, pages.length]], // PageNumber: this page (from 0), of how many
    ];
    out.writeUInt16LE(entries.length, ifd);
    entries.forEach(([tag, type, count, value], n) => {
      const at = ifd + 2 + n * 12;
      out.writeUInt16LE(tag, at);
      out.writeUInt16LE(type, at + 2);
      out.writeUInt32LE(count, at + 4);
      if (Array.isArray(value)) {
        out.writeUInt16LE(value[0], at + 8);
        out.writeUInt16LE(value[1], at + 10);
      } else if (type === SHORT) out.writeUInt16LE(value, at + 8);
      else out.writeUInt32LE(value, at + 8);
    });
    linkAt = ifd + 2 + entries.length * 12;
    out.writeUInt32LE(0, linkAt);
    out.writeUInt32LE(p.xDpi, rationals);
    out.writeUInt32LE(1, rationals + 4);
    out.writeUInt32LE(p.yDpi, rationals + 8);
    out.writeUInt32LE(1, rationals + 12);
    pos = rationals + 16;
  });
  if (pos !== total) throw new Error(`TIFF layout error: wrote ${pos} of ${total} bytes`);
  return out;
}
