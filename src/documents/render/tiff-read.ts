// Reads back the pages of a TIFF Class F file as tiff.ts writes it (and as any baseline TIFF lays
// out a bilevel, one-strip-per-page image): each page's compressed strip, untouched, with its size,
// resolution and compression. Used to wrap the transmitted image in a PDF without re-encoding it.
// `readTiffLayout` reads only the directories, through a reader of byte ranges, so that a stored fax
// of any size is served a piece at a time (src/api/routes/proof.ts) instead of loaded whole.

/** Where a page's compressed strip lies in the file, and what it is. */
export interface PageLayout {
  offset: number;
  length: number;
  width: number;
  height: number;
  xDpi: number;
  yDpi: number;
  /** TIFF Compression: 4 = CCITT T.6 (MMR), what faxline writes. */
  compression: number;
}

export interface StoredPage extends Omit<PageLayout, 'offset' | 'length'> {
  /** The page's compressed data (a view into the file). */
  data: Uint8Array;
}

/** Bytes [offset, offset + length) of the file (fewer only past its end). */
export type ReadRange = (offset: number, length: number) => Promise<Uint8Array>;

const MAX_PAGES = 10_000;
/** Bytes read at a directory: ours (17 entries and two rationals) fit, so one read a page. */
const WINDOW = 512;

/** The pages of a TIFF whose pages are single strips; throws on anything else. */
export async function readTiffPages(buf: Uint8Array): Promise<StoredPage[]> {
  const b = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  const layout = await readTiffLayout(async (o, n) => b.subarray(o, o + n), b.length);
  return layout.map(({ offset, length, ...p }) => ({ ...p, data: b.subarray(offset, offset + length) }));
}

/**
 * The page layout of a TIFF of `size` bytes whose pages are single strips, read through `read`
 * (the header, then about one range a page); at most `maxPages` pages. Throws on anything else.
 */
export async function readTiffLayout(
  read: ReadRange,
  size: number,
  maxPages = MAX_PAGES,
): Promise<PageLayout[]> {
  const at = async (offset: number, length: number) => {
    const b = await read(offset, length);
    if (b.length < length) throw new Error('TIFF: bad directory offset');
    return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  };
  const head = size >= 8 ? await at(0, 8) : Buffer.alloc(0);
  const order = head.toString('latin1', 0, 2);
  if (head.length < 8 || (order !== 'II' && order !== 'MM')) throw new Error('not a TIFF file');
  const le = order === 'II';
  const u16 = (b: Buffer, o: number) => (le ? b.readUInt16LE(o) : b.readUInt16BE(o));
  const u32 = (b: Buffer, o: number) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  if (u16(head, 2) !== 42) throw new Error('not a classic TIFF file');
  const pages: PageLayout[] = [];
  const seen = new Set<number>();
  for (let ifd = u32(head, 4); ifd !== 0 && pages.length < maxPages;) {
    if (pages.length >= MAX_PAGES || ifd + 2 > size) throw new Error('TIFF: bad directory offset');
    // A next-directory offset pointing back would make the same page again and again.
    if (seen.has(ifd)) throw new Error(`TIFF: the directory chain loops back to offset ${ifd}`);
    seen.add(ifd);
    let win = await at(ifd, Math.min(WINDOW, size - ifd));
    const n = u16(win, 0);
    const end = 2 + n * 12 + 4;
    if (win.length < end) win = await at(ifd, end);
    // A value stored elsewhere (a RATIONAL): from the window when it is there, else read.
    const far = async (o: number) =>
      o >= ifd && o + 8 <= ifd + win.length ? win.subarray(o - ifd) : at(o, 8);
    const tag = new Map<number, number>();
    for (let i = 0; i < n; i++) {
      const e = 2 + i * 12;
      const id = u16(win, e);
      const type = u16(win, e + 2);
      const count = u32(win, e + 4);
      if (type === 5) {
        // RATIONAL: numerator / denominator at the offset
        const r = await far(u32(win, e + 8));
        tag.set(id, u32(r, 0) / (u32(r, 4) || 1));
      } else if (count === 1 || id === 297) tag.set(id, type === 3 ? u16(win, e + 8) : u32(win, e + 8));
      else throw new Error(`TIFF: tag ${id} has ${count} values (one strip per page expected)`);
    }
    const need = (id: number) => {
      const v = tag.get(id);
      if (v === undefined) throw new Error(`TIFF: tag ${id} missing`);
      return v;
    };
    const offset = need(273);
    const length = need(279);
    if (offset + length > size) throw new Error('TIFF: strip beyond the end of the file');
    const unit = tag.get(296) ?? 2;
    const perInch = unit === 3 ? 2.54 : 1;
    pages.push({
      offset,
      length,
      width: need(256),
      height: need(257),
      xDpi: (tag.get(282) ?? 204) * perInch,
      yDpi: (tag.get(283) ?? 196) * perInch,
      compression: tag.get(259) ?? 1,
    });
    ifd = u32(win, 2 + n * 12);
  }
  return pages;
}
