// A minimal PNG writer for previews: 1-bit grayscale, rows resampled to square pixels so the page
// looks as it will on paper (fax pixels are 204 dpi wide but 98, 196 or 391 dpi tall).
import { crc32, deflateSync } from 'node:zlib';

function chunk(type: string, data: Uint8Array): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(data, crc32(head.subarray(4))) >>> 0, 0);
  return Buffer.concat([head, data, crc]);
}

/**
 * Packed bilevel rows (1 = black) at xDpi x yDpi to a PNG at xDpi x xDpi (nearest row), with a pHYs
 * chunk saying so.
 */
export function bilevelToPng(
  rows: Uint8Array,
  width: number,
  height: number,
  xDpi: number,
  yDpi: number,
): Buffer {
  const rowBytes = (width + 7) >> 3;
  const outHeight = Math.max(1, Math.round((height * xDpi) / yDpi));
  const raw = Buffer.alloc((rowBytes + 1) * outHeight);
  for (let y = 0; y < outHeight; y++) {
    const src = Math.min(height - 1, Math.floor((y * yDpi) / xDpi)) * rowBytes;
    const dst = y * (rowBytes + 1); // filter byte 0 (none), then the row
    for (let i = 0; i < rowBytes; i++) raw[dst + 1 + i] = ~rows[src + i]! & 0xff; // PNG gray: 1 = white
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(outHeight, 4);
  ihdr[8] = 1; // bit depth
  ihdr[9] = 0; // grayscale
  const phys = Buffer.alloc(9);
  const ppm = Math.round(xDpi / 0.0254);
  phys.writeUInt32BE(ppm, 0);
  phys.writeUInt32BE(ppm, 4);
  phys[8] = 1; // metre
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('pHYs', phys),
    chunk('IDAT', deflateSync(raw)),
    chunk('IEND', new Uint8Array(0)),
  ]);
}
