// The answering side of bench/sip-calls.ts, in a process of its own so that its CPU is not counted
// against the sending process: two faxline SIP lines (SipLine.answer), one that re-INVITEs every call
// to T.38 (SIP_T38=prefer) and one that stays on G.711 audio (SIP_T38=off), writing each received fax
// into the directory given and printing one JSON line per finished call (`{"received": ...}`).
// Usage: node bench/sip-calls-answer.ts <t38 sip port> <audio sip port> <dir> <rtp min> <rtp max>
import { join } from 'node:path';
import { NativeMediaEngine } from '../src/transmission/sip/media-engine.ts';
import { SipLine, type T38Mode } from '../src/transmission/sip/line.ts';

const [t38Port, audioPort, dir, rtpMin, rtpMax] = process.argv
  .slice(2)
  .map((a, i) => (i === 2 ? a : Number(a)));
const media = new NativeMediaEngine({ realtime: process.env.REALTIME !== '0' });
const mid = Math.floor((Number(rtpMin) + Number(rtpMax)) / 2);
const lines: SipLine[] = [];
for (const [port, t38, min, max] of [
  [Number(t38Port), 'prefer', Number(rtpMin), mid],
  [Number(audioPort), 'off', mid + 1, Number(rtpMax)],
] as [number, T38Mode, number, number][]) {
  const line = new SipLine({
    trunk: 'sip:127.0.0.1:5060;transport=udp', // answers only; never dials
    listen: { host: '127.0.0.1', port },
    t38,
    rtpPorts: { min, max },
    ringTimeoutMs: 30_000,
    media,
  });
  await line.answer({
    ecm: true,
    decide: ({ callId }) => ({
      file: join(String(dir), `${callId.replace(/\W/g, '_')}.tif`),
      ident: 'FAXLINE BENCH RX',
    }),
    onResult: (r) => console.log(JSON.stringify({ received: r })),
  });
  lines.push(line);
}
process.on('SIGTERM', () => {
  void Promise.all(lines.map((l) => l.close())).finally(() => process.exit(0));
});
console.log(JSON.stringify({ listening: [Number(t38Port), Number(audioPort)] }));
