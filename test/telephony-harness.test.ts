// The telephony test bed on its own, without our user agent (test/support/telephony/): Kamailio as a
// trunk demanding digest auth between a SIPp caller and a SIPp callee; rtpengine's ng protocol
// (ping, and an audio offer turned into T.38 by its gateway); the seeded lossy UDP relay; bencode.
// These are the independent peers the end-to-end SIP tests (test/sip/) stand on.
import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { describe, it } from 'node:test';
import { skipUnless } from './support/skips.ts';
import { bdecode, bencode } from './support/telephony/bencode.ts';
import { kamailioConfig, startKamailio } from './support/telephony/kamailio.ts';
import { startLossyRelay, startLossyRelayProcess } from './support/telephony/lossy-relay.ts';
import { portBlock } from './support/telephony/ports.ts';
import { startRtpengine } from './support/telephony/rtpengine.ts';
import { startSipp } from './support/telephony/sipp.ts';
import { missingTools } from './support/telephony/tools.ts';

const CRED = { username: 'faxline', password: 'trunk-secret-1' };

describe('bencode (rtpengine ng)', () => {
  it('round-trips strings, integers, lists and dictionaries, with sorted keys', () => {
    const v = {
      sdp: 'v=0\r\nm=audio 1 RTP/AVP 0\r\n',
      'T.38': ['force'],
      n: -12,
      nested: { b: [1, 'x'], a: '' },
    };
    const b = bencode(v);
    assert.equal(b.toString().slice(0, 10), 'd4:T.38l5:');
    assert.deepEqual(bdecode(b), v);
    assert.equal(bencode('é').toString('latin1'), '2:\u00c3\u00a9');
  });

  it('rejects malformed input with the position', () => {
    assert.throws(() => bdecode(Buffer.from('d3:abc')), /bdecode: .* at byte/);
    assert.throws(() => bdecode(Buffer.from('i1x2e')), /bad integer/);
    assert.throws(() => bdecode(Buffer.from('5:ab')), /longer than the input/);
    assert.throws(() => bdecode(Buffer.from('i1ei2e')), /trailing bytes/);
    assert.throws(() => bencode(1.5), /not an integer/);
  });
});

/** A bound UDP socket on loopback, and the datagrams it receives. */
async function endpoint(): Promise<{ sock: Socket; port: number; got: Buffer[] }> {
  const port = await portBlock('media');
  const sock = createSocket('udp4');
  const got: Buffer[] = [];
  sock.on('message', (m) => got.push(m));
  await new Promise<void>((r) => sock.bind(port, '127.0.0.1', () => r()));
  return { sock, port, got };
}

