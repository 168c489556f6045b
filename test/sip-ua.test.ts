// The SIP user agent (src/sip/) and the SIP line (src/transmission/sip/line.ts): message parsing and
// its limits, digest auth against the RFC test vectors, SDP offer/answer, and whole calls against
// SIPp (an independent SIP implementation) as the trunk or as the caller, on loopback.
// Ports from test/support/telephony/ports.ts (31000-31999 below are SDP text, not bound). The media engine is test/support/media-double.ts
// until the native one lands: these tests prove the signalling, not a fax.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { authorize, parseChallenge } from '../src/sip/digest.ts';
import {
  header,
  headerValues,
  makeResponse,
  MAX_MESSAGE_BYTES,
  parseMessage,
  parseNameAddr,
  parseUri,
  parseVia,
  serialize,
  SipParseError,
  StreamFramer,
} from '../src/sip/message.ts';
import { answerOffer, audioOffer, readSdp, t38Offer } from '../src/sip/sdp.ts';
import { UserAgent } from '../src/sip/ua.ts';
import type { CallControl, Outcome, PreparedFax, Progress } from '../src/transmission/backend.ts';
import {
  removeStaleTmp,
  requestUri,
  SipLine,
  type ReceivedFax,
  type SipLineOptions,
} from '../src/transmission/sip/line.ts';
import { classifyStatus, classifyT30 } from '../src/transmission/sip/outcome.ts';
import { loadMediaEngine, mediaUnavailableMessage } from '../src/transmission/sip/media-engine.ts';
import { createBackend, sipLineFrom } from '../src/transmission/select.ts';
import { makeFaxTiff } from './support/faxtiff.ts';
import { MediaDouble } from './support/media-double.ts';
import { skipUnless } from './support/skips.ts';
import { portBlock, sipPort } from './support/telephony/ports.ts';
import { eventually } from './support/wait.ts';

const CRLF = '\r\n';
const msg = (lines: string[], body = '') => Buffer.from(lines.join(CRLF) + CRLF + CRLF + body, 'latin1');

const invite = [
  'INVITE sip:+15551234567@trunk.example.net SIP/2.0',
  'v: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKa1, SIP/2.0/UDP 10.0.0.2:5070;branch=z9hG4bKb2',
  'Via: SIP/2.0/TCP [2001:db8::1]:5080;branch=z9hG4bKc3;rport',
  'f: "Fax, Inc." <sip:+15550001111@example.net>;tag=abc',
  't: <sip:+15551234567@trunk.example.net>',
  'i: call-1@example.net',
  'CSeq: 7 INVITE',
  'Subject: a long',
  '  folded\tvalue',
  'm: <sip:caller@10.0.0.1:5060;transport=tcp>;expires=60',
  'c: application/sdp',
  'l: 5',
];

describe('SIP messages', () => {
  it('parses compact forms, comma lists, folding and Content-Length', () => {
    const m = parseMessage(msg(invite, 'v=0\r\nextra'));
    assert.equal(m.kind, 'request');
    assert.equal(m.kind === 'request' && m.method, 'INVITE');
    assert.equal(header(m, 'call-id'), 'call-1@example.net');
    assert.equal(header(m, 'Subject'), 'a long folded\tvalue');
    assert.equal(m.body.toString(), 'v=0\r\n', 'the body stops at Content-Length');
    const vias = headerValues(m, 'Via').map(parseVia);
    assert.deepEqual(
      vias.map((v) => [v.transport, v.host, v.port, v.params.get('branch')]),
      [
        ['UDP', '10.0.0.1', 5060, 'z9hG4bKa1'],
        ['UDP', '10.0.0.2', 5070, 'z9hG4bKb2'],
        ['TCP', '[2001:db8::1]', 5080, 'z9hG4bKc3'],
      ],
    );
    const from = parseNameAddr(header(m, 'From') ?? '');
    assert.equal(from.display, 'Fax, Inc.');
    assert.equal(from.params.get('tag'), 'abc');
    assert.equal(headerValues(m, 'From').length, 1, 'a comma inside quotes does not split');
    const contact = parseNameAddr(header(m, 'Contact') ?? '');
    assert.equal(parseUri(contact.uri).params.get('transport'), 'tcp');
    assert.equal(contact.params.get('expires'), '60');
    // Written back: long names, one Content-Length from the body, and parsed again the same.
    const again = parseMessage(serialize(m));
    assert.deepEqual(again, m);
    assert.match(serialize(m).toString(), /\r\nCall-ID: call-1@example\.net\r\n/);
  });

  it('refuses what is over the limits or malformed, with the reason', () => {
    const refused = (b: Buffer, re: RegExp) =>
      assert.throws(
        () => parseMessage(b),
        (e: unknown) => e instanceof SipParseError && re.test(e.message),
      );
    refused(msg(invite, 'x'.repeat(MAX_MESSAGE_BYTES)), /over 65536 bytes/);
    refused(
      msg([...invite.slice(0, -1), ...Array.from({ length: 200 }, (_, i) => `X-H${i}: v`)]),
      /more than 128 header/,
    );
    refused(
      msg(
        invite.filter((l) => !l.startsWith('i:')),
        'v=0\r\n',
      ),
      /missing Call-ID/,
    );
    refused(
      msg(
        invite.map((l) => (l.startsWith('CSeq') ? 'CSeq: seven INVITE' : l)),
        'v=0\r\n',
      ),
      /malformed CSeq/,
    );
    refused(msg(invite, 'v=0'), /body shorter than Content-Length/);
    refused(msg(['GARBAGE', ...invite.slice(1)]), /malformed start line/);
    refused(msg([...invite, 'Bad Header: x']), /malformed header name/);
    refused(Buffer.from(invite.join(CRLF)), /no blank line/);
    refused(msg(invite.map((l) => (l.startsWith('l:') ? 'l: 1e3' : l))), /bad Content-Length/);
  });

  it('frames a TCP stream by Content-Length, across chunks and with keep-alives', () => {
    const one = msg(invite, 'v=0\r\n');
    const resp = msg(['SIP/2.0 200 OK', ...invite.slice(1, 7), 'Content-Length: 0']);
    const stream = Buffer.concat([Buffer.from('\r\n\r\n'), one, resp, one]);
    const f = new StreamFramer();
    const got = [
      ...f.push(stream.subarray(0, 100)),
      ...f.push(stream.subarray(100, one.length + 30)),
      ...f.push(stream.subarray(one.length + 30)),
    ];
    assert.deepEqual(
      got.map((m) => (m.kind === 'request' ? m.method : m.status)),
      ['INVITE', 200, 'INVITE'],
    );
    assert.throws(
      () => new StreamFramer().push(msg(invite.filter((l) => !l.startsWith('l:')))),
      /Content-Length is required/,
    );
    assert.throws(() => new StreamFramer().push(Buffer.alloc(MAX_MESSAGE_BYTES + 1, 0x41)), /headers over/);
  });
});

describe('digest authentication', () => {
  it('answers the RFC 2617 and RFC 7616 examples (MD5 and SHA-256, qop=auth)', () => {
    const rfc2617 = parseChallenge(
      'Digest realm="testrealm@host.com", qop="auth,auth-int", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc069c403ebaf9f0171e9517f40e41"',
    );
    const md5 = authorize({
      challenge: rfc2617,
      method: 'GET',
      uri: '/dir/index.html',
      username: 'Mufasa',
      password: 'Circle Of Life',
      nc: 1,
      cnonce: '0a4f113b',
    });
    assert.equal(md5.response, '6629fae49393a05397450978507c4ef1');
    assert.match(
      md5.value,
      /^Digest username="Mufasa", realm="testrealm@host.com", .*qop=auth, nc=00000001, cnonce="0a4f113b"/,
    );
    assert.match(md5.value, /opaque="5ccc069c403ebaf9f0171e9517f40e41"/);
    const base =
      'realm="http-auth@example.org", qop="auth, auth-int", nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"';
    const input = {
      method: 'GET',
      uri: '/dir/index.html',
      username: 'Mufasa',
      password: 'Circle of Life',
      nc: 1,
      cnonce: 'f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ',
    };
    assert.equal(
      authorize({ ...input, challenge: parseChallenge(`Digest ${base}, algorithm=SHA-256`) }).response,
      '753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1',
    );
    assert.equal(
      authorize({ ...input, challenge: parseChallenge(`Digest ${base}, algorithm=MD5`) }).response,
      '8ca523f5e9506fed4657c9700eebdbec',
    );
    assert.throws(() => parseChallenge('Basic realm="x"'), /not a Digest challenge/);
    assert.throws(
      () =>
        authorize({
          ...input,
          challenge: parseChallenge('Digest realm="r", nonce="n", algorithm=SHA-512-256'),
        }),
      /unsupported digest algorithm/,
    );
  });
});

