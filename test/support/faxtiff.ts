// Fax images for tests, made by libtiff's own tools (ppm2tiff, tiffset, tiffcp) so that the engine
// is fed files that no code of ours wrote: bilevel, 1728 wide, G4, fax resolutions.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const lineDpi = { low: 98, standard: 196, hd: 391 } as const;

/** The directories of the images made here: removed when the test process exits. */
const dirs: string[] = [];
process.once('exit', () => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function imageDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-tif-'));
  dirs.push(dir);
  return dir;
}

/** A Letter-length page of text-like lines of "words" (black runs), `seed` varying the content. */
function pbm(lines: number, seed: number): Buffer {
  const w = 1728;
  const row = w / 8;
  const out = Buffer.alloc(row * lines);
  const lineH = Math.max(4, Math.round(lines / 110)); // about 50 text lines per page with gaps
  let x = seed * 7919 + 1;
  const rnd = () => (x = (x * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  for (let top = lineH * 4; top + lineH < lines - lineH * 4; top += lineH * 2) {
    let col = 12;
    while (col < row - 14) {
      const word = 1 + Math.floor(rnd() * 6);
      for (let y = top; y < top + lineH; y++) for (let b = col; b < col + word; b++) out[y * row + b] = 0xff;
      col += word + 1 + Math.floor(rnd() * 2);
    }
  }
  return Buffer.concat([Buffer.from(`P4\n${w} ${lines}\n`), out]);
}

export function makeFaxTiff(pages: number, quality: keyof typeof lineDpi): string {
  const dir = imageDir();
  const lines = Math.round(11 * lineDpi[quality]);
  const parts: string[] = [];
  for (let p = 0; p < pages; p++) {
    const src = join(dir, `p${p}.pbm`);
    const tif = join(dir, `p${p}.tif`);
    writeFileSync(src, pbm(lines, p + 1));
    execFileSync('ppm2tiff', ['-c', 'g4', '-R', '204', src, tif]);
    execFileSync('tiffset', ['-s', '283', String(lineDpi[quality]), tif]); // YResolution
    parts.push(tif);
  }
  const out = join(dir, 'fax.tif');
  execFileSync('tiffcp', ['-c', 'g4', ...parts, out]);
  return out;
}

/**
 * `pages` Letter pages of text-like lines, then one page `longMm` millimetres long: white, with a
 * short black bar every `markEvery` rows (so that it is not all one run), at `quality`.
 */
export function makeLongPageTiff(
  pages: number,
  longMm: number,
  quality: keyof typeof lineDpi,
  markEvery = 200,
): string {
  const dir = imageDir();
  const lines = Math.round(11 * lineDpi[quality]);
  const longLines = Math.round((longMm / 25.4) * lineDpi[quality]);
  const row = 1728 / 8;
  const long = Buffer.alloc(row * longLines);
  for (let y = 0; y < longLines; y += markEvery) long.fill(0xff, y * row + 20, y * row + 40);
  const sources = [
    ...Array.from({ length: pages }, (_, p) => pbm(lines, p + 1)),
    Buffer.concat([Buffer.from(`P4\n1728 ${longLines}\n`), long]),
  ];
  const parts = sources.map((b, p) => {
    const src = join(dir, `p${p}.pbm`);
    const tif = join(dir, `p${p}.tif`);
    writeFileSync(src, b);
    execFileSync('ppm2tiff', ['-c', 'g4', '-R', '204', src, tif]);
    execFileSync('tiffset', ['-s', '283', String(lineDpi[quality]), tif]);
    return tif;
  });
  const out = join(dir, 'fax.tif');
  execFileSync('tiffcp', ['-c', 'g4', ...parts, out]);
  return out;
}

/** libtiff's tiffcmp: exit 0 when the images are the same pixels. */
export function sameImages(a: string, b: string): { same: boolean; output: string } {
  try {
    const output = execFileSync('tiffcmp', [a, b], { encoding: 'utf8' });
    return { same: true, output };
  } catch (err) {
    return { same: false, output: String((err as { stdout?: string }).stdout ?? err) };
  }
}
