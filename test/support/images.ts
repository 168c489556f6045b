// Test images made here, byte by byte: PNG (zlib), JPEG (jpeg-js's encoder) and uncompressed TIFF,
// which libtiff's tiffcp then recompresses (G3, G4, LZW, Deflate, PackBits, JPEG), so the service
// reads files written by the reference implementation. Each shows a black frame and a black bar
// on white, so a rendered page can be checked for both.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deflateSync } from 'node:zlib';
import jpeg from 'jpeg-js';

/** Gray level (0 black .. 255 white) of the test picture at (x, y): a frame, a bar, a gray band. */
export function testPixel(x: number, y: number, w: number, h: number): number {
  const frame = Math.max(2, Math.round(Math.min(w, h) / 50));
  if (x < frame || y < frame || x >= w - frame || y >= h - frame) return 0;
  if (y > h * 0.2 && y < h * 0.3 && x > w * 0.1 && x < w * 0.9) return 0;
  if (y > h * 0.6 && y < h * 0.7) return 128;
  return 255;
}

/** The CRC of PNG chunks. */
export function crc32(b: Buffer): number {
  let c = ~0;
  for (const byte of b) {
    c ^= byte;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
  }
  return ~c >>> 0;
}

function chunk(type: string, data: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}

/** PNG kinds: 8-bit gray, 16-bit gray, indexed colour, RGB with alpha (half-transparent band), interlaced gray. */
export type PngKind = 'gray' | 'gray16' | 'palette' | 'rgba' | 'interlaced';

/** A PNG of the test picture, with a pHYs chunk when `dpi` is given. */
export function makePng(w: number, h: number, dpi?: [number, number], kind: PngKind = 'gray'): Buffer {
  const bpp = { gray: 1, gray16: 2, palette: 1, rgba: 4, interlaced: 1 }[kind];
  const row = (y: number) => {
    const r = Buffer.alloc(1 + w * bpp);
    for (let x = 0; x < w; x++) {
      const g = testPixel(x, y, w, h);
      const at = 1 + x * bpp;
      if (kind === 'gray16') r.writeUInt16BE(g * 257, at);
      else if (kind === 'palette') r[at] = g === 0 ? 0 : g === 255 ? 2 : 1;
      else if (kind === 'rgba') {
        // The gray band as black at half opacity: on white paper, the same 50 % gray.
        const band = g === 128;
        r.fill(band ? 0 : g, at, at + 3);
        r[at + 3] = band ? 128 : 255;
      } else r[at] = g;
    }
    return r;
  };
  let raw: Buffer;
  if (kind === 'interlaced') {
    // Adam7: seven passes, each a sub-image of its own rows.
    const passes: [number, number, number, number][] = [
      [0, 0, 8, 8],
      [4, 0, 8, 8],
      [0, 4, 4, 8],
      [2, 0, 4, 4],
      [0, 2, 2, 4],
      [1, 0, 2, 2],
      [0, 1, 1, 2],
    ];
    const rows: Buffer[] = [];
    for (const [x0, y0, dx, dy] of passes) {
      if (x0 >= w || y0 >= h) continue;
      for (let y = y0; y < h; y += dy) {
        const full = row(y);
        const xs: number[] = [];
        for (let x = x0; x < w; x += dx) xs.push(full[1 + x]!);
        rows.push(Buffer.from([0, ...xs]));
      }
    }
    raw = Buffer.concat(rows);
  } else raw = Buffer.concat(Array.from({ length: h }, (_, y) => row(y)));
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = kind === 'gray16' ? 16 : 8; // bit depth
  ihdr[9] = { gray: 0, gray16: 0, palette: 3, rgba: 6, interlaced: 0 }[kind]; // colour type
  ihdr[12] = kind === 'interlaced' ? 1 : 0;
  const parts = [Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr)];
  if (kind === 'palette') parts.push(chunk('PLTE', Buffer.from([0, 0, 0, 128, 128, 128, 255, 255, 255])));
  if (dpi) {
    const phys = Buffer.alloc(9);
    phys.writeUInt32BE(Math.round(dpi[0] / 0.0254), 0);
    phys.writeUInt32BE(Math.round(dpi[1] / 0.0254), 4);
    phys[8] = 1;
    parts.push(chunk('pHYs', phys));
  }
  parts.push(chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0)));
  return Buffer.concat(parts);
}

/** An APP1 Exif payload holding only the Orientation tag (1..8). */
function exifOrientation(orientation: number): Buffer {
  const b = Buffer.alloc(6 + 8 + 2 + 12 + 4);
  b.write('Exif\0\0', 0, 'latin1');
  b.write('II*\0', 6, 'latin1');
  b.writeUInt32LE(8, 10); // first IFD right after the header
  b.writeUInt16LE(1, 14);
  b.writeUInt16LE(0x0112, 16);
  b.writeUInt16LE(3, 18); // SHORT
  b.writeUInt32LE(1, 20);
  b.writeUInt16LE(orientation, 24);
  return b;
}