describe('SDP offer/answer', () => {
  const local = { address: '127.0.0.1', port: 31000, sessionId: 1, version: 1 };
  const t38 = [
    'v=0',
    'o=gw 1 1 IN IP4 192.0.2.9',
    's=-',
    'c=IN IP4 192.0.2.9',
    't=0 0',
    'm=image 40000 udptl t38',
    'a=T38FaxVersion:0',
    'a=T38MaxBitRate:9600',
    'a=T38FaxRateManagement:localTCF',
    'a=T38FaxMaxBuffer:262',
    'a=T38FaxMaxDatagram:176',
    'a=T38FaxUdpEC:t38UDPFEC',
    'a=T38FaxTranscodingJBIG',
    'a=T38VendorInfo:0 0 0',
    'm=audio 40002 RTP/AVP 18 8',
    'a=rtpmap:18 G729/8000',
    '',
  ].join(CRLF);

  it('answers T.38 with what we do (redundancy for FEC, their datagram size), declining the rest', () => {
    const a = answerOffer(t38, local, true);
    assert.ok(a.ok && a.transport === 't38');
    assert.deepEqual([a.remote.address, a.remote.port], ['192.0.2.9', 40000]);
    assert.deepEqual(a.t38, {
      version: 0,
      maxBitRate: 9600,
      rateManagement: 'localTCF',
      maxDatagram: 176,
      errorCorrection: 'redundancy',
      fillBitRemoval: false,
    });
    assert.match(a.sdp, /m=image 31000 udptl t38\r\n/);
    assert.match(a.sdp, /a=T38FaxUdpEC:t38UDPRedundancy/);
    assert.doesNotMatch(a.sdp, /JBIG|VendorInfo/);
    assert.match(a.sdp, /m=audio 0 RTP\/AVP/, 'the audio line is declined with port 0');
    // With T.38 off, the same offer falls back to its audio: PCMA, not G.729.
    const audio = answerOffer(t38, local, false);
    assert.ok(audio.ok && audio.transport === 'audio' && audio.payloadType === 8);
    assert.match(audio.sdp, /m=image 0 udptl t38[\s\S]*m=audio 31000 RTP\/AVP 8\r\n[\s\S]*a=ptime:20/);
    assert.deepEqual(answerOffer(t38.replace(' 18 8', ' 18'), local, false), {
      ok: false,
      reason: 'no PCMU, PCMA or T.38 offered',
    });
  });

  it('offers G.711 at 20 ms and T.38 version 0 with redundancy', () => {
    const offer = readSdp(audioOffer(local));
    assert.deepEqual(offer.audio, { address: '127.0.0.1', port: 31000, payloadTypes: [0, 8] });
    const img = readSdp(t38Offer(local)).image;
    assert.equal(img?.t38.errorCorrection, 'redundancy');
    assert.equal(img?.t38.version, 0);
  });
});

describe('SIP outcome mapping (issue 18)', () => {
  it('maps final statuses and T.30 results to failure types', () => {
    const t = (s: number) => `${classifyStatus(s).type}/${classifyStatus(s).retryable}`;
    assert.deepEqual([486, 600, 480, 408, 487, 404, 484, 604, 403, 503, 500].map(t), [
      'busy/true',
      'busy/true',
      'no_answer/true',
      'no_answer/true',
      'no_answer/true',
      'invalid_number/false',
      'invalid_number/false',
      'invalid_number/false',
      'backend_error/true',
      'backend_error/true',
      'backend_error/true',
    ]);
    assert.deepEqual(classifyT30({ code: 2, pages: 0 }), { type: 'no_fax_tone', retryable: true });
    assert.deepEqual(classifyT30({ code: 3, pages: 0 }), { type: 'no_fax_tone', retryable: true });
    assert.deepEqual(classifyT30({ code: 11, pages: 0 }), { type: 'protocol_error', retryable: false });
    assert.deepEqual(classifyT30({ code: 25, pages: 2 }), { type: 'call_dropped', retryable: true });
    assert.deepEqual(classifyT30({ code: 25, pages: 0 }), { type: 'protocol_error', retryable: true });
  });

  it('puts the number in E.164 with + in the Request-URI, on the trunk host and transport', () => {
    assert.equal(
      requestUri('sip:trunk.example.net:5070;transport=tcp', '+4930123456'),
      'sip:+4930123456@trunk.example.net:5070;transport=tcp',
    );
    assert.equal(requestUri('sip:carrier@[2001:db8::5]', '+15551234567'), 'sip:+15551234567@[2001:db8::5]');
  });
});

// --- Whole calls against SIPp -------------------------------------------------------------------

const sippHere = spawnSync('sipp', ['-v'], { encoding: 'utf8' }).error === undefined;
const needsSipp = skipUnless(!sippHere && 'SIPp is not installed (apt-get install sip-tester)');
const fixtures = new URL('./fixtures/sipp/', import.meta.url).pathname;
// Ports from the SIP tests' shared ranges (test/support/telephony/ports.ts), each bound once to
// check it is free: fixed ports inside the kernel's ephemeral range collide with whatever client
// socket happens to hold one (a SIPp that cannot bind fails the case). SIPp's own media (-mp)
// stays on 31800-31999.
const rtpRange = async () => {
  const min = await portBlock('rtp', 4, { align: 4 });
  return { min, max: min + 3 };
};

interface SippRun {
  done: Promise<{ code: number | null; errors: string }>;
  kill: () => void;
}

