// A hostile party on the SIP network (issue 27, findings 4, 5 and 7), played with raw UDP sockets on
// other loopback addresses (127.0.0.2 is not on SIP_INBOUND_ALLOW) against our SIP line:
// - requests inside a call (re-INVITE, BYE, UPDATE, INFO, OPTIONS, ACK, CANCEL) from an address that
//   is not the call's far end are refused 403 and not applied, for calls answered and calls placed;
// - refused and unauthenticated INVITEs are answered statelessly: one short response per INVITE, no
//   100 Trying, no retransmission, no transaction state;
// - SDP past its bounds (1,000 m= lines) and malformed SDP get 488, never 500.
import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import client from 'prom-client';
import { createLogger } from '../src/log.ts';
import { answeringHooks, sipAnswering } from '../src/receive/answering.ts';
import { createReceiveMetrics } from '../src/receive/metrics.ts';
import { InboundRouter, resolveAllowList } from '../src/receive/routing.ts';
import type { ReceivedFaxSink } from '../src/receive/sink.ts';
import { authorize, parseChallenge } from '../src/sip/digest.ts';
import {
  header,
  parseMessage,
  parseNameAddr,
  serialize,
  type SipMessage,
  type SipRequest,
} from '../src/sip/message.ts';
import { answerOffer, audioOffer, SDP_LIMITS, t38Offer } from '../src/sip/sdp.ts';
import type { CallControl, Outcome, PreparedFax } from '../src/transmission/backend.ts';
import { type AnswerOptions, type ReceivedFax, SipLine } from '../src/transmission/sip/line.ts';
import { registerSipMetrics } from '../src/transmission/sip/sip-metrics.ts';
import { MediaDouble } from './support/media-double.ts';
import { portBlock, sipPort } from './support/telephony/ports.ts';
import { eventually } from './support/wait.ts';

const lines: SipLine[] = [];
const sockets: Socket[] = [];
after(async () => {
  for (const s of sockets) s.close();
  await Promise.all(lines.map((l) => l.close()));
});

const rtpRange = async (n = 4) => {
  const min = await portBlock('rtp', n, { align: 4 });
  return { min, max: min + n - 1 };
};

async function newLine(o: Partial<ConstructorParameters<typeof SipLine>[0]> = {}): Promise<SipLine> {
  const l = new SipLine({
    trunk: 'sip:127.0.0.1:9;transport=udp',
    listen: { host: '127.0.0.1', port: await sipPort() },
    publicAddress: '127.0.0.1',
    t38: 'accept',
    rtpPorts: await rtpRange(),
    ringTimeoutMs: 15_000,
    mediaTimeoutMs: 60_000,
    media: new MediaDouble(),
    ...o,
  });
  lines.push(l);
  return l;
}

interface Got {
  at: number;
  bytes: number;
  m: SipMessage;
}

/** A UDP socket on `host` playing a SIP party by hand; it keeps what it receives and counts bytes. */
async function party(host: string, port = 0) {
  const sock = createSocket('udp4');
  sockets.push(sock);
  await new Promise<void>((r) => sock.bind(port, host, () => r()));
  const got: Got[] = [];
  let sentBytes = 0;
  let sentPackets = 0;
  let peerPort = 0;
  sock.on('message', (buf, from) => {
    peerPort = from.port;
    got.push({ at: Date.now(), bytes: buf.length, m: parseMessage(buf) });
  });
  const me = { host, port: sock.address().port };
  return {
    ...me,
    got,
    get sentBytes() {
      return sentBytes;
    },
    get sentPackets() {
      return sentPackets;
    },
    send(m: SipMessage, to = peerPort) {
      const buf = serialize(m);
      sentBytes += buf.length;
      sentPackets++;
      sock.send(buf, to, '127.0.0.1');
    },
    /** Responses received to requests with this Call-ID and CSeq method. */
    answers(callId: string, method: string) {
      return got.flatMap((g) =>
        g.m.kind === 'response' &&
        header(g.m, 'Call-ID') === callId &&
        header(g.m, 'CSeq')?.endsWith(` ${method}`)
          ? [g.m]
          : [],
      );
    },
  };
}
type Party = Awaited<ReturnType<typeof party>>;

