// Reads back the pages of a TIFF Class F file as tiff.ts writes it (and as any baseline TIFF lays
// out a bilevel, one-strip-per-page image): each page's compressed strip, untouched, with its size,
// resolution and compression. Used to wrap the transmitted image in a PDF without re-encoding it.

export interface StoredPage {
  /** The page's compressed data (a view into the file). */
  data: Uint8Array;
  width: number;
  height: number;
  xDpi: number;
  yDpi: number;
  /** TIFF Compression: 4 = CCITT T.6 (MMR), what faxline writes. */
  compression: number;
}

const MAX_PAGES = 10_000;

/** The pages of a TIFF whose pages are single strips; throws on anything else. */
export function readTiffPages(buf: Uint8Array): StoredPage[] {
  const b = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  const order = b.toString('latin1', 0, 2);
  if (b.length < 8 || (order !== 'II' && order !== 'MM')) throw new Error('not a TIFF file');
  const le = order === 'II';
  const u16 = (o: number) => (le ? b.readUInt16LE(o) : b.readUInt16BE(o));
  const u32 = (o: number) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  if (u16(2) !== 42) throw new Error('not a classic TIFF file');
  const pages: StoredPage[] = [];
  for (let ifd = u32(4); ifd !== 0;) {
    if (pages.length >= MAX_PAGES || ifd + 2 > b.length) throw new Error('TIFF: bad directory offset');
    const n = u16(ifd);
    const tag = new Map<number, number>();
    for (let i = 0; i < n; i++) {
      const e = ifd + 2 + i * 12;
      const id = u16(e);
      const type = u16(e + 2);
      const count = u32(e + 4);
      if (type === 5) {
        // RATIONAL: numerator / denominator at the offset
        const at = u32(e + 8);
        tag.set(id, u32(at) / (u32(at + 4) || 1));
      } else if (count === 1 || id === 297) tag.set(id, type === 3 ? u16(e + 8) : u32(e + 8));
      else throw new Error(`TIFF: tag ${id} has ${count} values (one strip per page expected)`);
    }
    const need = (id: number) => {
      const v = tag.get(id);
      if (v === undefined) throw new Error(`TIFF: tag ${id} missing`);
      return v;
    };
    const offset = need(273);
    const length = need(279);
    if (offset + length > b.length) throw new Error('TIFF: strip beyond the end of the file');
    const unit = tag.get(296) ?? 2;
    const perInch = unit === 3 ? 2.54 : 1;
    pages.push({
      data: b.subarray(offset, offset + length),
      width: need(256),
      height: need(257),
      xDpi: (tag.get(282) ?? 204) * perInch,
      yDpi: (tag.get(283) ?? 196) * perInch,
      compression: tag.get(259) ?? 1,
    });
    ifd = u32(ifd + 2 + n * 12);
  }
  return pages;
}
