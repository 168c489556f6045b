// Entry point: cancel worker only.
import { runMain } from '../src/run.ts';

await runMain(['cancel']);