let branches = 0;
/** A request as a trunk writes it (a Via of `p`, the usual headers). */
function request(
  p: Party,
  method: string,
  o: {
    uri: string;
    from: string;
    to: string;
    callId: string;
    cseq: number;
    sdp?: string;
    extra?: { name: string; value: string }[];
  },
): SipRequest {
  return {
    kind: 'request',
    method,
    uri: o.uri,
    headers: [
      { name: 'Via', value: `SIP/2.0/UDP ${p.host}:${p.port};branch=z9hG4bKhostile${++branches};rport` },
      { name: 'Max-Forwards', value: '70' },
      { name: 'From', value: o.from },
      { name: 'To', value: o.to },
      { name: 'Call-ID', value: o.callId },
      { name: 'CSeq', value: `${o.cseq} ${method}` },
      { name: 'Contact', value: `<sip:trunk@${p.host}:${p.port}>` },
      { name: 'User-Agent', value: 'carrier-sbc/4.2' },
      ...(o.extra ?? []),
      ...(o.sdp !== undefined ? [{ name: 'Content-Type', value: 'application/sdp' }] : []),
    ],
    body: Buffer.from(o.sdp ?? '', 'utf8'),
  };
}

const offer = (host: string, port: number) =>
  audioOffer({ address: host, port, sessionId: port, version: 1 });
const finals = (rs: SipMessage[]) =>
  rs.flatMap((r) => (r.kind === 'response' && r.status >= 200 ? [r.status] : []));

/** Answers calls into a MediaDouble; screen and trust come from a router allowing 127.0.0.1 only. */
async function answeringLine(o: { results?: ReceivedFax[] } = {}) {
  const media = new MediaDouble();
  const l = await newLine({ media, rtpPorts: await rtpRange(16) });
  const router = new InboundRouter({
    allow: await resolveAllowList('127.0.0.1', ''),
    countryCode: '',
    lines: 8,
    findNumber: async (n) => ({ numberId: 'n', accountId: 'a', number: n, stationId: null, receive: true }),
  });
  const opts: AnswerOptions = {
    screen: (c) => {
      const d = router.screen(c);
      return d ? { reject: d.status, reason: d.reason } : undefined;
    },
    trusted: (a) => router.allows(a),
    decide: () => ({ file: join(tmpdir(), 'faxline-hostile-never-written.tif'), ident: 'RX' }),
    onResult: (r) => o.results?.push(r),
  };
  await l.answer(opts);
  const { ua } = await l.start();
  const registry = new client.Registry();
  registerSipMetrics(registry, () => l.userAgent);
  return { l, ua, media, registry };
}

