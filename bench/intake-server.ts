// The API process of the intake benchmark: the real service (API component only, no workers, so the
// measured CPU is intake's), configured from the environment the benchmark passes in.
import { start } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';

const cfg = loadConfig();
const running = await start(cfg, { components: ['api'], log: createLogger(cfg.LOG_LEVEL) });
process.stdout.write(JSON.stringify({ url: running.url }) + '\n');
process.on('SIGTERM', () => {
  void running.stop().then(() => process.exit(0));
});
