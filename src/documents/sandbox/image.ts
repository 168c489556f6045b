// Images as documents: a TIFF (every page), a JPEG or a PNG becomes a PDF of one page per image,
// which then takes the PDF path unchanged (the same check, the same renderer, fax page placement,
// dithering, previews). Runs only in the sandbox process (child.ts, loaded on the first image), with
// its memory and time caps: every image's size is read from its header and held to the limits
// before a single pixel is decoded, and each is decoded in full here, so a damaged file is refused
// with a reason rather than sent as half a page.
//
// Decoders (pure JavaScript): utif2 for TIFF (uncompressed, CCITT G3/G4, LZW, PackBits, Deflate,
// JPEG; strips and tiles), jpeg-js for JPEG (baseline and progressive), pdf-lib's own PNG decoder.
// A bilevel TIFF page stays 1 bit per pixel; other TIFF pages are turned to 8-bit gray here; a JPEG
// is embedded as it is (DCTDecode: PDFium decodes it again when rendering) once jpeg-js has read it
// whole; a PNG as pdf-lib embeds it (RGB with its alpha as a soft mask, on white).
import { crc32, deflateSync } from 'node:zlib';
import jpeg from 'jpeg-js';
import {
  PDFDocument,
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

function tiffPages(doc: PDFDocument, bytes: Uint8Array, name: string, limits: InspectLimits): void {
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
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
  if (pages.length === 0) throw new DocumentError(imageCodes.broken, `${name}: the TIFF holds no image`);
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
    const bilevel = spp === 1 && bps === 1;
    // What the decoder allocates: the page as stored, and for other than bilevel its RGBA copy.
    const declared = Math.ceil((w * bps * spp) / 8) * h + (bilevel ? 0 : w * h * 4);
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
  const ref = doc.context.register(stream);
  const [pw, ph] = pageSize(r);
  const page = doc.addPage([pw, ph]);
  const im = page.node.newXObject('Im', ref);
  page.pushOperators(
    pushGraphicsState(),
    concatTransformationMatrix(pw, 0, 0, ph, 0, 0),
    drawObject(im),
    popGraphicsState(),
  );
}

// ---- JPEG

interface JpegHeader {
  width: number;
  height: number;
  components: number;
  aspect: number;
}

/** Width, height and components from the frame header (SOFn), the pixel aspect from JFIF's APP0. */
function jpegHeader(b: Buffer): JpegHeader | null {
  let aspect = 1;
  let i = 2;
  while (i + 4 <= b.length) {
    if (b[i] !== 0xff) return null;
    const marker = b[i + 1]!;
    if (marker === 0xff) {
      i++;
      continue;
    }
    const len = b.readUInt16BE(i + 2);
    const seg = i + 4;
    if (marker === 0xe0 && b.toString('latin1', seg, seg + 5) === 'JFIF\0' && seg + 12 <= b.length) {
      const xd = b.readUInt16BE(seg + 8);
      const yd = b.readUInt16BE(seg + 10);
      if (xd > 0 && yd > 0) aspect = xd / yd;
    }
    // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      if (seg + 6 > b.length) return null;
      return {
        height: b.readUInt16BE(seg + 1),
        width: b.readUInt16BE(seg + 3),
        components: b[seg + 5]!,
        aspect,
      };
    }
    if (marker === 0xda) return null; // scan data before any frame header
    i = seg + len - 2;
  }
  return null;
}

async function jpegPage(
  doc: PDFDocument,
  bytes: Uint8Array,
  name: string,
  limits: InspectLimits,
): Promise<void> {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const head = jpegHeader(b);
  if (!head || head.width === 0 || head.height === 0)
    throw new DocumentError(imageCodes.broken, `${name}: the JPEG has no readable frame header (SOF)`);
  const declared = head.width * head.height * Math.max(head.components, 1);
  if (declared > limits.maxStreamBytes)
    throw tooLarge(name, 'the JPEG', head.width, head.height, declared, limits.maxStreamBytes);
  try {
    // Decoded whole once, strictly, so a damaged file is refused here; only the header is kept.
    jpeg.decode(b, {
      useTArray: true,
      formatAsRGBA: false,
      tolerantDecoding: false,
      maxResolutionInMP: Math.ceil(limits.maxStreamBytes / 1e6),
      maxMemoryUsageInMB: Math.ceil((2 * limits.maxStreamBytes) / (1024 * 1024)),
    });
  } catch (err) {
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the JPEG's image data cannot be decoded (${jpegReason(err)})`,
    );
  }
  // A copy of its own: pdf-lib reads the whole underlying buffer, ignoring a view's offset.
  const img = await doc.embedJpg(Uint8Array.from(bytes));
  const [pw, ph] = pageSize({ width: head.width, height: head.height, aspect: head.aspect });
  doc.addPage([pw, ph]).drawImage(img, { x: 0, y: 0, width: pw, height: ph });
}

/** jpeg-js's own messages are plain descriptions ("marker was not found", …); anything else is mapped. */
function jpegReason(err: unknown): string {
  const m = String((err as Error | undefined)?.message ?? err);
  if (err instanceof Error && !(err instanceof RangeError) && !(err instanceof TypeError) && m.length < 120)
    return m.replace(/^Error: /, '');
  return readableReason(err);
}

// ---- PNG

async function pngPage(
  doc: PDFDocument,
  bytes: Uint8Array,
  name: string,
  limits: InspectLimits,
): Promise<void> {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length < 33 || b.toString('latin1', 12, 16) !== 'IHDR')
    throw new DocumentError(imageCodes.broken, `${name}: the PNG has no header chunk (IHDR)`);
  const width = b.readUInt32BE(16);
  const height = b.readUInt32BE(20);
  // pdf-lib's decoder makes an RGBA copy, then the RGB and alpha planes: about 8 bytes a pixel.
  const declared = width * height * 4;
  if (!(width > 0 && height > 0) || declared > limits.maxStreamBytes)
    throw tooLarge(name, 'the PNG', width, height, declared, limits.maxStreamBytes);
  const damaged = damagedChunk(b);
  if (damaged) throw new DocumentError(imageCodes.broken, `${name}: ${damaged}`);
  let aspect = 1;
  const phys = findChunk(b, 'pHYs');
  if (phys !== null && phys + 8 <= b.length) {
    const x = b.readUInt32BE(phys);
    const y = b.readUInt32BE(phys + 4);
    if (x > 0 && y > 0) aspect = x / y;
  }
  let img;
  try {
    img = await doc.embedPng(Uint8Array.from(bytes));
  } catch (err) {
    throw new DocumentError(
      imageCodes.broken,
      `${name}: the PNG's image data cannot be decoded (${readableReason(err)})`,
    );
  }
  const [pw, ph] = pageSize({ width, height, aspect });
  doc.addPage([pw, ph]).drawImage(img, { x: 0, y: 0, width: pw, height: ph });
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