/** Runs one SIPp call; resolves with its exit code (0: the scenario ran as written) and its errors. */
function sipp(
  scenario: string,
  o: {
    port: number;
    target?: string;
    tcp?: boolean;
    subst?: Record<string, string>;
    service?: string;
    waitS?: number;
  },
): SippRun {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-sipp-'));
  const errFile = join(dir, 'errors.log');
  // SIPp reads status codes at load time: @NAME@ placeholders are filled into a copy.
  let file = join(fixtures, scenario);
  if (o.subst) {
    let text = readFileSync(file, 'utf8');
    for (const [k, v] of Object.entries(o.subst)) text = text.replaceAll(`@${k}@`, v);
    file = join(dir, scenario);
    writeFileSync(file, text);
  }
  const args = [
    ...(o.target ? [o.target] : []),
    '-sf',
    file,
    '-i',
    '127.0.0.1',
    '-p',
    String(o.port),
    '-mp',
    String(31800 + (o.port % 90) * 2),
    '-m',
    '1',
    '-nostdin',
    '-timeout',
    `${(o.waitS ?? 20) + 5}s`,
    '-timeout_error',
    '-recv_timeout',
    String((o.waitS ?? 20) * 1000),
    '-trace_err',
    '-error_file',
    errFile,
    ...(o.tcp ? ['-t', 't1'] : []),
    ...(o.service ? ['-s', o.service] : []),
  ];
  const child = spawn('sipp', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<{ code: number | null; errors: string }>((resolve) =>
    child.on('exit', (code) => {
      let errors = stderr;
      try {
        errors += readFileSync(errFile, 'utf8');
      } catch {
        // no error file: no errors
      }
      rmSync(dir, { recursive: true, force: true });
      resolve({ code, errors });
    }),
  );
  return { done, kill: () => child.kill('SIGKILL') };
}

/** Waits until SIPp listens: its TCP port accepts, or its UDP port is bound (binding it ourselves fails). */
async function listening(port: number, tcp = false): Promise<void> {
  await eventually(
    () =>
      new Promise<boolean>((resolve) => {
        if (tcp) {
          const c = connect({ host: '127.0.0.1', port });
          c.once('connect', () => (c.destroy(), resolve(true)));
          c.once('error', () => resolve(false));
          return;
        }
        const s = createSocket('udp4');
        s.once('error', () => resolve(true));
        s.bind(port, '127.0.0.1', () => s.close(() => resolve(false)));
      }),
    10_000,
  );
}

function prepared(number = '+15551234567'): PreparedFax {
  return {
    jobId: `job-${Math.random().toString(36).slice(2)}`,
    attempt: 1,
    faxNumber: number,
    callerId: '+15550001111',
    stationId: 'FAXLINE TEST',
    quality: 'standard',
    pageBytes: [1000, 1000],
    tiff: Buffer.from('II*\0 not really a TIFF: the media double never reads it'),
  };
}

function control(
  signal = new AbortController().signal,
  callMs = 60_000,
): { ctl: CallControl; progress: Progress[] } {
  const progress: Progress[] = [];
  return {
    progress,
    ctl: {
      signal,
      deadline: new Date(Date.now() + callMs),
      onProgress: (p) => {
        progress.push(p);
      },
    },
  };
}

const lines: SipLine[] = [];
/** Whether a UDP socket can bind 127.0.0.1:`port` now (a closed user agent's port can). */
async function udpPortFree(port: number): Promise<boolean> {
  const probe = createSocket('udp4');
  const free = await new Promise<boolean>((resolve) => {
    probe.once('error', () => resolve(false));
    probe.bind(port, '127.0.0.1', () => resolve(true));
  });
  await new Promise<void>((r) => probe.close(() => r())).catch(() => undefined);
  return free;
}

async function line(
  trunkPort: number,
  o: Omit<Partial<SipLineOptions>, 'media'> & { media: MediaDouble },
  transport: 'udp' | 'tcp' = 'udp',
): Promise<SipLine> {
  const l = new SipLine({
    trunk: `sip:127.0.0.1:${trunkPort};transport=${transport}`,
    listen: { host: '127.0.0.1', port: await sipPort() },
    publicAddress: '127.0.0.1',
    t38: 'accept',
    rtpPorts: await rtpRange(),
    ringTimeoutMs: 15_000,
    ...o,
  });
  lines.push(l);
  return l;
}
after(async () => {
  await Promise.all(lines.map((l) => l.close()));
});

/** One call through SipLine.transmit() to SIPp running `scenario`. */
async function callSipp(
  scenario: string,
  o: {
    media?: MediaDouble;
    subst?: Record<string, string>;
    line?: Omit<Partial<SipLineOptions>, 'media'>;
    tcp?: boolean;
    signal?: AbortSignal;
    waitSipp?: boolean;
  } = {},
): Promise<{
  outcome: Outcome;
  media: MediaDouble;
  sippCode: number | null;
  errors: string;
  progress: Progress[];
}> {
  const port = await sipPort();
  const run = sipp(scenario, {
    port,
    ...(o.subst ? { subst: o.subst } : {}),
    ...(o.tcp ? { tcp: true } : {}),
  });
  try {
    await Promise.race([
      listening(port, o.tcp),
      run.done.then((r) =>
        Promise.reject(new Error(`SIPp exited (${r.code}) before listening: ${r.errors}`)),
      ),
    ]);
    const media = o.media ?? new MediaDouble();
    const l = await line(port, { ...o.line, media }, o.tcp ? 'tcp' : 'udp');
    const { ctl, progress } = control(o.signal);
    const outcome = await l.transmit(prepared(), ctl);
    if (o.waitSipp === false) run.kill();
    const r = await run.done;
    return { outcome, media, sippCode: r.code, errors: r.errors, progress };
  } finally {
    run.kill();
  }
}

function failure(o: Outcome) {
  assert.equal(o.ok, false, `expected a failure, got ${JSON.stringify(o)}`);
  return o as Extract<Outcome, { ok: false }>;
}

describe('SIP line against SIPp as the trunk', needsSipp, () => {
  for (const [status, reason, type, retryable] of [
    ['486', 'Busy Here', 'busy', true],
    ['480', 'Temporarily Unavailable', 'no_answer', true],
    ['404', 'Not Found', 'invalid_number', false],
    ['503', 'Service Unavailable', 'backend_error', true],
  ] as const) {
    it(`${status} ${reason}: ${type}, ${retryable ? 'retried' : 'never retried'}; the media never starts`, async () => {
      const r = await callSipp('uas-reject.xml', { subst: { STATUS: status, REASON: reason } });
      const f = failure(r.outcome);
      assert.equal(f.type, type);
      assert.equal(f.retryable, retryable);
      assert.equal(f.code, `SIP_${status}`);
      assert.equal(f.engine?.sip_status, Number(status));
      assert.match(String(f.engine?.sip_call_id), /@faxline$/);
      assert.equal(r.sippCode, 0, `SIPp saw the scenario fail (our ACK?): ${r.errors}`);
      assert.equal(r.media.sessions.length, 1);
      assert.equal(r.media.sessions[0]?.started, undefined, 'no media engine start without an answer');
      assert.equal(r.media.sessions[0]?.closed, true, 'the media port is released');
      assert.deepEqual(r.progress, [{ type: 'dialling' }]);
    });
  }

  it('486 over TCP (messages framed by Content-Length on the stream)', async () => {
    const r = await callSipp('uas-reject.xml', { subst: { STATUS: '486', REASON: 'Busy Here' }, tcp: true });
    assert.equal(failure(r.outcome).type, 'busy');
    assert.equal(r.sippCode, 0, r.errors);
  });

  it('rings without answer: our CANCEL at the ring timeout, 487, no_answer', async () => {
    const started = Date.now();
    const r = await callSipp('uas-ring-cancel.xml', { line: { ringTimeoutMs: 1500 } });
    const f = failure(r.outcome);
    assert.equal(f.type, 'no_answer');
    assert.equal(f.code, 'RING_TIMEOUT');
    assert.equal(f.retryable, true);
    assert.equal(f.engine?.sip_status, 487);
    assert.ok(Date.now() - started >= 1500);
    assert.equal(r.sippCode, 0, `SIPp did not see CANCEL and the ACK of 487: ${r.errors}`);
    assert.equal(r.media.sessions[0]?.started, undefined);
  });

  it('an abort while ringing CANCELs too, and ends as aborted', async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 800);
    const r = await callSipp('uas-ring-cancel.xml', { signal: ac.signal });
    const f = failure(r.outcome);
    assert.equal(f.type, 'aborted');
    assert.equal(r.sippCode, 0, r.errors);
  });

  for (const [scenario, what] of [
    ['uas-auth.xml', '407 challenge: the INVITE is sent again with Proxy-Authorization and CSeq + 1'],
    ['uas-auth-401.xml', '401 challenge: SIPp checks our digest itself'],
  ] as const)
    it(`${what}; answered, and our BYE ends the call`, async () => {
      const port = await sipPort();
      const run = sipp(scenario, { port });
      try {
        await listening(port);
        const ua = await UserAgent.start({
          host: '127.0.0.1',
          port: await sipPort(),
          publicAddress: '127.0.0.1',
          credentials: { username: 'faxuser', password: 's3cret' },
        });
        try {
          const r = await ua.invite({
            requestUri: `sip:+15551234567@127.0.0.1:${port}`,
            fromUser: '+15550001111',
            sdp: audioOffer({ address: '127.0.0.1', port: 31998, sessionId: 1, version: 1 }),
          });
          assert.ok(r.ok, JSON.stringify(r));
          assert.equal(r.status, 200);
          assert.equal(readSdp(r.answer).audio?.payloadTypes[0], 0);
          await r.dialog.bye();
          assert.equal(r.dialog.active, false);
        } finally {
          await ua.close();
        }
        const s = await run.done;
        assert.equal(s.code, 0, `SIPp refused our digest or missed the BYE: ${s.errors}`);
      } finally {
        run.kill();
      }
    });

  it('a wrong password gets 403 from SIPp: backend_error, retryable', async () => {
    const r = await callSipp('uas-auth-401.xml', {
      line: { username: 'faxuser', password: 'wrong' },
      waitSipp: false,
    });
    const f = failure(r.outcome);
    assert.equal(f.type, 'backend_error');
    assert.equal(f.code, 'SIP_403');
  });

  it('answered, then the far end hangs up before the fax: call_dropped; media started on PCMU', async () => {
    const r = await callSipp('uas-answer-bye.xml');
    const f = failure(r.outcome);
    assert.equal(f.type, 'call_dropped');
    assert.equal(f.code, 'SIP_BYE');
    assert.equal(f.retryable, true);
    assert.equal(f.engine?.sip_status, 200);
    assert.equal(f.engine?.transport, 'audio');
    const s = r.media.sessions[0];
    assert.equal(s?.started?.role, 'send');
    assert.equal(s?.started?.transport, 'audio');
    assert.equal(s?.started?.payloadType, 0);
    assert.equal(s?.started?.ident, 'FAXLINE TEST', 'TSI is the station id');
    assert.equal(s?.started?.remote.address, '127.0.0.1');
    assert.equal(s?.stopped, true);
    assert.equal(r.sippCode, 0, `SIPp did not get the 200 to its BYE: ${r.errors}`);
  });

  it('the far end hangs up just as our engine finishes (a receiver BYEs on our DCN): the fax counts as sent', async () => {
    const r = await callSipp('uas-answer-bye.xml', { media: new MediaDouble({ endsOkAfterMs: 900 }) });
    assert.equal(r.outcome.ok, true, JSON.stringify(r.outcome));
    assert.equal(r.media.sessions[0]?.stopped, false, 'the engine was left to finish');
    assert.equal(r.sippCode, 0, r.errors);
  });

  it('SIP_T38=prefer: our re-INVITE to T.38 refused with 488 keeps the call on audio', async () => {
    const r = await callSipp('uas-reinvite-488.xml', { line: { t38: 'prefer' } });
    assert.equal(r.sippCode, 0, `SIPp did not see a T.38 re-INVITE and its ACK: ${r.errors}`);
    const f = failure(r.outcome);
    assert.equal(f.type, 'call_dropped');
    assert.equal(f.engine?.transport, 'audio');
    assert.equal(r.media.sessions[0]?.switchedToT38, undefined);
  });

  it('the far end re-INVITEs to image/t38: we answer 200 with m=image and the media switches', async () => {
    const r = await callSipp('uas-t38-reinvite.xml');
    assert.equal(r.sippCode, 0, `SIPp did not get m=image in our 200: ${r.errors}`);
    const sw = r.media.sessions[0]?.switchedToT38;
    assert.equal(sw?.t38.maxBitRate, 9600);
    assert.equal(sw?.t38.maxDatagram, 176);
    assert.equal(sw?.t38.errorCorrection, 'redundancy');
    assert.equal(failure(r.outcome).engine?.transport, 't38');
  });
});

