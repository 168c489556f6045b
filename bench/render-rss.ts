// Child process of the render benchmark: prepares one PDF (check in the sandbox + cover + render in
// a pool of the default size, RENDER_PROCESSES=1) and prints the peak resident set size of the whole
// process, workers included.
import { readFileSync } from 'node:fs';
import { prepareDocuments } from '../src/documents/prepare.ts';
import { PdfSandbox, defaultFaxLimits, defaultSandboxLimits } from '../src/documents/check.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import { benchCover } from './render-cover.ts';

const [file, quality] = process.argv.slice(2) as [string, 'low' | 'standard' | 'hd'];
const content = readFileSync(file);
const pool = new RenderPool();
const sandbox = new PdfSandbox(defaultSandboxLimits);
const t = performance.now();
const p = await prepareDocuments(
  [{ file_name: 'corpus.pdf', file_url: null, content }],
  quality,
  async () => {
    throw new Error('no fetching in the benchmark');
  },
  AbortSignal.timeout(600_000),
  { cover: benchCover, pool, checks: { pdf: sandbox, faxLimits: defaultFaxLimits } },
);
const seconds = (performance.now() - t) / 1000;
await pool.close();
await sandbox.close();
process.stdout.write(
  JSON.stringify({
    pages: p.pageCount,
    seconds,
    threads: pool.size,
    tiffBytes: p.tiff.length,
    maxRssMiB: Math.round((process.resourceUsage().maxRSS / 1024) * 10) / 10,
  }),
);
