// Rendering benchmark (not a test): pages per second of check + cover + render on ONE core at each
// quality, against Ghostscript's tiffg4 device on the same PDF in the same run (Ghostscript is only
// a yardstick: it is AGPL and never a dependency of the service), and the peak memory of preparing
// a 300-page PDF. Writes bench/results/render.json and bench/results/render.md.
//
//   npm run bench:render            (PAGES=300 by default)
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultFaxLimits, defaultSandboxLimits } from '../src/documents/check.ts';
import { type DocumentChecks, prepareDocuments } from '../src/documents/prepare.ts';
import { fillTemplate } from '../src/documents/sandbox/form.ts';
import { inspectPdf } from '../src/documents/sandbox/inspect.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import { Y_DPI, type Quality } from '../src/documents/render/raster.ts';
import { benchCover } from './render-cover.ts';
import { buildCorpus, FIXTURES } from './render-corpus.ts';

const PAGES = Number(process.env.PAGES ?? 300);
const qualities: Quality[] = ['low', 'standard', 'hd'];
const dir = mkdtempSync(join(tmpdir(), 'faxline-bench-'));
/**
 * The sandbox's own inspection, run in this process so that its CPU time is counted (the service
 * runs it in a child process, whose CPU time this process cannot see).
 */
export const inProcessCheck: DocumentChecks = {
  pdf: {
    check: (bytes, name) => inspectPdf(bytes, name, defaultSandboxLimits),
    fillTemplate: (bytes, name, values, documentPages) => fillTemplate(bytes, name, values, documentPages),
  },
  faxLimits: defaultFaxLimits,
};
const noFetch = async (): Promise<Buffer> => {
  throw new Error('no fetching in the benchmark');
};