async function until(cond: () => boolean, ms: number, what: string | (() => string)): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end)
      throw new Error(`timed out waiting for ${typeof what === 'string' ? what : what()}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('lossy UDP relay', () => {
  it('drops a seeded 2 % in each direction, forwards the rest to the right side, repeatably', async () => {
    const a = await endpoint();
    const b = await endpoint();
    const runs: number[][] = [];
    try {
      for (const _ of [1, 2]) {
        a.got.length = 0;
        b.got.length = 0;
        const relay = await startLossyRelay({
          a: { address: '127.0.0.1', port: a.port },
          b: { address: '127.0.0.1', port: b.port },
          lossRate: 0.02,
          seed: 18,
        });
        try {
          const N = 3000;
          // Paced in bursts of 100 so the loopback socket buffers never drop anything themselves.
          for (let i = 0; i < N; i += 100) {
            for (let k = i; k < i + 100; k++) {
              const seq = Buffer.alloc(4);
              seq.writeUInt32BE(k);
              a.sock.send(seq, relay.forA, '127.0.0.1');
              b.sock.send(seq, relay.forB, '127.0.0.1');
            }
            await until(
              () =>
                relay.counts.aToB.forwarded + relay.counts.aToB.dropped >= i + 100 &&
                relay.counts.bToA.forwarded + relay.counts.bToA.dropped >= i + 100,
              5_000,
              'the relay to take a burst',
            );
          }
          await until(
            () =>
              b.got.length === relay.counts.aToB.forwarded && a.got.length === relay.counts.bToA.forwarded,
            5_000,
            'forwarded datagrams to arrive',
          );
          for (const c of [relay.counts.aToB, relay.counts.bToA]) {
            assert.equal(c.forwarded + c.dropped, N);
            // 2 % of 3000 is 60; a fair generator stays well within 30..90.
            assert.ok(c.dropped >= 30 && c.dropped <= 90, `dropped ${c.dropped} of ${N}`);
          }
          runs.push(b.got.map((m) => m.readUInt32BE(0)));
        } finally {
          await relay.close();
        }
      }
      assert.deepEqual(runs[0], runs[1], 'the same seed drops the same packets');
    } finally {
      a.sock.close();
      b.sock.close();
    }
  });

  it('never drops what `droppable` spares', async () => {
    const a = await endpoint();
    const b = await endpoint();
    const relay = await startLossyRelay({
      a: { address: '127.0.0.1', port: a.port },
      b: { address: '127.0.0.1', port: b.port },
      lossRate: 0.5,
      seed: 7,
      droppable: (m) => m[0] === 1,
    });
    try {
      for (let i = 0; i < 200; i++) a.sock.send(Buffer.from([i % 2]), relay.forA, '127.0.0.1');
      await until(() => relay.counts.aToB.forwarded + relay.counts.aToB.dropped === 200, 5_000, 'the relay');
      await until(() => b.got.length === relay.counts.aToB.forwarded, 5_000, 'delivery');
      assert.equal(b.got.filter((m) => m[0] === 0).length, 100, 'every spared datagram arrived');
      assert.ok(
        relay.counts.aToB.dropped > 20,
        `some droppable ones were dropped (${relay.counts.aToB.dropped})`,
      );
    } finally {
      await relay.close();
      a.sock.close();
      b.sock.close();
    }
  });
  it('in a process of its own: holds back the last of every few datagrams, in order, and reports its counts at close', async () => {
    const a = await endpoint();
    const b = await endpoint();
    const relay = await startLossyRelayProcess({
      a: { address: '127.0.0.1', port: a.port },
      b: { address: '127.0.0.1', port: b.port },
      lossRate: 0,
      seed: 3,
      holdUp: { every: 10, hold: 3 },
    });
    try {
      const seq = (k: number) => Buffer.from(Uint32Array.of(k).buffer);
      // In bursts of 30 (a burst of 300 overflowed the receiving socket's buffer); the last three of
      // every ten wait for the next datagram, so three stay held after each burst.
      for (let burst = 1; burst <= 10; burst++) {
        for (let k = (burst - 1) * 30; k < burst * 30; k++) a.sock.send(seq(k), relay.forA, '127.0.0.1');
        await until(
          () => b.got.length === burst * 30 - 3,
          10_000,
          () => `${burst * 30 - 3} datagrams through the relay process (${b.got.length} came)`,
        );
      }
      for (let k = 0; k < 5; k++) b.sock.send(seq(k), relay.forB, '127.0.0.1');
      await until(() => a.got.length === 5, 10_000, 'the way back');
    } finally {
      await relay.close();
      a.sock.close();
      b.sock.close();
    }
    assert.deepEqual(
      b.got.map((m) => m.readUInt32LE(0)),
      Array.from({ length: 297 }, (_, k) => k),
      'in order, none lost',
    );
    assert.deepEqual(relay.counts.aToB, { forwarded: 300, dropped: 0 });
    assert.deepEqual(relay.counts.bToA, { forwarded: 5, dropped: 0 });
    // 30 hold-ups of 3 going out; the five back are the first of their ten, never held.
    assert.equal(relay.counts.holds, 30);
    assert.equal(relay.counts.held, 90);
    assert.equal(typeof relay.realtime, 'boolean');
  });
});

describe('Kamailio as the trunk, SIPp on both ends', skipUnless(missingTools('kamailio', 'sipp')), () => {
  it('writes a config that names the credentials, the routes and the media flags', () => {
    const cfg = kamailioConfig({
      port: 35501,
      ...CRED,
      targets: { default: '127.0.0.1:35600', byNumber: { '15550100': '127.0.0.1:35601;transport=tcp' } },
      rtpengine: { ngPort: 22222, flags: 'T.38=force' },
    });
    assert.match(cfg, /pv_proxy_authenticate\("\$fd", "trunk-secret-1", "0"\)/);
    assert.match(cfg, /if \(\$rU == "15550100"\) \$du = "sip:127.0.0.1:35601;transport=tcp";/);
    assert.match(cfg, /else \$du = "sip:127.0.0.1:35600";/);
    assert.match(cfg, /rtpengine_offer\("replace-origin replace-session-connection ICE=remove T.38=force"\)/);
    assert.throws(
      () => kamailioConfig({ port: 1, ...CRED, password: 'a"b', targets: {} }),
      /unsupported characters/,
    );
  });

  it('challenges the caller (407), relays the authenticated call with Record-Route, the callee answers', async () => {
    const callee = await startSipp({ scenario: 'proxy-uas.xml', timeoutSeconds: 30 });
    const trunk = await startKamailio({
      ...CRED,
      targets: { byNumber: { '15550100': `127.0.0.1:${callee.port}` } },
    });
    try {
      const caller = await startSipp({
        scenario: 'proxy-uac-auth.xml',
        remote: `127.0.0.1:${trunk.port}`,
        service: '15550100',
        auth: CRED,
        keys: { caller: CRED.username },
        timeoutSeconds: 30,
      });
      try {
        const c = await caller.finished;
        assert.equal(c.code, 0, `caller: ${c.errors}\n${caller.daemon.tail()}\n${trunk.daemon.tail()}`);
        const d = await callee.finished;
        assert.equal(d.code, 0, `callee: ${d.errors}`);
      } finally {
        await caller.stop();
      }
      const events = trunk.events();
      assert.ok(events.includes('challenge INVITE'), events.join('\n'));
      assert.ok(events.includes('authorized INVITE faxline to 15550100'), events.join('\n'));
      // ACK and BYE followed the route set through the proxy (Record-Route honoured by both).
      assert.ok(events.includes('in-dialog ACK') && events.includes('in-dialog BYE'), events.join('\n'));
    } finally {
      await trunk.stop();
      await callee.stop();
    }
  });

  it('answers a wrong password with a new challenge and never relays the call', async () => {
    const callee = await startSipp({ scenario: 'proxy-uas.xml', timeoutSeconds: 30 });
    const trunk = await startKamailio({ ...CRED, targets: { default: `127.0.0.1:${callee.port}` } });
    try {
      const caller = await startSipp({
        scenario: 'proxy-uac-auth.xml',
        remote: `127.0.0.1:${trunk.port}`,
        service: '15550100',
        auth: { username: CRED.username, password: 'wrong' },
        keys: { caller: CRED.username },
        timeoutSeconds: 5,
      });
      const c = await caller.finished.finally(() => caller.stop());
      assert.notEqual(c.code, 0, 'the caller did not get through');
      // Every retry with the wrong password met a new 407 (SIPp took them for retransmissions of the
      // first) until the caller's time ran out.
      assert.match(c.errors, /timed out/);
      const events = trunk.events();
      assert.equal(events.filter((e) => e === 'challenge INVITE').length >= 2, true, events.join('\n'));
      assert.equal(events.filter((e) => e.startsWith('authorized')).length, 0, events.join('\n'));
    } finally {
      await trunk.stop();
      await callee.stop();
    }
  });
});

describe('rtpengine (user space) over its ng protocol', skipUnless(missingTools('rtpengine')), () => {
  it('answers ping, and its T.38 gateway turns an audio offer into UDPTL T.38 and back', async () => {
    const rtp = await startRtpengine({ portCount: 20 });
    try {
      assert.equal((await rtp.ng.command({ command: 'ping' })).result, 'pong');
      const audio = [
        'v=0',
        'o=- 1 1 IN IP4 127.0.0.1',
        's=-',
        'c=IN IP4 127.0.0.1',
        't=0 0',
        'm=audio 32990 RTP/AVP 0 8',
        'a=rtpmap:0 PCMU/8000',
        'a=rtpmap:8 PCMA/8000',
        'a=ptime:20',
        '',
      ].join('\r\n');
      const offer = await rtp.ng.command({
        command: 'offer',
        'call-id': 'harness-1',
        'from-tag': 'caller',
        sdp: audio,
        'T.38': ['force'],
        ICE: 'remove',
      });
      assert.equal(offer.result, 'ok', JSON.stringify(offer));
      const sdp = String(offer.sdp);
      const m = /^m=image (\d+) udptl t38\r?$/m.exec(sdp);
      assert.ok(m, sdp);
      const relayPort = Number(m[1]);
      assert.ok(relayPort >= rtp.ports[0] && relayPort <= rtp.ports[1], `port ${relayPort} in its range`);
      assert.match(sdp, /^a=T38FaxVersion:0\r?$/m);
      assert.match(sdp, /^a=T38FaxUdpEC:t38UDPRedundancy\r?$/m);
      assert.doesNotMatch(sdp, /^m=audio/m);
      const t38 = [
        'v=0',
        'o=- 2 1 IN IP4 127.0.0.1',
        's=-',
        'c=IN IP4 127.0.0.1',
        't=0 0',
        'm=image 32992 udptl t38',
        'a=T38FaxVersion:0',
        'a=T38MaxBitRate:14400',
        'a=T38FaxRateManagement:transferredTCF',
        'a=T38FaxMaxDatagram:400',
        'a=T38FaxUdpEC:t38UDPRedundancy',
        '',
      ].join('\r\n');
      const answer = await rtp.ng.command({
        command: 'answer',
        'call-id': 'harness-1',
        'from-tag': 'caller',
        'to-tag': 'callee',
        sdp: t38,
        'T.38': ['force'],
        ICE: 'remove',
      });
      assert.equal(answer.result, 'ok', JSON.stringify(answer));
      assert.match(
        String(answer.sdp),
        /^m=audio \d+ RTP\/AVP 0\r?$/m,
        'the caller is answered on audio (PCMU)',
      );
      const del = await rtp.ng.command({ command: 'delete', 'call-id': 'harness-1', 'from-tag': 'caller' });
      assert.equal(del.result, 'ok');
      const gone = await rtp.ng.command({ command: 'query', 'call-id': 'harness-1' });
      assert.equal(gone.result, 'error', 'the call is gone after delete');
    } finally {
      await rtp.stop();
    }
  });
});

describe(
  'Kamailio driving rtpengine: an audio caller reaches a T.38-only callee through the gateway',
  skipUnless(missingTools('kamailio', 'sipp', 'rtpengine')),
  () => {
    it('the callee is offered m=image udptl t38, the caller is answered on audio, both via the relay', async () => {
      const rtp = await startRtpengine({ portCount: 20 });
      const callee = await startSipp({ scenario: 'proxy-uas-t38.xml', timeoutSeconds: 30 });
      const trunk = await startKamailio({
        ...CRED,
        targets: { default: `127.0.0.1:${callee.port}` },
        rtpengine: { ngPort: rtp.ngPort, flags: 'T.38=force' },
      });
      try {
        const caller = await startSipp({
          scenario: 'proxy-uac-auth-audio.xml',
          remote: `127.0.0.1:${trunk.port}`,
          service: '15550100',
          auth: CRED,
          keys: { caller: CRED.username },
          timeoutSeconds: 30,
        });
        const c = await caller.finished.finally(() => caller.stop());
        assert.equal(c.code, 0, `caller: ${c.errors}\n${trunk.daemon.tail()}\n${rtp.daemon.tail()}`);
        const d = await callee.finished;
        assert.equal(d.code, 0, `callee: ${d.errors}`);
        // rtpengine created the call (offer and answer through Kamailio's module) and let it go at BYE.
        assert.ok(
          rtp.daemon.lines.some((l) => /Received command 'offer'/.test(l)) &&
            rtp.daemon.lines.some((l) => /Received command 'answer'/.test(l)) &&
            rtp.daemon.lines.some((l) => /Received command 'delete'/.test(l)),
          rtp.daemon.lines.join('\n'),
        );
      } finally {
        await trunk.stop();
        await callee.stop();
        await rtp.stop();
      }
    });
  },
);
