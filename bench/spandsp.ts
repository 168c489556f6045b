// Benchmark: CPU cost of real T.30 exchanges through SpanDSP (loopback line), over audio and T.38,
// next to the line time the simulated line computes for the same pages.
// Run: npm run bench:spandsp   → bench/results/spandsp.json
import { statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadFaxloop } from '../src/transmission/spandsp/addon.ts';
import { lineTiming, pageLineMs } from '../src/transmission/simulated.ts';
import { makeFaxTiff } from '../test/support/faxtiff.ts';

const addon = loadFaxloop();
if (!addon) {
  console.error(
    'bench:spandsp needs the addon: apt-get install libspandsp-dev libtiff-dev && npm run build:native',
  );
  process.exit(1);
}
const PAGES = 3;
const RUNS = Number(process.env.RUNS ?? 10);
const results: Record<string, unknown>[] = [];
for (const quality of ['standard', 'hd'] as const) {
  const tif = makeFaxTiff(PAGES, quality);
  const bytesPerPage = Math.round(statSync(tif).size / PAGES);
  for (const transport of ['audio', 't38'] as const) {
    let line = 0;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < RUNS; i++) {
      const r = await addon.run({
        txFile: tif,
        rxFile: join(tmpdir(), `bench-rx-${i}.tif`),
        t38: transport === 't38',
        ecm: true,
      });
      if (!r.ok) throw new Error(`exchange failed: ${r.completionText}`);
      line += r.lineTimeMs;
    }
    const wallS = (performance.now() - t0) / 1000;
    const c = process.cpuUsage(cpu0);
    const cpuS = (c.user + c.system) / 1e6;
    const simulatedPageMs = pageLineMs(bytesPerPage, lineTiming.defaultBitRate);
    results.push({
      quality,
      transport,
      runs: RUNS,
      pages_per_exchange: PAGES,
      bytes_per_page: bytesPerPage,
      cpu_seconds_per_page: +(cpuS / (RUNS * PAGES)).toFixed(4),
      exchanges_per_second_per_core: +(RUNS / cpuS).toFixed(2),
      wall_seconds: +wallS.toFixed(2),
      engine_line_ms_per_page: Math.round(line / RUNS / PAGES),
      simulated_line_ms_per_page: Math.round(simulatedPageMs),
      speed_vs_real_time: Math.round(line / 1000 / cpuS),
    });
    console.log(results.at(-1));
  }
}
const out = { date: new Date().toISOString(), node: process.version, spandsp: '0.0.6 (Debian)', results };
writeFileSync(new URL('./results/spandsp.json', import.meta.url), JSON.stringify(out, null, 2) + '\n');