// SIPp cannot "lose" our first INVITE: it takes the retransmission (byte for byte the same) for a
// copy of what it already handled. A plain UDP socket plays the trunk for Timer A instead.
describe('SIP line: numbers that are not E.164 never reach the wire', () => {
  it('a fax number or caller id carrying anything but E.164 fails before a datagram is sent', async () => {
    const trunk = createSocket('udp4');
    const got: Buffer[] = [];
    trunk.on('message', (m) => got.push(m));
    await new Promise<void>((r) => trunk.bind(0, '127.0.0.1', () => r()));
    try {
      const l = await line((trunk.address() as { port: number }).port, { media: new MediaDouble() });
      const injected = await l.transmit(
        prepared('+15551234567\r\nContact: <sip:evil@203.0.113.9>'),
        control().ctl,
      );
      const f = failure(injected);
      assert.equal(f.type, 'invalid_number');
      assert.equal(f.code, 'NOT_E164');
      assert.equal(f.retryable, false);
      const badCaller = await l.transmit({ ...prepared(), callerId: '+1555;tag=x' }, control().ctl);
      assert.equal(failure(badCaller).code, 'CALLER_ID_NOT_E164');
      // A sign that the line got past those two: a good fax after them reaches the trunk; until
      // it does, the trunk got nothing, and what it gets is the good fax's INVITE alone.
      assert.equal(got.length, 0, 'nothing was sent to the trunk');
      const ac = new AbortController();
      const good = l.transmit(prepared('+15557654321'), control(ac.signal).ctl);
      await eventually(async () => got.length > 0, 30_000);
      ac.abort();
      await good;
      const wire = got.map((b) => b.toString('latin1')).join('\n');
      assert.match(wire, /^INVITE sip:\+15557654321@/m, "the good fax's INVITE reached the trunk");
      assert.doesNotMatch(wire, /evil|203\.0\.113\.9|tag=x|\+15551234567/, 'nothing of the refused two');
    } finally {
      trunk.close();
    }
  });
});

describe('SIP line retransmission over UDP (a socket as the trunk)', () => {
  it('the first INVITE is lost: Timer A sends it again after T1, then 2·T1; the answer gets its ACK', async () => {
    const trunk = createSocket('udp4');
    const trunkPort = await sipPort();
    await new Promise<void>((r) => trunk.bind(trunkPort, '127.0.0.1', () => r()));
    const seen: { at: number; text: string }[] = [];
    trunk.on('message', (buf, from) => {
      const text = buf.toString('latin1');
      seen.push({ at: Date.now(), text });
      const invites = seen.filter((m) => m.text.startsWith('INVITE '));
      if (text.startsWith('INVITE ') && invites.length === 3) {
        const m = parseMessage(buf);
        const res = serialize({
          kind: 'response',
          status: 486,
          reason: 'Busy Here',
          headers: [
            ...m.headers.filter((h) => ['Via', 'From', 'Call-ID', 'CSeq'].includes(h.name)),
            { name: 'To', value: `${header(m, 'To')};tag=t1` },
          ],
          body: Buffer.alloc(0),
        });
        trunk.send(res, from.port, from.address);
        trunk.send(res, from.port, from.address); // a retransmitted final response: ACKed again
      }
    });
    try {
      const media = new MediaDouble();
      const l = await line(trunk.address().port, { media });
      const { ctl } = control();
      const outcome = await l.transmit(prepared(), ctl);
      assert.equal(failure(outcome).type, 'busy');
      await eventually(async () => seen.filter((m) => m.text.startsWith('ACK ')).length === 2, 3000);
      const inv = seen.filter((m) => m.text.startsWith('INVITE '));
      assert.equal(inv.length, 3);
      assert.equal(new Set(inv.map((m) => m.text)).size, 1, 'retransmissions are the same bytes');
      const gap1 = (inv[1]?.at ?? 0) - (inv[0]?.at ?? 0);
      const gap2 = (inv[2]?.at ?? 0) - (inv[1]?.at ?? 0);
      assert.ok(gap1 >= 450 && gap1 < 900, `first retransmission after ${gap1} ms (T1 = 500)`);
      assert.ok(gap2 >= 950 && gap2 < 1500, `second after ${gap2} ms more (2·T1)`);
      const ack = parseMessage(
        Buffer.from(seen.find((m) => m.text.startsWith('ACK '))?.text ?? '', 'latin1'),
      );
      assert.equal(header(ack, 'CSeq')?.split(' ')[1], 'ACK');
      assert.match(header(ack, 'To') ?? '', /;tag=t1$/);
      assert.equal(
        parseVia(headerValues(ack, 'Via')[0] ?? '').params.get('branch'),
        parseVia(
          headerValues(parseMessage(Buffer.from(inv[0]?.text ?? '', 'latin1')), 'Via')[0] ?? '',
        ).params.get('branch'),
        'the ACK of a non-2xx is in the INVITE transaction',
      );
    } finally {
      trunk.close();
    }
  });
});

