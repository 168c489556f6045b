// Images as documents: a TIFF (every page), a JPEG or a PNG becomes a PDF of one page per image,
// which then takes the PDF path unchanged (the same check, the same renderer, fax page placement,
// dithering, previews). Runs only in the sandbox process (child.ts, loaded on the first image), with
// its memory and time caps: every image's size is read from its header and held to the limits
// before a single pixel is decoded.
//
// - TIFF: decoded here with utif2 (uncompressed, CCITT G3/G4, LZW, PackBits, Deflate, JPEG; strips
//   and tiles), so a page that cannot be decoded is refused with a reason; a bilevel page stays 1
//   bit per pixel, an 8-bit gray one stays as it is, others are turned to 8-bit gray.
// - JPEG: read marker by marker (frame header, scan, end-of-image marker) and embedded as it is
//   (DCTDecode); PDFium decodes it when rendering, under the render process's caps, as it decodes a
//   JPEG inside any PDF. A 12-megapixel photo would need more than a sandbox's memory to decode here.
// - PNG: every chunk's checksum verified; without transparency or interlacing its compressed rows
//   are embedded as they are (FlateDecode with PNG predictors, which PDFium undoes); otherwise
//   pdf-lib decodes it and embeds its alpha as a soft mask.
import { crc32, deflateSync } from 'node:zlib';
import {
  PDFDocument,
  PDFHexString,
  PDFName,
  type PDFPage,
  type PDFRef,
  degrees,
  concatTransformationMatrix,
  drawObject,
  popGraphicsState,
  pushGraphicsState,
} from 'pdf-lib';
import UTIF from 'utif2';
import { DocumentError, readableReason } from '../errors.ts';
import { imageCodes, type DocumentFormat } from '../formats.ts';

/** The long side of an image's page, in points: every image is scaled to the fax page anyway. */
const PAGE_LONG_SIDE_PT = 792;

/** The sandbox's limits (inspect.ts InspectLimits), read for images. */
interface InspectLimits {
  /** Pages of one TIFF. */
  maxPages: number;
  /** Decoded bytes of one image, as its header declares it. */
  maxStreamBytes: number;
  /** Decoded bytes of all pages of one TIFF. */
  maxDecodedBytes: number;
}

const labels: Record<Exclude<DocumentFormat, 'pdf'>, string> = { tiff: 'TIFF', jpeg: 'JPEG', png: 'PNG' };

interface Raster {
  width: number;
  height: number;
  /** Horizontal over vertical resolution: 2 for a 204 x 98 dpi fax page. */
  aspect: number;
}

