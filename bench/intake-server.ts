// The API process of the intake benchmark: the real service (API component only, no workers, so the
// measured CPU is intake's), configured from the environment the benchmark passes in. Tracing starts
// first when OTEL_EXPORTER_OTLP_ENDPOINT is set (BENCH_TRACING=1), as in src/entry.ts.
import { loadConfig } from '../src/config.ts';
import { startTelemetry } from '../src/telemetry.ts';

const cfg = loadConfig();
await startTelemetry(cfg, 'api');
const { start } = await import('../src/app.ts');
const { createLogger } = await import('../src/log.ts');
const running = await start(cfg, { components: ['api'], log: createLogger(cfg.LOG_LEVEL) });
process.stdout.write(JSON.stringify({ url: running.url }) + '\n');
process.on('SIGTERM', () => {
  void running.stop().then(() => process.exit(0));
});