describe('in-dialog requests from another address (finding 4)', { timeout: 120_000 }, () => {
  it('an answered call: re-INVITE, BYE, UPDATE, INFO, OPTIONS, ACK and CANCEL from 127.0.0.2 are refused 403, media not moved, the call goes on', async () => {
    const results: ReceivedFax[] = [];
    const { ua, media, registry } = await answeringLine({ results });
    const trunk = await party('127.0.0.1');
    const attacker = await party('127.0.0.2');
    const callId = 'hijack-in@test';
    const from = '<sip:+15550001111@127.0.0.1>;tag=trunk1';
    const to0 = '<sip:+15559990000@127.0.0.1>';
    const uri = `sip:+15559990000@127.0.0.1:${ua.port}`;
    trunk.send(
      request(trunk, 'INVITE', { uri, from, to: to0, callId, cseq: 1, sdp: offer('127.0.0.1', 32010) }),
      ua.port,
    );
    const ok = await eventually(
      async () => trunk.answers(callId, 'INVITE').find((r) => r.kind === 'response' && r.status === 200),
      10_000,
    );
    const to = header(ok, 'To')!;
    const ack = (p: Party, cseq: number) => request(p, 'ACK', { uri, from, to, callId, cseq });
    trunk.send(ack(trunk, 1), ua.port);
    const session = await eventually(async () => media.sessions.find((s) => s.started), 10_000);
    assert.deepEqual([session.started?.remote.address, session.started?.remote.port], ['127.0.0.1', 32010]);

    // The attacker knows the Call-ID and both tags (it sees the signalling) and writes its own media
    // address into the SDP: to T.38 (switchToT38) and on audio (updateRemote).
    let seq = 10;
    const inDialog = (method: string, sdp?: string) =>
      request(attacker, method, {
        uri,
        from,
        to,
        callId,
        cseq: ++seq,
        ...(sdp !== undefined ? { sdp } : {}),
      });
    const t38 = t38Offer({ address: '127.0.0.2', port: 32020, sessionId: 9, version: 9 });
    for (const [method, sdp] of [
      ['INVITE', t38],
      ['INVITE', offer('127.0.0.2', 32022)],
      ['UPDATE', offer('127.0.0.2', 32024)],
      ['INFO', undefined],
      ['OPTIONS', undefined],
      ['BYE', undefined],
    ] as const) {
      attacker.send(inDialog(method, sdp), ua.port);
      const n = seq;
      const r = await eventually(
        async () =>
          attacker.got.find(
            (g) => g.m.kind === 'response' && g.m.status >= 200 && header(g.m, 'CSeq') === `${n} ${method}`,
          ),
        10_000,
      ).catch(() => assert.fail(`no answer to the attacker's ${method} (CSeq ${n})`));
      assert.equal(
        r.m.kind === 'response' && r.m.status,
        403,
        `the attacker's ${method} was answered ${r.m.kind === 'response' && r.m.status}`,
      );
    }
    // An ACK (nothing answers an ACK) and a CANCEL (no INVITE pending: 481, or 403 for the address).
    attacker.send(ack(attacker, 11), ua.port);
    attacker.send(request(attacker, 'CANCEL', { uri, from, to: to0, callId, cseq: 1 }), ua.port);
    await eventually(async () => attacker.answers(callId, 'CANCEL').length > 0, 10_000);
    assert.ok(
      !attacker.got.some((g) => g.m.kind === 'response' && g.m.status === 100),
      'no 100 Trying to the attacker',
    );
    assert.ok(
      !attacker.got.some((g) => g.m.kind === 'response' && g.m.status === 200),
      'nothing accepted from the attacker',
    );

    // Nothing applied: the media stays with the trunk, the call is up.
    assert.equal(session.switchedToT38, undefined, 'switched to the attacker’s T.38 address');
    assert.equal(session.updates.length, 0, 'media moved to the attacker');
    assert.equal(session.stopped, false, 'the call was ended by the attacker’s BYE');
    assert.equal(results.length, 0);
    const text = await registry.metrics();
    for (const m of ['INVITE', 'UPDATE', 'INFO', 'OPTIONS', 'BYE'])
      assert.match(text, new RegExp(`faxline_sip_in_dialog_refused_total\\{method="${m}"\\} [1-9]`), m);

    // The trunk itself still can: its re-INVITE moves the media (the test can see a move), its BYE ends the call.
    trunk.send(
      request(trunk, 'INVITE', { uri, from, to, callId, cseq: 2, sdp: offer('127.0.0.1', 32030) }),
      ua.port,
    );
    await eventually(
      async () =>
        finals(trunk.answers(callId, 'INVITE')).filter((s) => s === 200).length >= 1 &&
        session.updates.length === 1,
      10_000,
    );
    assert.deepEqual(
      session.updates.map((u) => [u.address, u.port]),
      [['127.0.0.1', 32030]],
    );
    trunk.send(ack(trunk, 2), ua.port);
    trunk.send(request(trunk, 'BYE', { uri, from, to, callId, cseq: 3 }), ua.port);
    await eventually(async () => finals(trunk.answers(callId, 'BYE')).includes(200), 10_000);
    await eventually(async () => results.length === 1, 10_000);
    assert.equal(results[0]?.remoteBye, true);
  });

  it('a placed call: a re-INVITE and a BYE from 127.0.0.2 are refused 403, the fax goes on until the trunk hangs up', async () => {
    const trunk = await party('127.0.0.1', await sipPort());
    const attacker = await party('127.0.0.2');
    const media = new MediaDouble();
    const l = await newLine({ trunk: `sip:127.0.0.1:${trunk.port};transport=udp`, media });
    const fax: PreparedFax = {
      jobId: 'job-hostile',
      attempt: 1,
      faxNumber: '+15559990000',
      callerId: '+15550001111',
      quality: 'standard',
      pageBytes: [1000],
      tiff: Buffer.from('II*\0'),
    };
    const ctl: CallControl = {
      signal: new AbortController().signal,
      deadline: new Date(Date.now() + 60_000),
      onProgress: () => undefined,
    };
    const outcome: Promise<Outcome> = l.transmit(fax, ctl);
    const inv = await eventually(
      async () =>
        trunk.got.find((g) => g.m.kind === 'request' && g.m.method === 'INVITE')?.m as SipRequest | undefined,
      10_000,
    );
    const callId = header(inv, 'Call-ID')!;
    const ourFrom = header(inv, 'From')!;
    const ourTo = `${header(inv, 'To')!};tag=far1`;
    const ok = {
      kind: 'response' as const,
      status: 200,
      reason: 'OK',
      headers: [
        ...inv.headers.filter((h) => ['Via', 'From', 'Call-ID', 'CSeq'].includes(h.name)),
        { name: 'To', value: ourTo },
        { name: 'Contact', value: `<sip:far@127.0.0.1:${trunk.port}>` },
        { name: 'Content-Type', value: 'application/sdp' },
      ],
      body: Buffer.from(offer('127.0.0.1', 32040)),
    };
    trunk.send(ok);
    await eventually(
      async () => trunk.got.some((g) => g.m.kind === 'request' && g.m.method === 'ACK'),
      10_000,
    );
    const session = await eventually(async () => media.sessions.find((s) => s.started), 10_000);
    const { ua } = await l.start();
    // In-dialog requests from the far end: From is theirs, To is ours.
    const uri = parseNameAddr(header(inv, 'Contact')!).uri;
    const theirs = (p: Party, method: string, cseq: number, sdp?: string) =>
      request(p, method, { uri, from: ourTo, to: ourFrom, callId, cseq, ...(sdp ? { sdp } : {}) });
    attacker.send(
      theirs(
        attacker,
        'INVITE',
        5,
        t38Offer({ address: '127.0.0.2', port: 32042, sessionId: 1, version: 2 }),
      ),
      ua.port,
    );
    attacker.send(theirs(attacker, 'BYE', 6), ua.port);
    await eventually(
      async () =>
        finals(attacker.answers(callId, 'INVITE')).length === 1 &&
        finals(attacker.answers(callId, 'BYE')).length === 1,
      10_000,
    );
    assert.deepEqual(
      [...finals(attacker.answers(callId, 'INVITE')), ...finals(attacker.answers(callId, 'BYE'))],
      [403, 403],
    );
    assert.equal(session.switchedToT38, undefined, 'moved to the attacker’s T.38 address');
    assert.equal(session.stopped, false, 'the attacker’s BYE ended the call');
    // The far end's own BYE (from the trunk's address) ends it.
    trunk.send(theirs(trunk, 'BYE', 7), ua.port);
    const out = await outcome;
    assert.equal(!out.ok && out.code, 'SIP_BYE', JSON.stringify(out));
    assert.ok(session.stopped);
  });
});