/** The PDF made of the image's pages; a DocumentError with a named reason when it is refused. */
export async function imageToPdf(
  bytes: Uint8Array,
  name: string,
  format: Exclude<DocumentFormat, 'pdf'>,
  limits: InspectLimits,
): Promise<Uint8Array> {
  const label = labels[format];
  const doc = await PDFDocument.create({ updateMetadata: false });
  try {
    if (format === 'tiff') tiffPages(doc, bytes, name, limits);
    else if (format === 'jpeg') await jpegPage(doc, bytes, name, limits);
    else await pngPage(doc, bytes, name, limits);
  } catch (err) {
    if (err instanceof DocumentError) throw err;
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the ${label} cannot be read (${readableReason(err)})`,
    );
  }
  return doc.save({ useObjectStreams: false });
}

function tooLarge(
  name: string,
  what: string,
  w: number,
  h: number,
  bytes: number,
  max: number,
): DocumentError {
  return new DocumentError(
    imageCodes.tooLarge,
    `${name}: ${what} measures ${w} x ${h} pixels, ${bytes} bytes decoded; at most ${max} are accepted per image`,
  );
}

/** The page of an image: its long side PAGE_LONG_SIDE_PT, its sides in the image's proportions. */
function pageSize(r: Raster): [number, number] {
  const w = r.width * (1 / r.aspect);
  const h = r.height;
  const k = PAGE_LONG_SIDE_PT / Math.max(w, h);
  return [Math.max(w * k, 0.01), Math.max(h * k, 0.01)];
}

// ---- TIFF

type Ifd = UTIF.IFD;

/**
 * Compressions utif2 decodes (TIFF tag 259): none, CCITT RLE, G3, G4, LZW, old and new JPEG, Deflate
 * (both numbers), PackBits. For others it would leave the page blank rather than fail.
 */
const TIFF_COMPRESSIONS = new Set([1, 2, 3, 4, 5, 6, 7, 8, 32946, 32773]);

/** A tag's first value; a RATIONAL (utif2 gives [numerator, denominator]) divided out. */
function tag(ifd: Ifd, n: number): number | undefined {
  const v = ifd[`t${n}`] as unknown;
  if (!Array.isArray(v)) return undefined;
  const first = v[0] as unknown;
  if (typeof first === 'number') return first;
  if (Array.isArray(first) && typeof first[0] === 'number' && typeof first[1] === 'number' && first[1] !== 0)
    return first[0] / first[1];
  return undefined;
}

/** Most image directories in one TIFF's chain (pages, thumbnails); a page needs one each. */
const MAX_TIFF_DIRECTORIES = 10_000;
/** Tags whose values utif2 reads as offsets of further directories, following them recursively. */
const SUB_DIRECTORY_TAGS = new Set([330, 34665, 34853, 37500, 50740, 61440]);
/** A tag of no meaning (private range) that a sub-directory tag is renamed to, for utif2 to ignore. */
const IGNORED_TAG = 65000;
/** Bytes per value of each TIFF field type utif2 expands into an array (others it skips). */
const TYPE_BYTES: Record<number, number> = {
  1: 1,
  2: 1,
  3: 2,
  4: 4,
  5: 8,
  7: 1,
  8: 2,
  9: 4,
  10: 8,
  11: 4,
  12: 8,
  13: 4,
};

/**
 * Walks a TIFF's chain of image directories the way utif2's `decode` will, before it does, and makes
 * it safe to read: utif2 follows each directory's next-directory offset, and the offsets of sub-
 * directory tags (SubIFDs, Exif, GPS, …), without remembering where it has been, and expands each
 * tag's declared number of values whatever the file holds. So a directory pointing back to itself
 * or an earlier one (a 142-byte file) made it read the same directory until the sandbox's memory
 * cap (issue 27, finding 6). Refused as broken here, at once: a directory visited twice, more than
 * MAX_TIFF_DIRECTORIES in the chain, a tag whose values lie beyond the end of the file, or tags
 * declaring more values in all than twice the file holds, or a directory running past the end of
 * the file. `buf` (our own copy) is changed so that utif2 reads exactly the chain walked here: a
 * next-directory offset past the end of the file is set to 0 (utif2 would read an empty directory
 * of zeros there, as the end of a cut-off file), and sub-directory tags are renamed to a tag it ignores
 * (nothing here reads sub-directories). Throws a DocumentError (image_broken) naming the cause.
 */
function walkTiffDirectories(buf: ArrayBuffer, name: string): void {
  const data = new DataView(buf);
  const size = buf.byteLength;
  const broken = (why: string) =>
    new DocumentError(imageCodes.broken, `${name}: the TIFF's directory cannot be read (${why})`);
  if (size < 8) throw broken('the file is shorter than a TIFF header');
  const le = data.getUint8(0) === 0x49;
  const u16 = (at: number) => data.getUint16(at, le);
  const u32 = (at: number) => data.getUint32(at, le);
  const seen = new Set<number>();
  let values = 0;
  const maxValues = 2 * size + 65_536;
  // Where the offset of the next directory is: the header's, then each directory's last 4 bytes.
  let pointer = 4;
  for (let ifd = u32(pointer); ifd !== 0; ifd = u32(pointer)) {
    if (ifd + 2 > size) {
      data.setUint32(pointer, 0, le); // past the end: utif2 would read an empty directory of zeros
      return;
    }
    if (seen.has(ifd)) throw broken(`the chain of image directories loops back to offset ${ifd}`);
    if (seen.size >= MAX_TIFF_DIRECTORIES)
      throw broken(`more than ${MAX_TIFF_DIRECTORIES} image directories`);
    seen.add(ifd);
    const count = u16(ifd);
    // (utif2 would read what lies past the end as zeros, in parts of entries and offsets too.)
    if (ifd + 2 + count * 12 + 4 > size) throw broken('an image directory runs past the end of the file');
    // utif2 stops the chain at a directory whose first entry has an unknown field type.
    if (count !== 0 && (u16(ifd + 4) < 1 || u16(ifd + 4) > 13)) return;
    for (let i = 0; i < count; i++) {
      const at = ifd + 2 + i * 12;
      const tag = u16(at);
      const bytes = (TYPE_BYTES[u16(at + 2)] ?? 0) * u32(at + 4);
      if (bytes > 4 && u32(at + 8) + bytes > size)
        throw broken(`tag ${tag} declares ${u32(at + 4)} values, beyond the end of the file`);
      values += bytes;
      if (values > maxValues)
        throw broken(
          `its tags declare more values than the file holds (${values} bytes in a file of ${size})`,
        );
      if (SUB_DIRECTORY_TAGS.has(tag)) data.setUint16(at, IGNORED_TAG, le);
    }
    pointer = ifd + 2 + count * 12;
  }
}

function tiffPages(doc: PDFDocument, bytes: Uint8Array, name: string, limits: InspectLimits): void {
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  walkTiffDirectories(buf, name);
  let ifds: Ifd[];
  try {
    ifds = UTIF.decode(buf);
  } catch (err) {
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the TIFF's directory cannot be read (${readableReason(err)})`,
    );
  }
  const pages = ifds.filter((d) => tag(d, 256) !== undefined && tag(d, 257) !== undefined);
  if (pages.length === 0)
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the TIFF holds no readable image directory (it is cut off or damaged)`,
    );
  if (pages.length > limits.maxPages)
    throw new DocumentError(
      imageCodes.tooManyPages,
      `${name}: the TIFF has ${pages.length} pages; at most ${limits.maxPages} are accepted per document`,
    );
  // Everything declared is checked before anything is decoded.
  let total = 0;
  for (const [i, ifd] of pages.entries()) {
    const w = tag(ifd, 256)!;
    const h = tag(ifd, 257)!;
    const spp = tag(ifd, 277) ?? 1;
    const bps = tag(ifd, 258) ?? 1;
    const compression = tag(ifd, 259) ?? 1;
    if (!TIFF_COMPRESSIONS.has(compression))
      throw new DocumentError(
        imageCodes.broken,
        `${name}: page ${i + 1} of the TIFF uses compression ${compression}, which this service cannot decode (accepted: none, CCITT G3/G4, LZW, JPEG, Deflate, PackBits)`,
      );
    const direct = spp === 1 && (bps === 1 || bps === 8);
    // What the decoder allocates: the page as stored, and for other than bilevel or 8-bit gray its
    // RGBA copy.
    const declared = Math.ceil((w * bps * spp) / 8) * h + (direct ? 0 : w * h * 4);
    if (!(w > 0 && h > 0) || !Number.isFinite(declared) || declared > limits.maxStreamBytes)
      throw tooLarge(name, `page ${i + 1} of the TIFF`, w, h, declared, limits.maxStreamBytes);
    total += declared;
    if (total > limits.maxDecodedBytes)
      throw new DocumentError(
        imageCodes.tooLarge,
        `${name}: the TIFF's pages decode to more than ${limits.maxDecodedBytes} bytes in total, the limit per document (passed at page ${i + 1})`,
      );
  }
  for (const [i, ifd] of pages.entries()) {
    try {
      UTIF.decodeImage(buf, ifd);
    } catch (err) {
      throw new DocumentError(
        imageCodes.broken,
        `${name}: page ${i + 1} of the TIFF cannot be decoded (${readableReason(err)})`,
      );
    }
    const w = tag(ifd, 256)!;
    const h = tag(ifd, 257)!;
    const compression = tag(ifd, 259) ?? 1;
    if (!(ifd.data instanceof Uint8Array) || ifd.data.length === 0)
      throw new DocumentError(
        imageCodes.broken,
        `${name}: page ${i + 1} of the TIFF uses a compression this service cannot decode (${compression})`,
      );
    const xr = tag(ifd, 282);
    const yr = tag(ifd, 283);
    const aspect = xr && yr && xr > 0 && yr > 0 ? xr / yr : 1;
    const photometric = tag(ifd, 262) ?? 0;
    const bilevel = (tag(ifd, 277) ?? 1) === 1 && (tag(ifd, 258) ?? 1) === 1 && photometric <= 1;
    const stride = Math.ceil(w / 8);
    if (bilevel && ifd.data.length >= stride * h) {
      // WhiteIsZero (0): a 1 bit is black; BlackIsZero (1): a 1 bit is white. DeviceGray: 1 is white.
      const decode = photometric === 0 ? [1, 0] : [0, 1];
      addRaster(doc, { width: w, height: h, aspect }, ifd.data.subarray(0, stride * h), 1, decode);
    } else if (
      (tag(ifd, 277) ?? 1) === 1 &&
      tag(ifd, 258) === 8 &&
      photometric <= 1 &&
      ifd.data.length >= w * h
    ) {
      // 8-bit gray as it is; WhiteIsZero (0) inverted by the Decode array.
      addRaster(
        doc,
        { width: w, height: h, aspect },
        ifd.data.subarray(0, w * h),
        8,
        photometric === 0 ? [1, 0] : [0, 1],
      );
    } else {
      const rgba = UTIF.toRGBA8(ifd);
      if (rgba.length < w * h * 4)
        throw new DocumentError(
          imageCodes.broken,
          `${name}: page ${i + 1} of the TIFF has fewer pixels than it declares (its data is cut short)`,
        );
      addRaster(doc, { width: w, height: h, aspect }, gray(rgba, w * h), 8, [0, 1]);
    }
    // The decoded page is not needed any more: free it before the next one.
    (ifd as { data: Uint8Array | null }).data = null;
  }
}

