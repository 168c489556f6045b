// Entry point: the HTTP API only (with the outbox sweep).
import { main } from './entry.ts';

await main(['api']);
