// Entry point of the `faxline` command (bin/faxline.js runs it with a Node that strips types).
import { run } from './main.ts';

process.exitCode = await run(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env,
});