/** RGBA to 8-bit gray (ITU-R BT.601 luma), transparent parts on white paper. */
function gray(rgba: Uint8Array, pixels: number): Uint8Array {
  const out = new Uint8Array(pixels);
  for (let p = 0, q = 0; p < pixels; p++, q += 4) {
    const a = rgba[q + 3]!;
    const y = (rgba[q]! * 299 + rgba[q + 1]! * 587 + rgba[q + 2]! * 114) / 1000;
    out[p] = Math.round((y * a + 255 * (255 - a)) / 255);
  }
  return out;
}

/** One page showing `data` (DeviceGray rows of `bpc` bits) across the whole page. */
function addRaster(doc: PDFDocument, r: Raster, data: Uint8Array, bpc: 1 | 8, decode: number[]): void {
  const stream = doc.context.stream(deflateSync(data), {
    Type: 'XObject',
    Subtype: 'Image',
    Width: r.width,
    Height: r.height,
    ColorSpace: 'DeviceGray',
    BitsPerComponent: bpc,
    Decode: decode,
    Filter: 'FlateDecode',
  });
  placeImage(doc, doc.context.register(stream), r);
}

/** A page of the image's proportions, the image `ref` drawn across all of it. */
function placeImage(doc: PDFDocument, ref: PDFRef, r: Raster): PDFPage {
  const [pw, ph] = pageSize(r);
  const page = doc.addPage([pw, ph]);
  const im = page.node.newXObject('Im', ref);
  page.pushOperators(
    pushGraphicsState(),
    concatTransformationMatrix(pw, 0, 0, ph, 0, 0),
    drawObject(im),
    popGraphicsState(),
  );
  return page;
}

