// What every entry point runs: tracing first (when configured, src/telemetry.ts), then the service.
// The service's modules are imported only after tracing started, so that the instrumented packages
// (pg, amqplib, fastify) load patched.
import type { Component } from './components.ts';
import { loadConfigOrExit } from './config.ts';
import { startTelemetry } from './telemetry.ts';

export async function main(
  components: Component[],
  processName = components.join('+'),
  o: { devKekFile?: string } = {},
): Promise<void> {
  await startTelemetry(loadConfigOrExit(), processName);
  const { runMain } = await import('./run.ts');
  await runMain(components, o);
}
