// Entry point: the AMQP intake for high-volume senders (<prefix>.intake) only.
import { main } from '../src/entry.ts';

await main(['intake']);