// ---- JPEG

interface JpegHeader {
  width: number;
  height: number;
  components: number;
  precision: number;
  aspect: number;
  /** Clockwise degrees the picture is to be turned, from its EXIF Orientation (mirroring ignored). */
  rotate: 0 | 90 | 180 | 270;
}

/** EXIF Orientation (1..8) to clockwise degrees; the mirrored orientations lose their mirroring. */
const EXIF_ROTATION: Record<number, 0 | 90 | 180 | 270> = { 3: 180, 4: 180, 5: 270, 6: 90, 7: 90, 8: 270 };

/** The Orientation tag (0x0112) of an APP1 Exif segment's first IFD, or 1. */
function exifOrientation(b: Buffer, seg: number, end: number): number {
  const t = seg + 6; // "Exif\0\0", then a TIFF header
  if (t + 8 > end) return 1;
  const le = b.toString('latin1', t, t + 2) === 'II';
  const u16 = (o: number) => (le ? b.readUInt16LE(o) : b.readUInt16BE(o));
  const u32 = (o: number) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  const ifd = t + u32(t + 4);
  if (ifd + 2 > end) return 1;
  const n = u16(ifd);
  for (let k = 0; k < n && ifd + 2 + k * 12 + 12 <= end; k++) {
    const e = ifd + 2 + k * 12;
    if (u16(e) === 0x0112) return u16(e + 8);
  }
  return 1;
}

