// faxline's fax media against a T.38 stack we did not write, and through packet loss, all at once:
// - SIP: faxline on G.711 audio (the real SIP line, SipLine.transmit, with SIP_T38=off) calls a
//   faxline answering line through Kamailio, which demands digest auth and hands the SDP to
//   rtpengine with `T.38=force`: the callee is offered `m=image ... udptl t38` and receives over
//   T.38 from rtpengine's gateway (SpanDSP's gateway with rtpengine's own UDPTL);
// - the reverse, faxline on T.38 to faxline on audio, with the media half of the call alone (the
//   test's own SDP offer/answer to rtpengine over ng, `T.38=decode`): faxline's SIP line only
//   reaches T.38 by a re-INVITE, and rtpengine's switch of a running call to its gateway fails too
//   often to be a test (see docs/sip-operations.md);
// - a seeded 2 % loss of UDPTL datagrams each way (the lossy relay): with redundancy the fax is
//   received pixel-identical;
// - 2 % loss of RTP on an ECM audio call: received identical, or a clear failure.
// Every received TIFF is compared with the sent one by libtiff's tiffcmp. The four calls run at once.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Outcome, Progress } from '../../src/transmission/backend.ts';
import {
  loadFaxmedia,
  mediaUnavailableMessage,
  NativeMediaEngine,
  type NativeMediaStats,
} from '../../src/transmission/sip/media-engine.ts';
import { SipLine, type ReceivedFax, type T38Mode } from '../../src/transmission/sip/line.ts';
import { skipUnless } from '../support/skips.ts';
import {
  renderFaxFile,
  testRenderPool,
  tiffDifferences,
  type FaxFile,
} from '../support/telephony/fax-files.ts';
import { startKamailio, type Kamailio } from '../support/telephony/kamailio.ts';
import { startLossyRelayProcess } from '../support/telephony/lossy-relay.ts';
import {
  audioPortFromSdp,
  localSdp,
  openSession,
  runMediaCall,
  t38FromSdp,
  type MediaCallResult,
} from '../support/telephony/media-call.ts';
import { portBlock, sipPort } from '../support/telephony/ports.ts';
import { startRtpengine, type Rtpengine } from '../support/telephony/rtpengine.ts';
import { missingTools } from '../support/telephony/tools.ts';

const needs = skipUnless(
  missingTools('kamailio', 'rtpengine', 'tiffcmp') || (!loadFaxmedia() && mediaUnavailableMessage),
  'spandsp',
);
const CRED = { username: 'faxline-out', password: 'Trunk-Secret-18' };
// A block of the RTP range claimed for this file (48 ports), never the whole range: a session here
// took ports that another file had claimed for a process not yet bound to them, and that process
// then had "no media port free (RTP_PORTS)" (CI of 2026-12-07, r9; likely r5 too).
const rtpBase = await portBlock('rtp', 48, { align: 8 });
const rtpPorts = { min: rtpBase, max: rtpBase + 47 };

