#!/usr/bin/env node
// The `faxline` command. The CLI is TypeScript run as it is (no build step), which needs a Node
// that strips types (22.18+, 23.6+). When the `node` running this launcher cannot, the package's
// own Node 24 (its `node` dependency) runs the CLI instead. Plain JavaScript, so any Node starts it.
/* global process, URL */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const entry = fileURLToPath(new URL('../src/cli/faxline.ts', import.meta.url));

if (process.features.typescript) {
  await import(entry);
} else {
  const require = createRequire(import.meta.url);
  let node;
  try {
    node = join(dirname(require.resolve('node/package.json')), 'bin', 'node');
  } catch {
    process.stderr.write(
      `faxline: Node ${process.versions.node} cannot run TypeScript and the package's own Node is missing: run \`npm ci\`, or use Node 22.18 or later\n`,
    );
    process.exit(5);
  }
  const child = spawn(node, [entry, ...process.argv.slice(2)], { stdio: 'inherit' });
  // Ctrl-C reaches both processes; the child decides what it means.
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => child.kill(sig));
  child.on('exit', (code, signal) => {
    if (signal) process.kill(process.pid, signal);
    else process.exit(code ?? 1);
  });
}