/**
 * Reads a JPEG marker by marker up to its first scan: the frame header (SOFn), the pixel aspect
 * from JFIF's APP0; and checks that an end-of-image marker follows the scan. Returns what is wrong
 * as a reason, or the header.
 */
function jpegHeader(b: Buffer): JpegHeader | string {
  let aspect = 1;
  let orientation = 1;
  let frame: Omit<JpegHeader, 'aspect' | 'rotate'> | null = null;
  let i = 2;
  while (i + 4 <= b.length) {
    if (b[i] !== 0xff) return `its marker at byte ${i} is damaged`;
    const marker = b[i + 1]!;
    if (marker === 0xff) {
      i++;
      continue;
    }
    const len = b.readUInt16BE(i + 2);
    const seg = i + 4;
    if (len < 2 || seg + len - 2 > b.length) return 'it is truncated (a header segment is cut off)';
    if (marker === 0xe0 && b.toString('latin1', seg, seg + 5) === 'JFIF\0' && len >= 16) {
      const xd = b.readUInt16BE(seg + 8);
      const yd = b.readUInt16BE(seg + 10);
      if (xd > 0 && yd > 0) aspect = xd / yd;
    }
    if (marker === 0xe1 && b.toString('latin1', seg, seg + 6) === 'Exif\0\0')
      orientation = exifOrientation(b, seg, seg + len - 2);
    // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      if (len < 8) return 'its frame header is cut short';
      if (marker === 0xc3 || marker === 0xc7 || marker === 0xcb || marker === 0xcf)
        return 'it is a lossless JPEG, which the renderer does not decode';
      frame = {
        precision: b[seg]!,
        height: b.readUInt16BE(seg + 1),
        width: b.readUInt16BE(seg + 3),
        components: b[seg + 5]!,
      };
    }
    if (marker === 0xda) {
      if (!frame) return 'it has no frame header (SOF) before its image data';
      // Entropy-coded data never holds FF D9 (an FF in it is followed by 00 or a restart marker).
      if (b.lastIndexOf(Buffer.from([0xff, 0xd9])) < seg + len - 2)
        return 'it is truncated (no end-of-image marker after its image data)';
      return { ...frame, aspect, rotate: EXIF_ROTATION[orientation] ?? 0 };
    }
    i = seg + len - 2;
  }
  return frame ? 'it is truncated (its image data is missing)' : 'it has no frame header (SOF)';
}

