// Entry point: the event relay (outbox → <prefix>.events) and webhook delivery only.
import { main } from '../src/entry.ts';

await main(['events']);
