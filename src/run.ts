import { start } from './app.ts';
import type { Component } from './components.ts';
import { loadConfigOrExit } from './config.ts';
import { createLogger } from './log.ts';
import { stopTelemetry } from './telemetry.ts';

/** Starts components, and stops them cleanly on SIGTERM/SIGINT; a second signal forces exit. */
export async function runMain(components: Component[], o: { devKekFile?: string } = {}): Promise<void> {
  const cfg = loadConfigOrExit();
  const log = createLogger(cfg.LOG_LEVEL, undefined, { phi: cfg.LOG_PHI });
  let running;
  try {
    running = await start(cfg, { components, log, ...o });
  } catch (err) {
    log.fatal({ err }, 'faxline failed to start');
    process.exitCode = 1;
    setTimeout(() => process.exit(1), 100).unref();
    return;
  }
  let signals = 0;
  const onSignal = (sig: string) => {
    signals++;
    if (signals > 1) {
      log.warn({ sig }, 'second signal: exiting now');
      process.exit(130);
    }
    running
      .stop()
      // Spans still buffered are exported before the process goes (bounded by the exporter's timeout).
      .then(() => stopTelemetry().catch(() => undefined))
      .then(
        () => process.exit(0),
        (err: unknown) => {
          log.error({ err }, 'error while stopping');
          process.exit(1);
        },
      );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
