// Entry point: the mail gateway only (SMTP listener with SMTP_LISTEN, outgoing mail with SMTP_RELAY).
import { runMain } from '../src/run.ts';

await runMain(['mail']);
