// The faxline answering side with src/receive/ (routing, sink, PostgreSQL) in a process of its own,
// for tests that kill it mid-reception: SipLine.answer() on SIP_PORT, RTP ports RTP_MIN..RTP_MAX,
// inbound calls from 127.0.0.1. Logs pino JSON on stdout ("inbound fax call answered" at begin(),
// "received fax stored" after complete()) and `{"listening": port}` once it answers.
// Env: DATABASE_URL, SIP_PORT, RTP_MIN, RTP_MAX; optional MAX_PAGE_MM and MAX_PAGES (the line's
// receive limits, INBOUND_MAX_PAGE_MM and INBOUND_MAX_PAGES), ECM=0 to answer without ECM, T6=1 to
// offer T.6 coding (INBOUND_T6).
import pg from 'pg';
import client from 'prom-client';
import { createLogger } from '../../../src/log.ts';
import { answeringHooks, sipAnswering } from '../../../src/receive/answering.ts';
import { createReceiving } from '../../../src/receive/component.ts';
import { SipLine } from '../../../src/transmission/sip/line.ts';
import { NativeMediaEngine } from '../../../src/transmission/sip/media-engine.ts';

const env = process.env;
const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 2 });
const log = createLogger('info');
const port = Number(env.SIP_PORT);
const line = new SipLine({
  trunk: 'sip:127.0.0.1:9;transport=udp', // answers only; never dials
  listen: { host: '127.0.0.1', port },
  publicAddress: '127.0.0.1',
  t38: 'accept',
  rtpPorts: { min: Number(env.RTP_MIN), max: Number(env.RTP_MAX) },
  ringTimeoutMs: 15_000,
  media: new NativeMediaEngine({ threads: 1 }),
  ...(env.MAX_PAGE_MM ? { maxPageMm: Number(env.MAX_PAGE_MM) } : {}),
  ...(env.MAX_PAGES ? { maxPages: Number(env.MAX_PAGES) } : {}),
  ...(env.T6 === '1' ? { inboundT6: true } : {}),
});
const receiving = await createReceiving({
  db: pool,
  log,
  registry: new client.Registry(),
  trunk: '',
  cfg: { SIP_INBOUND_ALLOW: '127.0.0.1', SIP_INBOUND_COUNTRY_CODE: '', INBOUND_LINES: 4 },
});
await line.answer({ ...sipAnswering(await answeringHooks(receiving), log), ecm: env.ECM !== '0' });
console.log(JSON.stringify({ listening: port }));
