// Entry point: cancel worker only.
import { main } from '../src/entry.ts';

await main(['cancel']);