/** The Authorization a carrier with the right credentials sends (a nonce of the same installation). */
const CRED = { realm: 'faxline-hostile', username: 'carrier', password: 'Hostile-Test-27' };

describe(
  'reflection: refused and unauthenticated INVITEs are answered statelessly (finding 5)',
  { timeout: 120_000 },
  () => {
    it('N INVITEs off the allow-list get one 403 each, N unauthenticated on it one 401 each: no 100, no retransmission, no state', async () => {
      const N = 200;
      const t1 = 100;
      const registry = new client.Registry();
      const noSink: ReceivedFaxSink = {
        begin: () => Promise.reject(new Error('no call is answered in this test')),
      };
      const log = createLogger('silent');
      const metrics = createReceiveMetrics(registry);
      const router = new InboundRouter({
        allow: await resolveAllowList('127.0.0.1', ''),
        countryCode: '',
        lines: 8,
        findNumber: async () => null, // the authenticated probe: 404, a stateful answer
        onRefused: (cause) => metrics.refused.inc({ cause }),
      });
      const receiving = { router, sink: noSink, metrics };
      const l = await newLine({ inboundAuth: CRED, timers: { t1 } });
      await l.answer(sipAnswering(await answeringHooks(receiving), log));
      const { ua } = await l.start();
      registerSipMetrics(registry, () => l.userAgent);
      const baseline = ua.counters().serverTransactions;
      const uri = `sip:+15559990000@127.0.0.1:${ua.port}`;
      const answered = (p: Party) => new Set(p.got.map((g) => header(g.m, 'Call-ID'))).size;
      const flood = async (p: Party, tag: string) => {
        // In batches of 20, each answered before the next: a burst of hundreds would overflow the
        // sockets' receive buffers on this busy machine, and a lost datagram is not what is measured.
        for (let i = 0; i < N; i++) {
          p.send(
            request(p, 'INVITE', {
              uri,
              from: `"Carrier" <sip:+15550001111@127.0.0.1>;tag=${tag}${i}`,
              to: '<sip:+15559990000@127.0.0.1>',
              callId: `${tag}-${i}@spoofed`,
              cseq: 1,
              sdp: offer(p.host, 32050),
            }),
            ua.port,
          );
          if ((i + 1) % 20 !== 0 && i + 1 !== N) continue;
          const want = i + 1;
          await eventually(async () => answered(p) >= want, 30_000).catch(() =>
            assert.fail(`${answered(p)} of ${want} INVITEs from ${p.host} answered`),
          );
        }
      };
      const outsider = await party('127.0.0.2');
      const unauthenticated = await party('127.0.0.1');
      await flood(outsider, 'off');
      await flood(unauthenticated, 'on');
      // No transaction is kept for any of them (with the old code: 2N for 32 s).
      assert.equal(ua.counters().serverTransactions, baseline, 'server transactions held after the flood');
      assert.match(await registry.metrics(), new RegExp(`faxline_sip_server_transactions ${baseline}\\b`));

      // A sign that time went past the retransmissions: a probe with the right credentials gets a
      // stateful 404, retransmitted at T1, 2·T1, 4·T1 (no ACK is sent); by its third copy every answer
      // to the flood would have been retransmitted twice.
      const probe = await party('127.0.0.1');
      const first = request(probe, 'INVITE', {
        uri,
        from: '<sip:+15550001111@127.0.0.1>;tag=probe',
        to: '<sip:+15559990000@127.0.0.1>',
        callId: 'probe@test',
        cseq: 1,
        sdp: offer('127.0.0.1', 32052),
      });
      probe.send(first, ua.port);
      const challenge = await eventually(
        async () =>
          probe.answers('probe@test', 'INVITE').find((r) => r.kind === 'response' && r.status === 401),
        10_000,
      );
      const c = parseChallenge(challenge.headers.find((h) => h.name === 'WWW-Authenticate')!.value);
      const authz = authorize({
        challenge: c,
        method: 'INVITE',
        uri,
        username: CRED.username,
        password: CRED.password,
        nc: 1,
      });
      probe.send(
        request(probe, 'INVITE', {
          uri,
          from: '<sip:+15550001111@127.0.0.1>;tag=probe',
          to: '<sip:+15559990000@127.0.0.1>',
          callId: 'probe@test',
          cseq: 2,
          sdp: offer('127.0.0.1', 32052),
          extra: [{ name: 'Authorization', value: authz.value }],
        }),
        ua.port,
      );
      await eventually(
        async () => finals(probe.answers('probe@test', 'INVITE')).filter((s) => s === 404).length >= 3,
        20_000,
      ).catch(() =>
        assert.fail(
          `the probe's 404 was not retransmitted twice: ${JSON.stringify(finals(probe.answers('probe@test', 'INVITE')))}`,
        ),
      );

      for (const [p, status] of [
        [outsider, 403],
        [unauthenticated, 401],
      ] as const) {
        const statuses = p.got.map((g) => (g.m.kind === 'response' ? g.m.status : 0));
        const received = p.got.reduce((n, g) => n + g.bytes, 0);
        const packetRatio = p.got.length / p.sentPackets;
        const byteRatio = received / p.sentBytes;
        const detail = `${p.host}: ${p.sentPackets} INVITEs (${p.sentBytes} B) → ${p.got.length} packets (${received} B): ${packetRatio.toFixed(2)} packets, ${byteRatio.toFixed(2)}× bytes per INVITE`;
        console.log(`# ${detail}`);
        assert.ok(!statuses.includes(100), `100 Trying sent: ${detail}`);
        assert.deepEqual([...new Set(statuses)], [status], detail);
        assert.equal(p.got.length, N, `one answer per INVITE: ${detail}`);
        assert.ok(byteRatio <= 1, `more bytes back than sent: ${detail}`);
      }
      const challenges = unauthenticated.got.map(
        (g) => g.m.headers.filter((h) => h.name === 'WWW-Authenticate').length,
      );
      assert.ok(
        challenges.every((n) => n >= 1),
        'every 401 carries a challenge',
      );
      const text = await registry.metrics();
      assert.match(
        text,
        new RegExp(`faxline_inbound_calls_refused_total\\{cause="source_not_allowed"\\} ${N}\\b`),
      );
      const stateless = Number(/faxline_sip_stateless_responses_total (\d+)/.exec(text)?.[1]);
      assert.ok(
        stateless >= 2 * N,
        `faxline_sip_stateless_responses_total ${stateless}, not at least ${2 * N}`,
      );
    });

    it('a retransmitted refused INVITE gets the same answer again, with the same To tag', async () => {
      const { ua } = await answeringLine();
      const outsider = await party('127.0.0.2');
      const inv = request(outsider, 'INVITE', {
        uri: `sip:+15559990000@127.0.0.1:${ua.port}`,
        from: '<sip:+15550001111@127.0.0.1>;tag=r1',
        to: '<sip:+15559990000@127.0.0.1>',
        callId: 'again@test',
        cseq: 1,
        sdp: offer('127.0.0.2', 32060),
      });
      outsider.send(inv, ua.port);
      await eventually(async () => outsider.got.length >= 1, 10_000);
      outsider.send(inv, ua.port);
      await eventually(async () => outsider.got.length >= 2, 10_000);
      const [a, b] = outsider.got.map((g) => g.m);
      assert.deepEqual([a?.kind === 'response' && a.status, b?.kind === 'response' && b.status], [403, 403]);
      assert.equal(header(a!, 'To'), header(b!, 'To'));
      assert.match(header(a!, 'To') ?? '', /;tag=\w+/);
    });
  },
);

