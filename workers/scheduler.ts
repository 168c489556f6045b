// Entry point: scheduler only (pg-boss due-time worker and the outbox sweep).
import { runMain } from '../src/run.ts';

await runMain(['scheduler']);