describe('SIP line: a far end that dies after the fax (a socket as the trunk)', () => {
  it('the outcome is reported as soon as T.30 ends; the unanswered BYE goes on, and close() ends it', async () => {
    // The far end answers, takes the ACK, then is gone: our BYE is never answered. Before, the
    // outcome waited for the BYE transaction's Timer F (64·T1 = 32 s).
    const trunk = createSocket('udp4');
    const trunkPort = await sipPort();
    await new Promise<void>((r) => trunk.bind(trunkPort, '127.0.0.1', () => r()));
    const byes: { at: number; text: string }[] = [];
    let acks = 0;
    trunk.on('message', (buf, from) => {
      const m = parseMessage(buf);
      if (m.kind !== 'request') return;
      if (m.method === 'ACK') acks++;
      if (m.method === 'BYE') byes.push({ at: Date.now(), text: buf.toString('latin1') });
      if (m.method !== 'INVITE') return;
      const port = trunk.address().port;
      const sdp = [
        'v=0',
        'o=far 1 1 IN IP4 127.0.0.1',
        's=-',
        'c=IN IP4 127.0.0.1',
        't=0 0',
        `m=audio ${port + 1} RTP/AVP 0`,
        'a=rtpmap:0 PCMU/8000',
        '',
      ].join(CRLF);
      const ok = serialize({
        kind: 'response',
        status: 200,
        reason: 'OK',
        headers: [
          ...m.headers.filter((h) => ['Via', 'From', 'Call-ID', 'CSeq'].includes(h.name)),
          { name: 'To', value: `${header(m, 'To')};tag=far1` },
          { name: 'Contact', value: `<sip:far@127.0.0.1:${port}>` },
          { name: 'Content-Type', value: 'application/sdp' },
        ],
        body: Buffer.from(sdp, 'latin1'),
      });
      trunk.send(ok, from.port, from.address);
    });
    try {
      // The engine ends the fax well (its DCN sent) 300 ms after it started.
      const media = new MediaDouble({ connects: true, endsOkAfterMs: 300 });
      const l = await line(trunk.address().port, { media, mediaTimeoutMs: 10_000 });
      const { ctl, progress } = control();
      const t0 = Date.now();
      const outcome = await l.transmit(prepared(), ctl);
      const reportedAt = Date.now();
      assert.equal(outcome.ok, true, JSON.stringify(outcome));
      assert.deepEqual(
        progress.map((p) => p.type),
        ['dialling', 'connected'],
      );
      assert.equal(acks, 1, 'the 200 was ACKed');
      assert.ok(reportedAt - t0 < 3000, `the outcome came ${reportedAt - t0} ms after dialling`);
      assert.equal(media.sessions[0]?.closed, true, 'the media port is released with the outcome');
      // The BYE is still retransmitted after the report (Timer E: T1, then 2·T1, ...).
      await eventually(async () => byes.length >= 3, 4000);
      assert.ok(byes[0]!.at - reportedAt < 200, 'the BYE went out with the report, not after it');
      assert.ok(byes[2]!.at > reportedAt + 1000, 'retransmissions went on after the report');
      assert.equal(new Set(byes.map((b) => b.text)).size, 1, 'retransmissions are the same bytes');
      // close() waits for it at most 4·T1, then ends the transaction: no timer is left behind.
      const c0 = Date.now();
      await l.close();
      const closing = Date.now() - c0;
      assert.ok(closing >= 1800 && closing < 3500, `close() took ${closing} ms (4·T1 = 2 s)`);
      // Nothing can be sent after close(): the user agent's socket is closed (its port is free to
      // bind again), and a UDP message leaves only through that socket (the transport refuses to
      // send once closed). A timer left behind would keep this process alive, which bounds.ts fails.
      const after = byes.length;
      assert.ok(await udpPortFree(l.options.listen.port), 'the line’s SIP socket is closed after close()');
      assert.equal(byes.length, after, 'no BYE is sent after close()');
    } finally {
      trunk.close();
    }
  });
});

/** A UDP socket on loopback playing the other SIP party by hand; it keeps what it receives. */
async function sipSocket(): Promise<{
  port: number;
  got: { at: number; m: ReturnType<typeof parseMessage> }[];
  send: (lines: string[], body?: string, to?: number) => void;
  reply: (req: ReturnType<typeof parseMessage>, status: number, reason: string, extra?: string[]) => void;
  close: () => void;
}> {
  const sock = createSocket('udp4');
  const sockPort = await sipPort();
  await new Promise<void>((r) => sock.bind(sockPort, '127.0.0.1', () => r()));
  const got: { at: number; m: ReturnType<typeof parseMessage> }[] = [];
  let peer = 0;
  sock.on('message', (buf, from) => {
    peer = from.port;
    got.push({ at: Date.now(), m: parseMessage(buf) });
  });
  const send = (lines: string[], body = '', to = peer) => {
    const all = [
      ...lines,
      ...(body ? ['Content-Type: application/sdp'] : []),
      `Content-Length: ${body.length}`,
    ];
    sock.send(msg(all, body), to, '127.0.0.1');
  };
  return {
    port: sock.address().port,
    got,
    send,
    reply: (req, status, reason, extra = []) =>
      send([
        `SIP/2.0 ${status} ${reason}`,
        ...req.headers
          .filter((h) => ['Via', 'From', 'To', 'Call-ID', 'CSeq'].includes(h.name))
          .map((h) => `${h.name}: ${h.value}`),
        ...extra,
      ]),
    close: () => sock.close(),
  };
}

/** The requests, and the final responses, one party got. */
const requests = (got: { m: ReturnType<typeof parseMessage> }[], method: string) =>
  got.flatMap((g) => (g.m.kind === 'request' && g.m.method === method ? [g.m] : []));
const responses = (got: { m: ReturnType<typeof parseMessage> }[], method: string) =>
  got.flatMap((g) =>
    g.m.kind === 'response' && g.m.status >= 200 && header(g.m, 'CSeq')?.endsWith(` ${method}`) ? [g.m] : [],
  );

