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

function crc32(b: Buffer): number {
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

/** An 8-bit gray PNG of the test picture, with a pHYs chunk when `dpi` is given. */
export function makePng(w: number, h: number, dpi?: [number, number]): Buffer {
  const raw = Buffer.alloc((w + 1) * h);
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) raw[y * (w + 1) + 1 + x] = testPixel(x, y, w, h);
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 0; // gray
  const parts = [Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr)];
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

/** A baseline JPEG of the test picture (RGB). */
export function makeJpeg(w: number, h: number): Buffer {
  const data = Buffer.alloc(w * h * 4);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      const g = testPixel(x, y, w, h);
      data.fill(g, (y * w + x) * 4, (y * w + x) * 4 + 3);
      data[(y * w + x) * 4 + 3] = 255;
    }
  return jpeg.encode({ data, width: w, height: h }, 90).data;
}

interface TiffPage {
  w: number;
  h: number;
  /** 1: bilevel (WhiteIsZero, a 1 bit is black), 8: gray (BlackIsZero). */
  bits: 1 | 8;
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
    const stride = p.bits === 1 ? Math.ceil(p.w / 8) : p.w;
    const pixels = Buffer.alloc(stride * p.h);
    for (let y = 0; y < p.h; y++)
      for (let x = 0; x < p.w; x++) {
        const g = testPixel(x, y, p.w, p.h);
        if (p.bits === 8) pixels[y * stride + x] = g;
        else if (g < 128) pixels[y * stride + (x >> 3)]! |= 0x80 >> (x & 7);
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
      [258, 3, p.bits],
      [259, 3, 1],
      [262, 3, p.bits === 1 ? 0 : 1],
      [273, 4, dataAt],
      [277, 3, 1],
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
