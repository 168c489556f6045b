// Test helpers for rendered faxes: libtiff's tools as the independent reader, and a minimal reader
// of the uncompressed TIFF that `tiffcp -c none` writes, to compare pixels with our source bitmaps.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface RawPage {
  width: number;
  height: number;
  tags: Map<number, number[]>;
  /** Packed rows, ceil(width / 8) bytes each, as stored (min-is-white: 1 = black). */
  rows: Uint8Array;
}

/** Reads every IFD of a little- or big-endian uncompressed TIFF. */
export function readUncompressedTiff(buf: Buffer): RawPage[] {
  const le = buf.toString('latin1', 0, 2) === 'II';
  const u16 = (o: number) => (le ? buf.readUInt16LE(o) : buf.readUInt16BE(o));
  const u32 = (o: number) => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));
  const pages: RawPage[] = [];
  let ifd = u32(4);
  while (ifd !== 0) {
    const n = u16(ifd);
    const tags = new Map<number, number[]>();
    for (let i = 0; i < n; i++) {
      const e = ifd + 2 + i * 12;
      const tag = u16(e);
      const type = u16(e + 2);
      const count = u32(e + 4);
      const size = type === 3 ? 2 : type === 4 ? 4 : type === 5 ? 8 : 1;
      const at = count * size <= 4 ? e + 8 : u32(e + 8);
      const values: number[] = [];
      for (let k = 0; k < count; k++) {
        if (type === 3) values.push(u16(at + k * 2));
        else if (type === 4) values.push(u32(at + k * 4));
        else if (type === 5) values.push(u32(at + k * 8) / u32(at + k * 8 + 4));
        else values.push(buf[at + k]!);
      }
      tags.set(tag, values);
    }
    const width = tags.get(256)![0]!;
    const height = tags.get(257)![0]!;
    const offsets = tags.get(273)!;
    const counts = tags.get(279)!;
    const rows = Buffer.concat(offsets.map((o, i) => buf.subarray(o, o + counts[i]!)));
    pages.push({ width, height, tags, rows: new Uint8Array(rows) });
    ifd = u32(ifd + 2 + n * 12);
  }
  return pages;
}

/** Decodes a TIFF with libtiff (`tiffcp -c none`) and reads the result. */
export function decodeWithLibtiff(tiff: Uint8Array): RawPage[] {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-tiff-'));
  try {
    writeFileSync(join(dir, 'in.tif'), tiff);
    run('tiffcp', ['-c', 'none', '-f', 'msb2lsb', join(dir, 'in.tif'), join(dir, 'raw.tif')]);
    return readUncompressedTiff(readFileSync(join(dir, 'raw.tif')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs a libtiff tool on a TIFF and returns its standard output (stderr must be empty). */
export function libtiff(tool: 'tiffinfo' | 'tiffdump', tiff: Uint8Array, args: string[] = []): string {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-tiff-'));
  try {
    writeFileSync(join(dir, 'in.tif'), tiff);
    return run(tool, [...args, join(dir, 'in.tif')]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs a tool; any exit status but 0 or any warning on stderr is an error. */
function run(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.error) throw r.error;
  if (r.status !== 0 || r.stderr.trim() !== '')
    throw new Error(`${cmd} ${args.join(' ')}: exit ${r.status}: ${r.stderr.trim()}`);
  return r.stdout;
}
