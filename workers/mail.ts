// Entry point: the mail gateway only (SMTP listener with SMTP_LISTEN, outgoing mail with SMTP_RELAY).
import { main } from '../src/entry.ts';

await main(['mail']);
