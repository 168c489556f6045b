// Header line benchmark (not a test): what drawing the header line costs per page, at each quality,
// measured in the same run as the same pages without it. Rendering only (no check, no cover), in
// one render process, the two variants alternating round after round so that the load of the
// shared machine falls on both alike. Counted per page:
//   - render CPU: the render process's CPU time per page, as the pool measures it from /proc (PDFium,
//     the header page drawn into the band, dithering, T.6);
//   - parent CPU: this process's CPU time (the header PDFs built with pdf-lib, the TIFF assembled);
//   - wall time.
// Writes bench/results/header-line-<time>.json and .md.
//
//   npm run bench:header            (PAGES=96 ROUNDS=3 by default)
import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import type { HeaderLine } from '../src/documents/header.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import type { Quality } from '../src/documents/render/raster.ts';
import { renderFax } from '../src/documents/render/render.ts';
import { buildCorpus, FIXTURES } from './render-corpus.ts';

const PAGES = Number(process.env.PAGES ?? 96);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const qualities: Quality[] = ['low', 'standard', 'hd'];
const header: HeaderLine = {
  template: 'FROM {sender_name} {sender_number} {date} {time} TO {to_name} {to_number} PAGE {page}/{pages}',
  values: {
    sender_name: 'Demo Clinic',
    sender_number: '+15550001111',
    to_name: 'Dr. Ada Moreau',
    to_number: '+15551234567',
    date: '2026-11-26',
    time: '19:30 UTC',
  },
};

const round = (n: number, d = 3) => Math.round(n * 10 ** d) / 10 ** d;

interface Sample {
  renderCpuMs: number;
  parentCpuMs: number;
  wallMs: number;
  tiffBytes: number;
}

async function once(
  pool: RenderPool,
  pdf: Uint8Array,
  quality: Quality,
  withHeader: boolean,
): Promise<Sample> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const fax = await renderFax(pool, [{ name: 'corpus.pdf', bytes: pdf, pages: PAGES }], quality, undefined, {
    header: withHeader ? header : null,
  });
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  if (fax.pageCount !== PAGES) throw new Error(`rendered ${fax.pageCount} of ${PAGES} pages`);
  return {
    renderCpuMs: fax.renderMs,
    parentCpuMs: (cpu.user + cpu.system) / 1000,
    wallMs,
    tiffBytes: fax.tiff.length,
  };
}

const pdf = await buildCorpus(PAGES);
const pool = new RenderPool({ size: 1, recycleAfterTasks: 1_000_000, faxTimeoutMs: 3_600_000 });
const results: Record<string, unknown>[] = [];
try {
  // Warm-up: the render process started, PDFium loaded, both paths run once.
  await once(pool, pdf, 'low', true);
  await once(pool, pdf, 'low', false);
  for (const quality of qualities) {
    const acc = { with: [] as Sample[], without: [] as Sample[] };
    for (let r = 0; r < ROUNDS; r++) {
      // Alternate which goes first, so a slow moment of the machine does not favour one variant.
      const order = r % 2 === 0 ? [true, false] : [false, true];
      for (const h of order) (h ? acc.with : acc.without).push(await once(pool, pdf, quality, h));
    }
    const per = (s: Sample[], k: keyof Sample) => s.reduce((n, x) => n + x[k], 0) / s.length / PAGES;
    const row = (s: Sample[]) => ({
      renderCpuMsPerPage: round(per(s, 'renderCpuMs')),
      parentCpuMsPerPage: round(per(s, 'parentCpuMs')),
      cpuMsPerPage: round(per(s, 'renderCpuMs') + per(s, 'parentCpuMs')),
      wallMsPerPage: round(per(s, 'wallMs')),
      tiffBytesPerPage: Math.round(per(s, 'tiffBytes')),
    });
    const w = row(acc.with);
    const wo = row(acc.without);
    results.push({
      quality,
      without: wo,
      with: w,
      extraCpuMsPerPage: round(w.cpuMsPerPage - wo.cpuMsPerPage),
      extraCpuPercent: round(((w.cpuMsPerPage - wo.cpuMsPerPage) / wo.cpuMsPerPage) * 100, 1),
      extraWallMsPerPage: round(w.wallMsPerPage - wo.wallMsPerPage),
    });
    console.log(JSON.stringify(results.at(-1)));
  }
} finally {
  await pool.close();
}

const at = new Date().toISOString();
const stamp = at.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
const meta = {
  at,
  machine: `${cpus().length} × ${cpus()[0]?.model.trim() ?? 'CPU'}`,
  node: process.version,
  pages: PAGES,
  rounds: ROUNDS,
  corpus: FIXTURES,
  template: header.template,
};
writeFileSync(
  new URL(`./results/header-line-${stamp}.json`, import.meta.url),
  JSON.stringify({ ...meta, results }, null, 2) + '\n',
);
const md = [
  '# Header line benchmark',
  '',
  `${at}, ${meta.machine}, Node ${meta.node}; ${PAGES} pages cycled from ${FIXTURES.join(', ')}, ` +
    `each variant rendered ${ROUNDS} times, alternating, in one render process (\`npm run bench:header\`).`,
  '',
  `Template: \`${header.template}\`. CPU per page = the render process's CPU time (from /proc, as the pool`,
  "counts it) + this process's (header PDFs built with pdf-lib, TIFF assembled). Wall time depends on the",
  'shared machine; CPU time is the measure.',
  '',
  '| quality | CPU ms/page without | CPU ms/page with | extra CPU ms/page | extra % | render-process ms/page without / with | parent ms/page without / with | wall ms/page without / with | TIFF bytes/page without / with |',
  '|---|---|---|---|---|---|---|---|---|',
  ...results.map((r) => {
    const w = r.with as Record<string, number>;
    const wo = r.without as Record<string, number>;
    return `| ${String(r.quality)} | ${wo.cpuMsPerPage} | ${w.cpuMsPerPage} | ${String(r.extraCpuMsPerPage)} | ${String(r.extraCpuPercent)} | ${wo.renderCpuMsPerPage} / ${w.renderCpuMsPerPage} | ${wo.parentCpuMsPerPage} / ${w.parentCpuMsPerPage} | ${wo.wallMsPerPage} / ${w.wallMsPerPage} | ${wo.tiffBytesPerPage} / ${w.tiffBytesPerPage} |`;
  }),
  '',
].join('\n');
writeFileSync(new URL(`./results/header-line-${stamp}.md`, import.meta.url), md);
console.log(md);
