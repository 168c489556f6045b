// Child process of the render benchmark: prepares one PDF (check + cover + render, default pool
// sized to the cores) and prints the peak resident set size of the whole process, workers included.
import { readFileSync } from 'node:fs';
import { prepareDocuments } from '../src/documents/prepare.ts';
import { closePdfChecks } from '../src/documents/check.ts';
import { renderPool } from '../src/documents/render/pool.ts';
import { benchCover } from './render-cover.ts';

const [file, quality] = process.argv.slice(2) as [string, 'low' | 'standard' | 'hd'];
const content = readFileSync(file);
const t = performance.now();
const p = await prepareDocuments(
  [{ file_name: 'corpus.pdf', file_url: null, content }],
  quality,
  async () => {
    throw new Error('no fetching in the benchmark');
  },
  AbortSignal.timeout(600_000),
  { cover: benchCover },
);
const seconds = (performance.now() - t) / 1000;
await renderPool().close();
await closePdfChecks();
process.stdout.write(
  JSON.stringify({
    pages: p.pageCount,
    seconds,
    threads: renderPool().size,
    tiffBytes: p.tiff.length,
    maxRssMiB: Math.round((process.resourceUsage().maxRSS / 1024) * 10) / 10,
  }),
);