/** Deterministic random numbers (mulberry32), so a failing case can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const manyMedia = (n: number) =>
  `${offer('127.0.0.1', 32070).trimEnd()}\r\n${Array.from({ length: n }, (_, i) => `m=audio ${2 + 2 * i} RTP/AVP 0\r\n`).join('')}`;

/** A valid offer cut, spliced and sprinkled with odd bytes. */
function mangled(r: () => number): string {
  const base =
    r() < 0.5
      ? offer('127.0.0.1', 32080)
      : t38Offer({ address: '127.0.0.1', port: 32082, sessionId: 1, version: 1 });
  const pieces = [
    'm=',
    'm=image',
    'm=audio x RTP/AVP',
    'c=IN IP4',
    'c=IN IP6 ::',
    'a=T38FaxVersion:',
    'a=rtpmap:0',
    '=',
    ':',
    ' ',
    '\r\n',
    '\n',
    '\0',
    '\u00ff',
    'a=fmtp:',
    'o=',
    'v=1',
    'b=AS:',
    't=',
    'm=image 0 udptl',
    'a=T38FaxUdpEC',
    'm=audio 65536 RTP/AVP 0',
    'm=audio -1 RTP/AVP 8',
    'c=IN IP4 999.1.1.1',
  ];
  let s = base;
  const edits = 1 + Math.floor(r() * 6);
  for (let i = 0; i < edits; i++) {
    const at = Math.floor(r() * (s.length + 1));
    const k = r();
    if (k < 0.4) s = s.slice(0, at) + pieces[Math.floor(r() * pieces.length)]! + s.slice(at);
    else if (k < 0.7) s = s.slice(0, at) + s.slice(at + Math.floor(r() * 20));
    else s = s.slice(0, at) + s.slice(Math.floor(r() * s.length));
  }
  return s;
}