describe('a re-INVITE and the 200 it could overtake (the SIP kill flake, issue 18)', () => {
  it('answering with SIP_T38=prefer: our re-INVITE to T.38 waits for the ACK of our 200', async () => {
    // The caller has not ACKed yet: a re-INVITE now could reach it before our 200 (UDP, or a proxy
    // with several workers, keeps no order), and it would refuse the unknown dialog with 481.
    const l = await line(5060, { media: new MediaDouble(), t38: 'prefer', mediaTimeoutMs: 10_000 });
    await l.answer({
      decide: () => ({ file: join(tmpdir(), 'faxline-never-written.tif'), ident: 'RX' }),
      onResult: () => {},
    });
    const { ua } = await l.start();
    const caller = await sipSocket();
    try {
      const cp = caller.port;
      const dialog = [
        'From: <sip:+15550001111@127.0.0.1>;tag=caller1',
        'Call-ID: overtake-uas@test',
        `Contact: <sip:caller@127.0.0.1:${cp}>`,
        'Max-Forwards: 70',
      ];
      const sdp = audioOffer({ address: '127.0.0.1', port: 31994, sessionId: 1, version: 1 });
      caller.send(
        [
          `INVITE sip:+15559990000@127.0.0.1:${ua.port} SIP/2.0`,
          `Via: SIP/2.0/UDP 127.0.0.1:${cp};branch=z9hG4bKuas1`,
          'To: <sip:+15559990000@127.0.0.1>',
          'CSeq: 1 INVITE',
          ...dialog,
        ],
        sdp,
        ua.port,
      );
      // Our 200 goes out and is retransmitted (T1, 2·T1) while no ACK comes; no re-INVITE meanwhile.
      await eventually(
        async () =>
          responses(caller.got, 'INVITE').filter((r) => r.kind === 'response' && r.status === 200).length >=
          3,
        4000,
      );
      assert.equal(requests(caller.got, 'INVITE').length, 0, 'no re-INVITE before the ACK');
      const ok = responses(caller.got, 'INVITE')[0]!;
      caller.send(
        [
          `ACK sip:faxline@127.0.0.1:${ua.port} SIP/2.0`,
          `Via: SIP/2.0/UDP 127.0.0.1:${cp};branch=z9hG4bKuas1ack`,
          `To: ${header(ok, 'To')}`,
          'CSeq: 1 ACK',
          ...dialog,
        ],
        '',
        ua.port,
      );
      const acked = Date.now();
      await eventually(async () => requests(caller.got, 'INVITE').length >= 1, 3000);
      const reinvite = caller.got.find((g) => g.m.kind === 'request' && g.m.method === 'INVITE')!;
      assert.ok(reinvite.at - acked < 1000, `the re-INVITE came ${reinvite.at - acked} ms after the ACK`);
      assert.match(reinvite.m.body.toString('utf8'), /m=image \d+ udptl t38/);
      caller.reply(reinvite.m, 488, 'Not Acceptable Here');
    } finally {
      caller.close();
    }
  });

  it('calling: a re-INVITE that overtakes the 200 of our INVITE gets 491 (try again), not 481', async () => {
    const trunk = await sipSocket();
    const media = new MediaDouble({ connects: true, endsOkAfterMs: 300 });
    const l = await line(trunk.port, { media, mediaTimeoutMs: 10_000 });
    const tp = trunk.port;
    try {
      const call = l.transmit(prepared(), control().ctl);
      await eventually(async () => requests(trunk.got, 'INVITE').length >= 1, 3000);
      const inv = requests(trunk.got, 'INVITE')[0]!;
      const farTo = `${header(inv, 'To')};tag=far2`;
      const contact = `Contact: <sip:far@127.0.0.1:${tp}>`;
      // The far end's re-INVITE (to T.38) arrives first...
      trunk.send(
        [
          `INVITE ${parseNameAddr(header(inv, 'Contact') ?? '').uri} SIP/2.0`,
          `Via: SIP/2.0/UDP 127.0.0.1:${tp};branch=z9hG4bKover1`,
          `From: ${farTo}`,
          `To: ${header(inv, 'From')}`,
          `Call-ID: ${header(inv, 'Call-ID')}`,
          'CSeq: 1 INVITE',
          contact,
          'Max-Forwards: 70',
        ],
        t38Offer({ address: '127.0.0.1', port: 31992, sessionId: 2, version: 2 }),
      );
      await eventually(async () => responses(trunk.got, 'INVITE').length >= 1, 3000);
      const answer = responses(trunk.got, 'INVITE')[0]!;
      assert.equal(
        answer.kind === 'response' ? answer.status : 0,
        491,
        'the overtaking re-INVITE: try again',
      );
      // ...then the 200 it overtook: the call goes on, and the fax with it.
      trunk.send(
        [
          'SIP/2.0 200 OK',
          ...inv.headers
            .filter((h) => ['Via', 'From', 'Call-ID', 'CSeq'].includes(h.name))
            .map((h) => `${h.name}: ${h.value}`),
          `To: ${farTo}`,
          contact,
        ],
        audioOffer({ address: '127.0.0.1', port: 31990, sessionId: 3, version: 1 }),
      );
      await eventually(async () => requests(trunk.got, 'BYE').length >= 1, 5000);
      trunk.reply(requests(trunk.got, 'BYE')[0]!, 200, 'OK');
      const outcome = await call;
      assert.equal(outcome.ok, true, JSON.stringify(outcome));
      assert.equal(
        requests(trunk.got, 'ACK').filter((a) => header(a, 'CSeq') !== '1 ACK').length,
        1,
        'the 200 was ACKed',
      );
    } finally {
      trunk.close();
    }
  });
});

describe('SIP line answering, SIPp as the caller', needsSipp, () => {
  it('accepts the INVITE with G.711, receives on the media engine, reports the hang-up', async () => {
    const media = new MediaDouble();
    const l = await line(5060, { media });
    const results: ReceivedFax[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'faxline-rx-'));
    await l.answer({
      decide: (c) =>
        c.to.includes('+15559990000')
          ? { file: join(dir, 'rx.tif'), ident: '+15559990000' }
          : { reject: 404 },
      onResult: (r) => results.push(r),
    });
    const { ua } = await l.start();
    const run = sipp('uac-call.xml', {
      port: await sipPort(),
      target: `127.0.0.1:${ua.port}`,
      service: '+15559990000',
    });
    try {
      const s = await run.done;
      assert.equal(s.code, 0, `SIPp: ${s.errors}`);
      await eventually(async () => results.length === 1, 5000);
      const got = results[0];
      assert.equal(got?.remoteBye, true);
      assert.equal(got?.ok, false);
      assert.match(got?.from ?? '', /\+15550001111/);
      const started = media.sessions[0]?.started;
      assert.equal(started?.role, 'receive');
      assert.equal(started?.payloadType, 8, 'PCMA, the first the caller offered');
      assert.equal(started?.ident, '+15559990000');
      assert.equal(media.sessions[0]?.closed, true);
    } finally {
      run.kill();
    }
  });
});

