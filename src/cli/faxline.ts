// Entry point of the `faxline` command (bin/faxline.js runs it with a Node that strips types).
// The CLI is a program of its own: it reads FAXLINE_URL, FAXLINE_API_KEY, FAXLINE_CONFIG and
// NO_COLOR (docs/cli.md), none of the service's configuration (src/config.ts).
import { run } from './main.ts';

process.exitCode = await run(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  // eslint-disable-next-line no-restricted-syntax -- see above
  env: process.env,
});
