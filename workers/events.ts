// Entry point: the event relay (outbox → <prefix>.events) and webhook delivery only.
import { runMain } from '../src/run.ts';

await runMain(['events']);
