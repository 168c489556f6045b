// Benchmark (not a test): CPU cost of the metric operations an intake request performs, and of one
// scrape, measured in-process (independent of the HTTP and database noise of a shared machine).
//
//   npm run bench:metrics-micro
import { mkdirSync, writeFileSync } from 'node:fs';
import { createMetrics } from '../src/metrics/registry.ts';

const cpuMs = (fn: () => void | Promise<void>) => async (n: number) => {
  const t = process.cpuUsage();
  for (let i = 0; i < n; i++) await fn();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000 / n;
};

const route = { route: '/v1/faxes/send', method: 'POST' };
// What one accepted send request records: its HTTP counter and latency, its confirmed publish.
const perRequest = (m: ReturnType<typeof createMetrics>) => () => {
  m.httpRequests.inc({ ...route, status: '200' });
  m.httpDuration.observe(route, 0.012);
  m.commandsPublished.inc({ exchange: 'commands', type: 'send', outcome: 'confirmed' });
};

const on = createMetrics('api');
const off = createMetrics('api', { enabled: false });
for (let i = 0; i < 10_000; i++) perRequest(on)(); // warm up and fill the series a scrape serialises
const reqOn = await cpuMs(perRequest(on))(1_000_000);
const reqOff = await cpuMs(perRequest(off))(1_000_000);
await on.registry.metrics();
const scrape = await cpuMs(async () => void (await on.registry.metrics()))(500);

const out = {
  bench: 'metrics-micro',
  date: new Date().toISOString(),
  command: 'npm run bench:metrics-micro',
  per_request_us_on: reqOn * 1000,
  per_request_us_off: reqOff * 1000,
  scrape_serialise_ms: scrape,
};
mkdirSync('bench/results', { recursive: true });
writeFileSync('bench/results/metrics-micro.json', JSON.stringify(out, null, 2) + '\n');
process.stdout.write(
  `metric work per intake request: ${out.per_request_us_on.toFixed(2)} µs (no-op metrics: ${out.per_request_us_off.toFixed(2)} µs)\n` +
    `one scrape (registry serialisation, default metrics included): ${scrape.toFixed(2)} ms CPU\n`,
);