function haveGhostscript(): string | null {
  const r = spawnSync('gs', ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}

async function ours(pdf: Uint8Array, quality: Quality, threads: number) {
  const pool = new RenderPool(threads);
  try {
    // Warm-up: start the workers and load PDFium before timing.
    await Promise.all(
      Array.from({ length: pool.size }, () =>
        pool.run({ kind: 'fax-pages', pdf, first: 0, count: 1, quality: 'low' }, { timeoutMs: 60_000 }),
      ),
    );
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const p = await prepareDocuments(
      [{ file_name: 'corpus.pdf', file_url: null, content: Buffer.from(pdf) }],
      quality,
      noFetch,
      AbortSignal.timeout(600_000),
      { pool, cover: benchCover, checks: inProcessCheck },
    );
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    return {
      pages: p.pageCount,
      seconds: round(seconds),
      cpuSeconds: round((cpu.user + cpu.system) / 1e6),
      pagesPerSecond: round(p.pageCount / seconds),
      pagesPerCpuSecond: round(p.pageCount / ((cpu.user + cpu.system) / 1e6)),
      tiffBytes: p.tiff.length,
    };
  } finally {
    await pool.close();
  }
}

function ghostscript(file: string, quality: Quality) {
  const out = join(dir, `gs-${quality}.tif`);
  const args = [
    '-q',
    '-dSAFER',
    '-dBATCH',
    '-dNOPAUSE',
    '-dNumRenderingThreads=1',
    '-sDEVICE=tiffg4',
    `-r204x${Y_DPI[quality]}`,
    // 1728 pixels wide at 204 dpi, A4 long, pages fitted: the same job as ours.
    '-dDEVICEWIDTHPOINTS=610',
    '-dDEVICEHEIGHTPOINTS=842',
    '-dFIXEDMEDIA',
    '-dPDFFitPage',
    `-sOutputFile=${out}`,
    file,
  ];
  const t0 = performance.now();
  // bash's `time` reports the child's CPU seconds (user and system) on stderr.
  const r = spawnSync('bash', ['-c', 'TIMEFORMAT="CPU %3U %3S"; time "$@"', 'bash', 'gs', ...args], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  const seconds = (performance.now() - t0) / 1000;
  const cpuLine = /CPU ([\d.]+) ([\d.]+)\s*$/.exec(r.stderr);
  if (r.status !== 0 || !cpuLine) throw new Error(`gs failed: ${r.stderr}`);
  const cpuSeconds = Number(cpuLine[1]) + Number(cpuLine[2]);
  return {
    pages: PAGES,
    seconds: round(seconds),
    cpuSeconds: round(cpuSeconds),
    pagesPerSecond: round(PAGES / seconds),
    pagesPerCpuSecond: round(PAGES / cpuSeconds),
    tiffBytes: statSync(out).size,
  };
}

function rss(file: string, quality: Quality) {
  const r = spawnSync(
    process.execPath,
    [new URL('./render-rss.ts', import.meta.url).pathname, file, quality],
    {
      encoding: 'utf8',
    },
  );
  if (r.status !== 0) throw new Error(`render-rss failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as { pages: number; seconds: number; threads: number; maxRssMiB: number };
}

const round = (n: number) => Math.round(n * 100) / 100;

const pdf = await buildCorpus(PAGES);
const file = join(dir, 'corpus.pdf');
writeFileSync(file, pdf);
const gsVersion = haveGhostscript();
const rows: Record<string, unknown>[] = [];
try {
  for (const q of qualities) {
    const o = await ours(pdf, q, 1);
    const g = gsVersion ? ghostscript(file, q) : null;
    rows.push({
      quality: q,
      ours: o,
      ghostscript: g,
      ratio: g ? round(o.pagesPerCpuSecond / g.pagesPerCpuSecond) : null,
    });
    process.stderr.write(
      `${q}: faxline ${o.pagesPerCpuSecond} pages/CPU-s (${o.pagesPerSecond}/s wall)` +
        (g ? `, gs ${g.pagesPerCpuSecond} pages/CPU-s (${g.pagesPerSecond}/s wall)` : ', gs skipped') +
        '\n',
    );
  }
  const allCores = await ours(pdf, 'standard', 0);
  const memory = { standard: rss(file, 'standard'), hd: rss(file, 'hd') };
  const result = {
    when: new Date().toISOString(),
    machine: { cpus: cpus().length, model: cpus()[0]?.model ?? 'unknown', node: process.version },
    corpus: { pages: PAGES, bytes: pdf.length, from: FIXTURES },
    ghostscript: gsVersion ?? 'not installed: yardstick skipped',
    oneCore: rows,
    allCoresStandard: allCores,
    peakMemory300Pages: memory,
  };
  writeFileSync(new URL('./results/render.json', import.meta.url), JSON.stringify(result, null, 2) + '\n');
  const md = [
    `# Render benchmark`,
    ``,
    `${result.when}, ${result.machine.cpus} × ${result.machine.model}, Node ${result.machine.node}; ` +
      `corpus: ${PAGES} pages cycled from ${FIXTURES.join(', ')} (${Math.round(pdf.length / 1024)} KiB), plus a cover page. ` +
      `Ghostscript: ${result.ghostscript}.`,
    ``,
    `Pages per CPU-second is the measure of "one core": the machine is shared, so wall-clock rates`,
    `(also recorded in render.json) depend on what else runs. faxline's figure is the whole process`,
    `(the sandbox's PDF inspection, run in-process here, and the cover on the main thread; PDFium +`,
    `dithering + T.6 in one render thread).`,
    ``,
    `| quality | faxline pages/CPU-s (check + cover + render) | Ghostscript tiffg4 pages/CPU-s | ratio | faxline pages/s wall | gs pages/s wall | faxline TIFF | gs TIFF |`,
    `|---|---|---|---|---|---|---|---|`,
    ...rows.map(
      (r: any) =>
        `| ${r.quality} | ${r.ours.pagesPerCpuSecond} | ${r.ghostscript?.pagesPerCpuSecond ?? 'skipped (gs not installed)'} | ${r.ratio ?? '-'} | ${r.ours.pagesPerSecond} | ${r.ghostscript?.pagesPerSecond ?? '-'} | ${Math.round(r.ours.tiffBytes / 1024)} KiB | ${r.ghostscript ? `${Math.round(r.ghostscript.tiffBytes / 1024)} KiB` : '-'} |`,
    ),
    ``,
    `All cores (${cpus().length} render threads), standard: ${allCores.pagesPerSecond} pages/s wall, ${allCores.pagesPerCpuSecond} pages/CPU-s.`,
    ``,
    `Peak RSS of a process preparing the ${PAGES}-page PDF (render threads = cores): standard ${memory.standard.maxRssMiB} MiB, hd ${memory.hd.maxRssMiB} MiB.`,
    ``,
  ].join('\n');
  writeFileSync(new URL('./results/render.md', import.meta.url), md);
  process.stdout.write(md);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
