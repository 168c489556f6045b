// Entry point: the AMQP intake for high-volume senders (<prefix>.intake) only.
import { runMain } from '../src/run.ts';

await runMain(['intake']);