function jpegPage(doc: PDFDocument, bytes: Uint8Array, name: string, limits: InspectLimits): Promise<void> {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const head = jpegHeader(b);
  if (typeof head === 'string')
    throw new DocumentError(imageCodes.broken, `${name}: the JPEG cannot be read: ${head}`);
  if (head.width === 0 || head.height === 0)
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the JPEG cannot be read: its frame declares no size`,
    );
  if (head.precision !== 8)
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the JPEG has ${head.precision}-bit samples; the renderer decodes 8-bit JPEGs only`,
    );
  if (![1, 3, 4].includes(head.components))
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the JPEG has ${head.components} colour components; 1 (gray), 3 (colour) or 4 (CMYK) are accepted`,
    );
  const declared = head.width * head.height * head.components;
  if (declared > limits.maxStreamBytes)
    throw tooLarge(name, 'the JPEG', head.width, head.height, declared, limits.maxStreamBytes);
  // Embedded as it is (DCTDecode): PDFium decodes it when rendering, in the render process.
  const cs = head.components === 1 ? 'DeviceGray' : head.components === 3 ? 'DeviceRGB' : 'DeviceCMYK';
  // Adobe's CMYK JPEGs are stored inverted: the usual Decode array turns them back, as viewers do.
  const adobe = b.indexOf('Adobe', 0, 'latin1') >= 0 && head.components === 4;
  const stream = doc.context.stream(Uint8Array.from(bytes), {
    Type: 'XObject',
    Subtype: 'Image',
    Width: head.width,
    Height: head.height,
    ColorSpace: cs,
    BitsPerComponent: 8,
    Filter: 'DCTDecode',
    ...(adobe ? { Decode: [1, 0, 1, 0, 1, 0, 1, 0] } : {}),
  });
  const page = placeImage(doc, doc.context.register(stream), {
    width: head.width,
    height: head.height,
    aspect: head.aspect,
  });
  // A phone's photo is stored as the sensor saw it and turned by its EXIF Orientation, as viewers do.
  if (head.rotate) page.setRotation(degrees(head.rotate));
  return Promise.resolve();
}

// ---- PNG

const PNG_COLORS: Record<number, number> = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };

async function pngPage(
  doc: PDFDocument,
  bytes: Uint8Array,
  name: string,
  limits: InspectLimits,
): Promise<void> {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length < 33 || b.toString('latin1', 12, 16) !== 'IHDR')
    throw new DocumentError(imageCodes.broken, `${name}: the PNG has no header chunk (IHDR)`);
  const damaged = damagedChunk(b);
  if (damaged) throw new DocumentError(imageCodes.broken, `${name}: ${damaged}`);
  const width = b.readUInt32BE(16);
  const height = b.readUInt32BE(20);
  const depth = b[24]!;
  const colorType = b[25]!;
  const interlaced = b[28] === 1;
  const colors = PNG_COLORS[colorType];
  if (colors === undefined || ![1, 2, 4, 8, 16].includes(depth))
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the PNG's header is invalid (colour type ${colorType}, ${depth} bits)`,
    );
  let aspect = 1;
  const phys = findChunk(b, 'pHYs');
  if (phys !== null && phys + 8 <= b.length) {
    const x = b.readUInt32BE(phys);
    const y = b.readUInt32BE(phys + 4);
    if (x > 0 && y > 0) aspect = x / y;
  }
  const raster = { width, height, aspect };
  const transparent = colorType === 4 || colorType === 6 || findChunk(b, 'tRNS') !== null;
  if (!interlaced && !transparent) {
    // The common case, decoded by no one here: the PNG's own compressed rows (its IDAT chunks, their
    // checksums verified above) become the image stream, with PNG's row predictors declared, which
    // PDFium undoes when rendering. The decompression budget then counts that stream like any other.
    const declared = Math.ceil((width * colors * depth) / 8) * height;
    if (!(width > 0 && height > 0) || declared > limits.maxStreamBytes)
      throw tooLarge(name, 'the PNG', width, height, declared, limits.maxStreamBytes);
    let colorSpace: unknown = colors === 1 ? 'DeviceGray' : 'DeviceRGB';
    if (colorType === 3) {
      const plte = chunkData(b, 'PLTE');
      if (!plte || plte.length % 3 !== 0 || plte.length === 0)
        throw new DocumentError(
          imageCodes.broken,
          `${name}: the PNG has colour indexes but no valid palette`,
        );
      colorSpace = [
        PDFName.of('Indexed'),
        PDFName.of('DeviceRGB'),
        plte.length / 3 - 1,
        PDFHexString.of(plte.toString('hex')),
      ];
    }
    const stream = doc.context.stream(Buffer.concat(chunksOf(b, 'IDAT')), {
      Type: 'XObject',
      Subtype: 'Image',
      Width: width,
      Height: height,
      ColorSpace: colorSpace as string,
      BitsPerComponent: depth,
      Filter: 'FlateDecode',
      DecodeParms: { Predictor: 15, Colors: colors, BitsPerComponent: depth, Columns: width },
    });
    placeImage(doc, doc.context.register(stream), raster);
    return;
  }
  // With transparency or interlacing: pdf-lib decodes it (an RGBA copy, then the RGB and alpha
  // planes: about 8 bytes a pixel) and embeds it with its alpha as a soft mask.
  const declared = width * height * 4;
  if (!(width > 0 && height > 0) || declared > limits.maxStreamBytes)
    throw tooLarge(name, 'the PNG', width, height, declared, limits.maxStreamBytes);
  let img;
  try {
    // A copy of its own: pdf-lib reads the whole underlying buffer, ignoring a view's offset.
    img = await doc.embedPng(Uint8Array.from(bytes));
  } catch (err) {
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the PNG's image data cannot be decoded (${readableReason(err)})`,
    );
  }
  const [pw, ph] = pageSize(raster);
  doc.addPage([pw, ph]).drawImage(img, { x: 0, y: 0, width: pw, height: ph });
}

