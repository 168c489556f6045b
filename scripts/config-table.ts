// Prints the configuration table of docs/configuration.md from src/config.ts (npm run -s config-table).
import { loadConfig, variables } from '../src/config.ts';

const defaults = loadConfig({});
process.stdout.write('| variable | default | meaning |\n|---|---|---|\n');
for (const [name, [, meaning]] of Object.entries(variables)) {
  const d = (defaults as Record<string, unknown>)[name];
  process.stdout.write(`| \`${name}\` | \`${String(d)}\` | ${meaning} |\n`);
}