// The two cases run one after the other (about 65 s more): when the hold-up case's relay was
// JavaScript in this process, beside the first case (four calls, two relays, Kamailio, synchronous
// tiffcmp and libtiff runs on this event loop) it now and then forwarded a released burst over 80 ms
// later than its hold: packets after their turn and a call failed in training (CI of 2026-12-07, r7).
// Each relay now runs in a process of its own at the media threads' real-time priority
// (startLossyRelayProcess); the cases stay apart, so that one call's timing is not another's.
describe(
  'fax media through rtpengine, through packet loss and through a stalling path',
  { ...needs, concurrency: 1 },
  () => {
    let dir: string;
    let rtp: Rtpengine;
    const trunks: Kamailio[] = [];
    const lines: SipLine[] = [];
    const files = new Map<string, FaxFile>();
    let engine: NativeMediaEngine;

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'faxline-sippeers-'));
      const pool = testRenderPool();
      try {
        files.set(
          'standard',
          await renderFaxFile(pool, dir, 'standard.tif', 'standard', ['letter-text-2p.pdf']),
        );
        files.set('low', await renderFaxFile(pool, dir, 'low.tif', 'low', ['letter-text-2p.pdf']));
      } finally {
        await pool.close();
      }
      engine = new NativeMediaEngine({ threads: 2 });
      rtp = await startRtpengine({ portCount: 40 });
    });

    after(async () => {
      for (const l of lines) await l.close();
      for (const t of trunks) await t.stop();
      await rtp?.stop();
      if (dir && !process.env.KEEP_RX) rmSync(dir, { recursive: true, force: true });
    });

    async function receiver(t38: T38Mode) {
      const port = await sipPort();
      const results: ReceivedFax[] = [];
      const line = new SipLine({
        trunk: 'sip:127.0.0.1:5060;transport=udp', // answers only
        listen: { host: '127.0.0.1', port },
        t38,
        rtpPorts,
        ringTimeoutMs: 30_000,
        media: engine,
      });
      lines.push(line);
      await line.answer({
        decide: ({ callId }) => ({
          file: join(dir, `rx-${callId.replace(/\W/g, '_')}.tif`),
          ident: 'FAXLINE RX',
        }),
        onResult: (r) => results.push(r),
      });
      return { port, results };
    }

    async function send(trunk: Kamailio, t38: T38Mode, number: string, file: FaxFile) {
      const line = new SipLine({
        trunk: `sip:127.0.0.1:${trunk.port};transport=udp`,
        ...CRED,
        listen: { host: '127.0.0.1', port: await sipPort() },
        t38,
        rtpPorts,
        ringTimeoutMs: 30_000,
        media: engine,
      });
      lines.push(line);
      const progress: Progress[] = [];
      const outcome: Outcome = await line.transmit(
        {
          jobId: `rtpengine-${number}`,
          attempt: 1,
          faxNumber: number,
          callerId: '+15550100',
          quality: file.quality,
          pageBytes: Array.from({ length: file.pages }, () => 0),
          tiff: readFileSync(file.path),
        },
        {
          signal: new AbortController().signal,
          deadline: new Date(Date.now() + 240_000),
          onProgress: (p) => void progress.push(p),
        },
      );
      return { outcome, progress };
    }

    /** Sender on `from`, receiver on `to`, rtpengine between them gatewaying as the flags say. */
    async function throughRtpengine(
      callId: string,
      from: 'audio' | 't38',
      to: 'audio' | 't38',
      file: FaxFile,
    ) {
      const a = openSession(engine);
      const b = openSession(engine);
      const offer = await rtp.ng.command({
        command: 'offer',
        'call-id': callId,
        'from-tag': 'sender',
        sdp: localSdp(a.port, from),
        'T.38': [from === 'audio' ? 'force' : 'decode'],
        ICE: 'remove',
      });
      assert.equal(offer.result, 'ok', JSON.stringify(offer));
      const answer = await rtp.ng.command({
        command: 'answer',
        'call-id': callId,
        'from-tag': 'sender',
        'to-tag': 'receiver',
        sdp: localSdp(b.port, to),
        'T.38': [from === 'audio' ? 'force' : 'decode'],
        ICE: 'remove',
      });
      assert.equal(answer.result, 'ok', JSON.stringify(answer));
      // The receiver is told where rtpengine wants its media (from the offer rtpengine rewrote), the
      // sender where the answer says.
      const leg = (sdp: string, kind: 'audio' | 't38') => {
        if (kind === 'audio')
          return { transport: kind, remote: { address: '127.0.0.1', port: audioPortFromSdp(sdp) } };
        const t = t38FromSdp(sdp);
        return { transport: kind, remote: { address: '127.0.0.1', port: t.port }, t38: t.t38 };
      };
      const receivedFile = join(dir, `${callId}.tif`);
      try {
        const r = await runMediaCall({
          sender: a,
          receiver: b,
          file: file.path,
          receivedFile,
          ecm: true,
          senderLeg: leg(String(answer.sdp), from),
          receiverLeg: leg(String(offer.sdp), to),
        });
        return { r, receivedFile };
      } finally {
        await rtp.ng
          .command({ command: 'delete', 'call-id': callId, 'from-tag': 'sender' })
          .catch(() => undefined);
      }
    }

    /** Sender and receiver on the same transport, the lossy relay between them. */
    async function throughLoss(
      name: string,
      transport: 'audio' | 't38',
      file: FaxFile,
      seed: number,
      path: { lossRate?: number; holdUp?: { every: number; hold: number }; ecm?: boolean } = {},
    ) {
      const a = openSession(engine);
      const b = openSession(engine);
      const relay = await startLossyRelayProcess({
        a: { address: '127.0.0.1', port: a.port },
        b: { address: '127.0.0.1', port: b.port },
        lossRate: path.lossRate ?? 0.02,
        seed,
        ...(path.holdUp ? { holdUp: path.holdUp } : {}),
      });
      const receivedFile = join(dir, `${name}.tif`);
      try {
        const r = await runMediaCall({
          sender: a,
          receiver: b,
          file: file.path,
          receivedFile,
          ecm: path.ecm ?? true,
          senderLeg: { transport, remote: { address: '127.0.0.1', port: relay.forA } },
          receiverLeg: { transport, remote: { address: '127.0.0.1', port: relay.forB } },
        });
        await relay.close(); // fills in relay.counts
        return { r, receivedFile, counts: relay.counts, realtime: relay.realtime };
      } finally {
        await relay.close().catch(() => undefined); // the same promise when it closed above
      }
    }

    const describeCall = (r: MediaCallResult) =>
      `sender ${JSON.stringify(r.sender)}\nreceiver ${JSON.stringify(r.receiver)}\nstats ${JSON.stringify(r.senderStats)} ${JSON.stringify(r.receiverStats)}`;

    it('SIP audio -> rtpengine -> T.38, T.38 -> rtpengine -> audio, T.38 and audio at 2 % loss, at once', async () => {
      const t38Callee = await receiver('accept');
      const force = await startKamailio({
        ...CRED,
        targets: { default: `127.0.0.1:${t38Callee.port}` },
        rtpengine: { ngPort: rtp.ngPort, flags: 'T.38=force' },
      });
      trunks.push(force);
      const started = Date.now();
      const [a2t, t2a, t38Loss, audioLoss] = await Promise.all([
        send(force, 'off', '+15550201', files.get('standard')!),
        throughRtpengine('t2a', 't38', 'audio', files.get('low')!),
        throughLoss('t38-loss', 't38', files.get('standard')!, 18),
        throughLoss('audio-loss', 'audio', files.get('low')!, 20),
      ]);
      console.log(`sip peers: 4 concurrent calls in ${Math.round((Date.now() - started) / 1000)} s`);

      // 1. SIP through Kamailio and rtpengine: our audio caller, our T.38 callee.
      const rx = t38Callee.results;
      console.log(
        `sip peers: audio -> rtpengine -> T.38 (SIP): sender ${JSON.stringify(a2t.outcome)}; callee ${rx
          .map((r) => `${r.ok ? 'ok' : 'failed'} ${r.pages} pages over ${r.result?.transport}: ${r.reason}`)
          .join(' / ')}`,
      );
      assert.equal(rx.length, 1, 'one call reached the callee');
      assert.ok(rx[0]!.ok && rx[0]!.result, rx[0]!.reason);
      assert.equal(
        rx[0]!.result.transport,
        't38',
        'the callee was offered T.38 by rtpengine and received over it',
      );
      assert.equal(
        tiffDifferences(files.get('standard')!.path, rx[0]!.file),
        '',
        'received differs from what was sent',
      );
      assert.ok(a2t.outcome.ok, JSON.stringify(a2t.outcome));
      assert.equal(a2t.outcome.engine?.transport, 'audio', 'the caller stayed on audio');
      assert.equal(a2t.outcome.pages, files.get('standard')!.pages);
      assert.ok(a2t.progress.some((p) => p.type === 'connected'));
      assert.ok(force.events().includes('challenge INVITE'), 'the trunk demanded digest auth');
      assert.ok(
        rtp.daemon.lines.some((l) => /Received command 'offer'/.test(l)) &&
          rtp.daemon.lines.some((l) => /Received command 'answer'/.test(l)),
        'Kamailio handed the SDP to rtpengine',
      );

      // 2. The reverse through rtpengine's gateway (media only).
      console.log(
        `sip peers: T.38 -> rtpengine -> audio (ng): ${describeCall(t2a.r).split('\n').slice(0, 2).join('; ')}`,
      );
      assert.ok(t2a.r.sender.ok && t2a.r.receiver.ok, describeCall(t2a.r));
      assert.equal(t2a.r.sender.transport, 't38');
      assert.equal(t2a.r.receiver.transport, 'audio');
      assert.ok(t2a.r.senderStats.udptlSent > 0 && t2a.r.receiverStats.rtpReceived > 0);
      assert.equal(
        tiffDifferences(files.get('low')!.path, t2a.receivedFile),
        '',
        'received differs from what was sent',
      );

      // 3. T.38 with redundancy survives 2 % loss each way: identical pages.
      const lossLine = (name: string, l: typeof t38Loss) =>
        `sip peers: ${name}: dropped ${l.counts.aToB.dropped}/${l.counts.aToB.dropped + l.counts.aToB.forwarded} sender->receiver, ` +
        `${l.counts.bToA.dropped}/${l.counts.bToA.dropped + l.counts.bToA.forwarded} back; ` +
        `recovered ${l.r.receiverStats.recovered + l.r.senderStats.recovered}; ` +
        `${l.r.receiver.ok ? 'received' : `failed: ${l.r.receiver.text}`}`;
      console.log(lossLine('T.38 at 2 % loss', t38Loss));
      assert.ok(
        t38Loss.counts.aToB.dropped > 0 && t38Loss.counts.bToA.dropped > 0,
        'the relay dropped packets',
      );
      assert.ok(t38Loss.r.sender.ok && t38Loss.r.receiver.ok, `T.38 at 2 % loss: ${describeCall(t38Loss.r)}`);
      assert.ok(
        t38Loss.r.receiverStats.recovered + t38Loss.r.senderStats.recovered > 0,
        'redundancy recovered packets',
      );
      assert.equal(tiffDifferences(files.get('standard')!.path, t38Loss.receivedFile), '');

      // 4. Audio with ECM at 2 % loss: received identical, or a failure that says what went wrong.
      console.log(lossLine('audio (ECM) at 2 % loss', audioLoss));
      assert.ok(audioLoss.counts.aToB.dropped > 0, 'the relay dropped packets');
      if (audioLoss.r.receiver.ok && audioLoss.r.sender.ok) {
        assert.equal(tiffDifferences(files.get('low')!.path, audioLoss.receivedFile), '');
      } else {
        const failed = audioLoss.r.sender.ok ? audioLoss.r.receiver : audioLoss.r.sender;
        assert.notEqual(failed.code, 0, describeCall(audioLoss.r));
        assert.match(failed.text, /\S/, 'the failure names its cause');
      }
    });

    // A path that stalls without losing anything: in each direction, of every 75 packets (1.5 s of
    // audio) the last 3 are held and arrive with the next, the first 60 ms late (a busy host, a
    // congested uplink, a virtual machine not run for a moment). Played out 40 ms behind, as before
    // 2026-12-07, they came after their turn: silence in the modem signal, a carrier drop, and the
    // call failed (with 80 ms holds: in training, 28 packets late of 112 held). Played out 160 ms
    // behind, the pages arrive identical. Without ECM, where a damaged line stays damaged. The relay
    // is JavaScript and, on a loaded machine, added delays of its own on top of the holds: with 80 ms
    // holds, the 80 ms left before the playout point were not always enough (CI under CI_LOAD=2,
    // 2026-12-07: 17 late, the page broken off), so the holds are 60 ms, which leaves 100; even then
    // one packet came late enough to break a page (a later loaded run), so the relay now runs in its
    // own process at real-time priority. Packets after their turn are bounded, not forbidden: a
    // tenth of those held.
    it('G.711 without ECM through a path that holds packets for 60 ms every 1.5 s: identical, hardly any late', async () => {
      const { r, receivedFile, counts, realtime } = await throughLoss(
        'audio-stalls',
        'audio',
        files.get('low')!,
        21,
        {
          lossRate: 0,
          holdUp: { every: 75, hold: 3 },
          ecm: false,
        },
      );
      const late = (r.receiverStats as NativeMediaStats).late + (r.senderStats as NativeMediaStats).late;
      console.log(
        `sip peers: audio through hold-ups (relay ${realtime ? 'at real-time priority' : 'at normal priority'}): ` +
          `${counts.holds} hold-ups, ${counts.held} packets held, ${late} late; ${describeCall(r)}`,
      );
      assert.ok(counts.holds >= 20 && counts.held >= 60, `the path held packets: ${JSON.stringify(counts)}`);
      assert.ok(r.sender.ok && r.receiver.ok, describeCall(r));
      assert.equal(tiffDifferences(files.get('low')!.path, receivedFile), '');
      assert.ok(
        late <= counts.held / 10,
        `${late} packets came after their turn, of ${counts.held} held: ${describeCall(r)}`,
      );
    });
  },
);
