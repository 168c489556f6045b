// Entry point: the HTTP API only (with the outbox sweep).
import { runMain } from './run.ts';

await runMain(['api']);