/** A baseline JPEG of the test picture (RGB), with an EXIF Orientation when given. */
export function makeJpeg(w: number, h: number, orientation?: number): Buffer {
  const data = Buffer.alloc(w * h * 4);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      const g = testPixel(x, y, w, h);
      data.fill(g, (y * w + x) * 4, (y * w + x) * 4 + 3);
      data[(y * w + x) * 4 + 3] = 255;
    }
  const exif = orientation === undefined ? {} : { exifBuffer: exifOrientation(orientation) };
  return jpeg.encode({ data, width: w, height: h, ...exif }, 90).data;
}

interface TiffPage {
  w: number;
  h: number;
  /** 1: bilevel (WhiteIsZero, a 1 bit is black), 8: gray (BlackIsZero), 24: RGB. */
  bits: 1 | 8 | 24;
  /** The Compression tag (default 1, none): only to write a tag no decoder knows. */
  compression?: number;
  xDpi: number;
  yDpi: number;
}

/** An uncompressed, little-endian, multi-page TIFF of the test picture. */
export function makeTiff(pages: TiffPage[]): Buffer {
  const parts: Buffer[] = [];
  let offset = 8;
  const header = Buffer.from([0x49, 0x49, 0x2a, 0x00, 0, 0, 0, 0]);
  parts.push(header);
  let prevNext = 4; // where the previous "next IFD" offset goes
  const patches: [number, number][] = [];
  for (const p of pages) {
    const stride = p.bits === 1 ? Math.ceil(p.w / 8) : (p.w * p.bits) / 8;
    const pixels = Buffer.alloc(stride * p.h);
    for (let y = 0; y < p.h; y++)
      for (let x = 0; x < p.w; x++) {
        const g = testPixel(x, y, p.w, p.h);
        if (p.bits === 8) pixels[y * stride + x] = g;
        else if (p.bits === 24) {
          // A colour picture: the gray levels as a blue-ish tint, whose luma keeps the gray's order.
          pixels[y * stride + 3 * x] = g;
          pixels[y * stride + 3 * x + 1] = g;
          pixels[y * stride + 3 * x + 2] = Math.min(255, g + 40);
        } else if (g < 128) pixels[y * stride + (x >> 3)]! |= 0x80 >> (x & 7);
      }
    const dataAt = offset;
    parts.push(pixels);
    offset += pixels.length;
    if (offset % 2) {
      parts.push(Buffer.alloc(1));
      offset++;
    }
    const resAt = offset;
    const res = Buffer.alloc(16);
    res.writeUInt32LE(p.xDpi, 0);
    res.writeUInt32LE(1, 4);
    res.writeUInt32LE(p.yDpi, 8);
    res.writeUInt32LE(1, 12);
    parts.push(res);
    offset += 16;
    // tag, type (3 SHORT, 4 LONG, 5 RATIONAL), value
    const tags: [number, number, number][] = [
      [256, 4, p.w],
      [257, 4, p.h],
      [258, 3, p.bits === 24 ? 8 : p.bits],
      [259, 3, p.compression ?? 1],
      [262, 3, p.bits === 1 ? 0 : p.bits === 24 ? 2 : 1],
      [273, 4, dataAt],
      [277, 3, p.bits === 24 ? 3 : 1],
      [278, 4, p.h],
      [279, 4, pixels.length],
      [282, 5, resAt],
      [283, 5, resAt + 8],
      [296, 3, 2],
    ];
    const ifd = Buffer.alloc(2 + tags.length * 12 + 4);
    ifd.writeUInt16LE(tags.length, 0);
    tags.forEach(([tag, type, value], i) => {
      const at = 2 + i * 12;
      ifd.writeUInt16LE(tag, at);
      ifd.writeUInt16LE(type, at + 2);
      ifd.writeUInt32LE(1, at + 4);
      if (type === 3) ifd.writeUInt16LE(value, at + 8);
      else ifd.writeUInt32LE(value, at + 8);
    });
    patches.push([prevNext, offset]);
    prevNext = offset + 2 + tags.length * 12;
    parts.push(ifd);
    offset += ifd.length;
  }
  const out = Buffer.concat(parts);
  for (const [at, value] of patches) out.writeUInt32LE(value, at);
  return out;
}

/** `tiff` recompressed by libtiff's tiffcp (`-c g4`, `-c lzw`, `-c jpeg`, …), in strips of 16 rows. */
export function tiffcp(tiff: Buffer, compression: string): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-tiff-'));
  try {
    writeFileSync(join(dir, 'in.tif'), tiff);
    execFileSync('tiffcp', ['-c', compression, '-r', '16', join(dir, 'in.tif'), join(dir, 'out.tif')], {
      stdio: 'pipe',
    });
    return readFileSync(join(dir, 'out.tif'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
