// A faxline answering line in a process of its own (for tests that must be able to end it whatever
// state its calls are in): SipLine.answer() on the SIP port given in argv, writing received faxes
// into the directory given, and one JSON line per finished call on stdout (`{"received": ...}`).
// Usage: node answer-child.ts <sip port> <dir> <t38 mode> <ecm: 1|0>
import { join } from 'node:path';
import { NativeMediaEngine } from '../../../src/transmission/sip/media-engine.ts';
import { SipLine, type T38Mode } from '../../../src/transmission/sip/line.ts';
import { RANGES } from './ports.ts';

const [port, dir, t38, ecm] = process.argv.slice(2);
const line = new SipLine({
  trunk: 'sip:127.0.0.1:5060;transport=udp', // answers only; never dials
  listen: { host: '127.0.0.1', port: Number(port) },
  t38: (t38 ?? 'prefer') as T38Mode,
  rtpPorts: { min: RANGES.rtp[0], max: RANGES.rtp[1] },
  ringTimeoutMs: 30_000,
  media: new NativeMediaEngine({ threads: 1 }),
});
await line.answer({
  ecm: ecm !== '0',
  decide: ({ callId }) => ({ file: join(dir!, `${callId.replace(/\W/g, '_')}.tif`), ident: 'FAXLINE RX' }),
  onResult: (r) => console.log(JSON.stringify({ received: r })),
});
console.log(JSON.stringify({ listening: Number(port) }));