/** The data of every chunk of `type`, in order. */
function chunksOf(b: Buffer, type: string): Buffer[] {
  const out: Buffer[] = [];
  let i = 8;
  while (i + 8 <= b.length) {
    const len = b.readUInt32BE(i);
    if (b.toString('latin1', i + 4, i + 8) === type) out.push(b.subarray(i + 8, i + 8 + len));
    i += 12 + len;
  }
  return out;
}

function chunkData(b: Buffer, type: string): Buffer | null {
  return chunksOf(b, type)[0] ?? null;
}

/** Offset of the data of the first chunk of `type`, or null. */
function findChunk(b: Buffer, type: string): number | null {
  let i = 8;
  while (i + 8 <= b.length) {
    const len = b.readUInt32BE(i);
    if (b.toString('latin1', i + 4, i + 8) === type) return i + 8;
    i += 12 + len;
  }
  return null;
}

/** What is wrong with the PNG's chunks (cut off, a checksum that does not match), or null. */
function damagedChunk(b: Buffer): string | null {
  let i = 8;
  while (i + 12 <= b.length) {
    const len = b.readUInt32BE(i);
    const type = b.toString('latin1', i + 4, i + 8);
    if (i + 12 + len > b.length) return `the PNG is truncated (its ${type} chunk is cut off)`;
    if (crc32(b.subarray(i + 4, i + 8 + len)) !== b.readUInt32BE(i + 8 + len))
      return `the PNG is damaged (the checksum of its ${type} chunk does not match)`;
    if (type === 'IEND') return null;
    i += 12 + len;
  }
  return 'the PNG is truncated (no IEND chunk at its end)';
}