describe('SIP media inactivity: a far end that died without BYE (issue 18)', needsSipp, () => {
  it('answering: the caller sends no media and never hangs up; we BYE after SIP_MEDIA_TIMEOUT_S', async () => {
    const media = new MediaDouble();
    const l = await line(5060, { media, mediaTimeoutMs: 1500 });
    const results: ReceivedFax[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'faxline-rx-'));
    try {
      await l.answer({
        decide: () => ({ file: join(dir, 'rx.tif'), ident: '+15559990000' }),
        onResult: (r) => results.push(r),
      });
      const { ua } = await l.start();
      const run = sipp('uac-call-silent.xml', {
        port: await sipPort(),
        target: `127.0.0.1:${ua.port}`,
        service: '+15559990000',
        waitS: 10,
      });
      try {
        const started = Date.now();
        await eventually(async () => results.length === 1, 8000);
        const took = Date.now() - started;
        const got = results[0]!;
        assert.equal(got.ok, false);
        assert.equal(got.localEnd, 'media_timeout');
        assert.equal(got.reason, 'no media from the far end for 1.5 s');
        assert.equal(got.remoteBye, false);
        assert.ok(took >= 1400 && took < 6000, `ended after ${took} ms`);
        assert.equal(media.sessions[0]?.stopped, true, 'the media engine was stopped');
        const s = await run.done;
        assert.equal(s.code, 0, `SIPp did not get our BYE: ${s.errors}`);
        assert.equal(media.sessions[0]?.closed, true, 'the media port is released');
      } finally {
        run.kill();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('answering: a call over INBOUND_MAX_CALL_SECONDS is ended by us before any media timeout', async () => {
    const media = new MediaDouble();
    const l = await line(5060, { media, mediaTimeoutMs: 10_000, maxReceiveMs: 1200 });
    const results: ReceivedFax[] = [];
    await l.answer({
      decide: () => ({ file: join(tmpdir(), 'faxline-never-written.tif'), ident: 'RX' }),
      onResult: (r) => results.push(r),
    });
    const { ua } = await l.start();
    const run = sipp('uac-call-silent.xml', {
      port: await sipPort(),
      target: `127.0.0.1:${ua.port}`,
      service: '+15559990000',
      waitS: 10,
    });
    try {
      await eventually(async () => results.length === 1, 8000);
      assert.equal(results[0]?.localEnd, 'max_duration');
      assert.equal(results[0]?.reason, 'the call reached its time limit of 1.2 s');
      assert.equal(media.sessions[0]?.started?.maxMs, 1200, 'the engine gets the limit too');
      assert.equal((await run.done).code, 0, 'SIPp got our BYE');
    } finally {
      run.kill();
    }
  });

  it('sending: media keeps the call up; 1.5 s after it stops, call_dropped MEDIA_TIMEOUT, retried', async () => {
    const media = new MediaDouble({ connects: true });
    // The far end's "media": a datagram every 100 ms to our media port for 3 s, then nothing.
    const peer = createSocket('udp4');
    let sent = 0;
    const feeder = setInterval(() => {
      const s = media.sessions[0];
      if (!s?.started || sent >= 30) return;
      sent++;
      peer.send(Buffer.alloc(172), s.port, '127.0.0.1');
    }, 100);
    try {
      const t0 = Date.now();
      const r = await callSipp('uas-answer-silent.xml', { media, line: { mediaTimeoutMs: 1500 } });
      const took = Date.now() - t0;
      const f = failure(r.outcome);
      assert.equal(f.type, 'call_dropped');
      assert.equal(f.code, 'MEDIA_TIMEOUT');
      assert.equal(f.message, 'no media from the far end for 1.5 s');
      assert.equal(f.retryable, true);
      assert.equal(sent, 30, 'all the media was sent before the call ended');
      assert.ok(took >= 4400 && took < 10_000, `the call lasted ${took} ms: 3 s of media, then 1.5 s`);
      assert.equal(r.sippCode, 0, `SIPp did not get our BYE: ${r.errors}`);
      assert.deepEqual(
        r.progress.map((p) => p.type),
        ['dialling', 'connected'],
      );
    } finally {
      clearInterval(feeder);
      peer.close();
    }
  });
});

describe('SIP media inactivity before T.30 trained', needsSipp, () => {
  it('answered, silent from the start (a voice line without fax tones): no_fax_tone, code MEDIA_TIMEOUT', async () => {
    const r = await callSipp('uas-answer-silent.xml', { line: { mediaTimeoutMs: 1000 } });
    const f = failure(r.outcome);
    assert.equal(f.type, 'no_fax_tone');
    assert.equal(f.code, 'MEDIA_TIMEOUT');
    assert.equal(f.retryable, true);
    assert.equal(r.sippCode, 0, `SIPp did not get our BYE: ${r.errors}`);
  });
});

describe('SIP media inactivity on T.38', needsSipp, () => {
  it('sending a page over T.38 to a silent receiver is not cut; 1.5 s after our UDPTL stops, MEDIA_TIMEOUT', async () => {
    const media = new MediaDouble({ sendsUdptlForMs: 3000, connects: true });
    const t0 = Date.now();
    const r = await callSipp('uas-t38-reinvite-silent.xml', { media, line: { mediaTimeoutMs: 1500 } });
    const took = Date.now() - t0;
    const f = failure(r.outcome);
    assert.equal(f.code, 'MEDIA_TIMEOUT');
    assert.equal(f.engine?.transport, 't38');
    assert.ok(took >= 4400 && took < 10_000, `the call lasted ${took} ms: 3 s of our page, then 1.5 s`);
    assert.equal(r.sippCode, 0, `SIPp did not get our BYE: ${r.errors}`);
  });
});

describe('temporary directories of dead SIP workers', () => {
  it('removes faxline-sip-<pid>-* only where that pid no longer runs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'faxline-stale-'));
    try {
      const child = spawnSync(process.execPath, ['-e', 'console.log(process.pid)'], { encoding: 'utf8' });
      const dead = Number(child.stdout.trim());
      assert.ok(dead > 0);
      const names = [
        `faxline-sip-${dead}-AbC123`, // its process is gone: removed
        `faxline-sip-${process.pid}-XyZ789`, // ours: kept
        `faxline-sip-1-KeEp00`, // pid 1 runs: kept
        'faxline-sip-Qw3rty', // no pid in the name (older releases): kept
        'faxline-sipkill-abc', // another program's: kept
      ];
      for (const n of names) {
        mkdirSync(join(dir, n));
        writeFileSync(join(dir, n, 'tx.tif'), 'x');
      }
      assert.deepEqual(await removeStaleTmp(dir), [names[0]]);
      assert.deepEqual(
        names.map((n) => existsSync(join(dir, n))),
        [false, true, true, true, true],
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('SIP registration, SIPp as the registrar', needsSipp, () => {
  it('REGISTER with digest auth, refreshed before the granted 6 s run out, then unregistered', async () => {
    const port = await sipPort();
    const run = sipp('uas-register.xml', { port });
    try {
      await listening(port);
      const ua = await UserAgent.start({
        host: '127.0.0.1',
        port: await sipPort(),
        publicAddress: '127.0.0.1',
        credentials: { username: 'faxuser', password: 's3cret' },
      });
      try {
        const states: [boolean, number, number][] = [];
        const t0 = Date.now();
        const reg = ua.register({
          registrar: `sip:127.0.0.1:${port}`,
          user: 'faxuser',
          expires: 60,
          onState: (ok, status) => states.push([ok, status, Date.now() - t0]),
        });
        await eventually(async () => states.length >= 2, 9000);
        assert.deepEqual(
          states.map(([ok, status]) => [ok, status]),
          [
            [true, 200],
            [true, 200],
          ],
        );
        const refreshAt = states[1]?.[2] ?? 0;
        assert.ok(
          refreshAt >= 4500 && refreshAt < 6000,
          `refreshed after ${refreshAt} ms of the 6 s granted`,
        );
        await reg.stop();
      } finally {
        await ua.close();
      }
      const s = await run.done;
      assert.equal(s.code, 0, `SIPp: ${s.errors}`);
    } finally {
      run.kill();
    }
  });
});

describe('SIP registration with a trunk that dies', () => {
  it('stop() does not wait for the un-REGISTER a dead trunk never answers; close() ends it', async () => {
    // A registrar that answers REGISTERs with expiry and then "dies": it never answers Expires: 0.
    const registrar = createSocket('udp4');
    const seen: string[] = [];
    registrar.on('message', (buf, rinfo) => {
      const req = parseMessage(buf);
      if (req.kind !== 'request' || req.method !== 'REGISTER') return;
      const expires = header(req, 'Expires') ?? '';
      seen.push(expires);
      if (expires === '0') return;
      const res = makeResponse(req, 200, {
        toTag: 'reg1',
        headers: [{ name: 'Expires', value: expires }],
      });
      registrar.send(serialize(res), rinfo.port, rinfo.address);
    });
    await new Promise<void>((r) => registrar.bind(0, '127.0.0.1', () => r()));
    const port = registrar.address().port;
    const uaPort = await sipPort();
    const ua = await UserAgent.start({
      host: '127.0.0.1',
      port: uaPort,
      publicAddress: '127.0.0.1',
    });
    try {
      const states: boolean[] = [];
      const reg = ua.register({
        registrar: `sip:127.0.0.1:${port}`,
        user: 'faxuser',
        expires: 60,
        onState: (ok) => states.push(ok),
      });
      await eventually(async () => states.length >= 1, 5000);
      assert.deepEqual(states, [true]);
      const t0 = Date.now();
      await reg.stop();
      const stopMs = Date.now() - t0;
      // 4·T1 (2 s), not Timer F (32 s); the un-REGISTER was sent (and retransmitted meanwhile).
      assert.ok(stopMs >= 1500 && stopMs < 4000, `stop() took ${stopMs} ms`);
      assert.ok(seen.filter((e) => e === '0').length >= 2, JSON.stringify(seen));
      const t1 = Date.now();
      await ua.close();
      assert.ok(Date.now() - t1 < 4000, `close() took ${Date.now() - t1} ms`);
      // Nothing can be retransmitted after close(): its socket is closed (the port binds again),
      // and the transport sends through no other (a timer left behind: bounds.ts fails the file).
      const after = seen.length;
      assert.ok(await udpPortFree(uaPort), 'the user agent’s SIP socket is closed after close()');
      assert.equal(seen.length, after, 'nothing retransmitted after close()');
    } finally {
      await ua.close();
      registrar.close();
    }
  });
});

describe('BACKEND=sip wiring', () => {
  it('builds the SIP line from the configuration, and refuses to start without the media engine', async () => {
    const cfg = loadConfig({
      BACKEND: 'sip',
      SIP_TRUNK: 'sip:pbx.example.net:5070;transport=tcp',
      SIP_USERNAME: 'fax',
      SIP_PASSWORD: 'pw',
      SIP_LISTEN: '127.0.0.1:0',
      SIP_T38: 'prefer',
      RTP_PORTS: '31000-31009',
      SIP_RING_TIMEOUT_S: '30',
    });
    const backend = createBackend(cfg);
    assert.ok(backend instanceof SipLine);
    const o = backend.options;
    assert.equal(o.trunk, 'sip:pbx.example.net:5070;transport=tcp');
    assert.deepEqual(o.listen, { host: '127.0.0.1', port: 0 });
    assert.deepEqual(o.rtpPorts, { min: 31000, max: 31009 });
    assert.equal(o.ringTimeoutMs, 30_000);
    assert.equal(o.t38, 'prefer');
    assert.equal(o.username, 'fax');
    const noMedia = sipLineFrom(cfg, async () => null);
    await assert.rejects(noMedia.start(), /SIP fax media engine is not available/);
    assert.throws(() => loadConfig({ RTP_PORTS: '9-5' }), /RTP_PORTS: expected a port range/);
    assert.throws(
      () => loadConfig({ SIP_TRUNK: 'sip:x;transport=tls' }),
      /SIP_TRUNK: transport must be udp or tcp/,
    );
    assert.throws(() => loadConfig({ SIP_LISTEN: 'localhost' }), /SIP_LISTEN: expected address:port/);
  });
});

describe('SIP answering over UDP (a socket as the caller)', () => {
  it('our 200 is retransmitted (T1, 2·T1) until the ACK comes, then no more', async () => {
    const media = new MediaDouble();
    const l = await line(5060, { media });
    await l.answer({
      decide: () => ({ file: join(tmpdir(), 'never-written.tif'), ident: 'RX' }),
      onResult: () => {},
    });
    const { ua } = await l.start();
    const caller = createSocket('udp4');
    const callerPort = await sipPort();
    await new Promise<void>((r) => caller.bind(callerPort, '127.0.0.1', () => r()));
    const got: { at: number; m: ReturnType<typeof parseMessage> }[] = [];
    caller.on('message', (buf) => got.push({ at: Date.now(), m: parseMessage(buf) }));
    const me = caller.address().port;
    const sdp = audioOffer({ address: '127.0.0.1', port: 31996, sessionId: 1, version: 1 });
    const inv = serialize({
      kind: 'request',
      method: 'INVITE',
      uri: `sip:+15559990000@127.0.0.1:${ua.port}`,
      headers: [
        { name: 'Via', value: `SIP/2.0/UDP 127.0.0.1:${me};branch=z9hG4bKraw1;rport` },
        { name: 'From', value: `<sip:+15550001111@127.0.0.1>;tag=raw` },
        { name: 'To', value: `<sip:+15559990000@127.0.0.1>` },
        { name: 'Call-ID', value: 'raw-call-1' },
        { name: 'CSeq', value: '1 INVITE' },
        { name: 'Contact', value: `<sip:raw@127.0.0.1:${me}>` },
        { name: 'Content-Type', value: 'application/sdp' },
      ],
      body: Buffer.from(sdp),
    });
    try {
      caller.send(inv, ua.port, '127.0.0.1');
      await eventually(
        async () => got.filter((g) => g.m.kind === 'response' && g.m.status === 200).length >= 3,
        4000,
      );
      const oks = got.filter((g) => g.m.kind === 'response' && g.m.status === 200);
      assert.equal(got[0]?.m.kind === 'response' && got[0].m.status, 100, '100 Trying first');
      const gap1 = (oks[1]?.at ?? 0) - (oks[0]?.at ?? 0);
      const gap2 = (oks[2]?.at ?? 0) - (oks[1]?.at ?? 0);
      assert.ok(gap1 >= 450 && gap1 < 900, `first 2xx retransmission after ${gap1} ms`);
      assert.ok(gap2 >= 950 && gap2 < 1500, `second after ${gap2} ms`);
      const ok = oks[0]?.m;
      assert.ok(ok);
      assert.match(header(ok, 'Via') ?? '', /;rport=\d+/, 'rport filled in (RFC 3581)');
      const toTag = parseNameAddr(header(ok, 'To') ?? '').params.get('tag');
      const ack = serialize({
        kind: 'request',
        method: 'ACK',
        uri: parseNameAddr(header(ok, 'Contact') ?? '').uri,
        headers: [
          { name: 'Via', value: `SIP/2.0/UDP 127.0.0.1:${me};branch=z9hG4bKraw2` },
          { name: 'From', value: `<sip:+15550001111@127.0.0.1>;tag=raw` },
          { name: 'To', value: `<sip:+15559990000@127.0.0.1>;tag=${toTag}` },
          { name: 'Call-ID', value: 'raw-call-1' },
          { name: 'CSeq', value: '1 ACK' },
        ],
        body: Buffer.alloc(0),
      });
      caller.send(ack, ua.port, '127.0.0.1');
      const before = oks.length;
      // Past the next retransmission time (4 s after the third): nothing more arrives.
      const until = Date.now() + 4500;
      await eventually(async () => Date.now() > until, 6000, 100);
      assert.ok(
        got.filter((g) => g.m.kind === 'response' && g.m.status === 200).length === before,
        'retransmission stopped at the ACK',
      );
      assert.equal(media.sessions[0]?.started?.role, 'receive');
    } finally {
      caller.close();
    }
  });
});

describe(
  'SIP line with the native media engine, SIPp as a voice line',
  skipUnless(!loadMediaEngine() && mediaUnavailableMessage, 'spandsp'),
  () => {
    it('answered without fax tones: T.30 gives up (T0/T1, about 60 s), no_fax_tone, retried; our BYE ends the call', async () => {
      const port = await sipPort();
      // SIPp waits for our BYE past T.30's T0 (60 s), and the call's deadline leaves T0 room to expire.
      const run = sipp('uas-answer-silent.xml', { port, waitS: 100 });
      try {
        await listening(port);
        const media = loadMediaEngine();
        assert.ok(media);
        const l = new SipLine({
          trunk: `sip:127.0.0.1:${port}`,
          listen: { host: '127.0.0.1', port: await sipPort() },
          publicAddress: '127.0.0.1',
          t38: 'accept',
          rtpPorts: await rtpRange(),
          ringTimeoutMs: 10_000,
          // SIPp sends no RTP at all: the media watch would end the call first; T.30's T0 is tested here.
          mediaTimeoutMs: 120_000,
          media,
        });
        lines.push(l);
        const { ctl, progress } = control(undefined, 150_000);
        const outcome = await l.transmit(
          { ...prepared(), tiff: readFileSync(makeFaxTiff(1, 'standard')) },
          ctl,
        );
        const f = failure(outcome);
        assert.equal(f.type, 'no_fax_tone', JSON.stringify(f));
        assert.equal(f.retryable, true);
        assert.match(f.code, /^T30_[23]$/);
        assert.equal(f.engine?.transport, 'audio');
        assert.equal(f.engine?.sip_status, 200);
        assert.deepEqual(progress, [{ type: 'dialling' }], 'never connected');
        const s = await run.done;
        assert.equal(s.code, 0, `SIPp did not get our BYE: ${s.errors}`);
      } finally {
        run.kill();
      }
    });
  },
);