describe(
  'SDP bounds: 1,000 m= lines and malformed offers get 488, never 500 (finding 7)',
  { timeout: 120_000 },
  () => {
    it('answerOffer never throws: past the bounds or malformed it says why (2,000 seeded cases)', () => {
      const l = { address: '127.0.0.1', port: 32090, sessionId: 1, version: 1 };
      const big = answerOffer(manyMedia(1000), l, true);
      assert.deepEqual(big, { ok: false, reason: `SDP over ${SDP_LIMITS.bytes} bytes` });
      const many = answerOffer(manyMedia(SDP_LIMITS.media), l, true);
      assert.match(many.ok ? '' : many.reason, /over 8 media sections/);
      assert.equal(
        answerOffer(manyMedia(SDP_LIMITS.media - 1), l, true).ok,
        true,
        'within the bounds it is answered',
      );
      const r = rng(27);
      let answered = 0;
      for (let i = 0; i < 2000; i++) {
        const text = mangled(r);
        let a;
        try {
          a = answerOffer(text, l, i % 2 === 0);
        } catch (err) {
          assert.fail(`case ${i} threw ${(err as Error).message}: ${JSON.stringify(text)}`);
        }
        if (a.ok) answered++;
      }
      assert.ok(answered > 0 && answered < 2000, `${answered} of 2000 answered: the cases are mixed`);
    });

    it('an INVITE and a re-INVITE with 1,000 m= lines, and 40 malformed offers, are answered 488 (or 200), never 500', async () => {
      const { ua, media } = await answeringLine();
      const trunk = await party('127.0.0.1');
      const uri = `sip:+15559990000@127.0.0.1:${ua.port}`;
      const call = (callId: string, sdp: string) =>
        request(trunk, 'INVITE', {
          uri,
          from: `<sip:+15550001111@127.0.0.1>;tag=${callId}`,
          to: '<sip:+15559990000@127.0.0.1>',
          callId,
          cseq: 1,
          sdp,
        });
      const final = (callId: string) =>
        eventually(async () => finals(trunk.answers(callId, 'INVITE'))[0], 10_000).catch(() =>
          assert.fail(`no final answer to ${callId}`),
        );
      trunk.send(call('m1000', manyMedia(1000)), ua.port);
      assert.equal(await final('m1000'), 488);
      // In a call: the re-INVITE with 1,000 m= lines is refused 488, the call stays.
      trunk.send(call('reinv', offer('127.0.0.1', 32100)), ua.port);
      assert.equal(await final('reinv'), 200);
      const ok = trunk.answers('reinv', 'INVITE').find((m) => m.kind === 'response' && m.status === 200)!;
      const to = header(ok, 'To')!;
      const from = '<sip:+15550001111@127.0.0.1>;tag=reinv';
      trunk.send(request(trunk, 'ACK', { uri, from, to, callId: 'reinv', cseq: 1 }), ua.port);
      trunk.send(
        request(trunk, 'INVITE', { uri, from, to, callId: 'reinv', cseq: 2, sdp: manyMedia(1000) }),
        ua.port,
      );
      await eventually(async () => finals(trunk.answers('reinv', 'INVITE')).length >= 2, 10_000);
      assert.deepEqual(finals(trunk.answers('reinv', 'INVITE')).slice(0, 2), [200, 488]);
      const r = rng(7);
      const statuses: number[] = [];
      for (let i = 0; i < 40; i++) {
        const id = `fuzz-${i}`;
        // A hung-up call keeps its media port 2 s (the engine's grace after a BYE): wait for one free.
        await eventually(async () => media.active() < 7, 20_000);
        trunk.send(call(id, mangled(r)), ua.port);
        const status = await final(id);
        statuses.push(status);
        if (status !== 200) continue;
        // Answered: hang it up, so the media ports stay free for the next cases.
        const ans = trunk.answers(id, 'INVITE').find((m) => m.kind === 'response' && m.status === 200)!;
        const dlg = {
          uri,
          from: `<sip:+15550001111@127.0.0.1>;tag=${id}`,
          to: header(ans, 'To')!,
          callId: id,
        };
        trunk.send(request(trunk, 'ACK', { ...dlg, cseq: 1 }), ua.port);
        trunk.send(request(trunk, 'BYE', { ...dlg, cseq: 2 }), ua.port);
        await eventually(async () => finals(trunk.answers(id, 'BYE')).length > 0, 10_000);
      }
      assert.ok(
        statuses.every((s) => s === 488 || s === 200),
        `statuses: ${statuses.join(',')}`,
      );
    });
  },
);
