// Entry point: scheduler only (pg-boss due-time worker and the outbox sweep).
import { main } from '../src/entry.ts';

await main(['scheduler']);
