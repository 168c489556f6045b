// SDP offer/answer (RFC 3264) for fax calls: G.711 audio (PCMU 0, PCMA 8, 20 ms) and T.38 over
// UDPTL (`m=image <port> udptl t38`). Parsing and writing go through sdp-transform; the fax rules
// are here: accept the T.38 attributes we do not use, answer only with what we do.
import { parse, write, type SessionDescription } from 'sdp-transform';

/** T.38 parameters from SDP (the same shape as the media engine's T38Params). */
export interface T38Sdp {
  version: number;
  maxBitRate: number;
  rateManagement: 'transferredTCF' | 'localTCF';
  maxDatagram: number;
  errorCorrection: 'redundancy' | 'fec' | 'none';
  fillBitRemoval: boolean;
}

export interface RemoteSdp {
  audio: { address: string; port: number; payloadTypes: number[] } | undefined;
  image: { address: string; port: number; t38: T38Sdp } | undefined;
}

/** What we say about T.38 in our own offers and answers. */
export const ourT38: T38Sdp = {
  version: 0,
  maxBitRate: 14400,
  rateManagement: 'transferredTCF',
  maxDatagram: 400,
  errorCorrection: 'redundancy',
  fillBitRemoval: false,
};

export class SdpError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SdpError';
  }
}

/**
 * Bounds of an SDP we read, checked before it is parsed: a fax call needs one or two media sections
 * (audio, image) and a few dozen lines; a body past these is refused (488) without being parsed.
 */
export const SDP_LIMITS = { bytes: 16 * 1024, lines: 256, media: 8, lineChars: 1024 } as const;

/** Throws SdpError when `text` is past SDP_LIMITS (a cheap scan, before any parsing). */
function checkSdpBounds(text: string): void {
  if (text.length > SDP_LIMITS.bytes) throw new SdpError(`SDP over ${SDP_LIMITS.bytes} bytes`);
  let lines = 0;
  let media = 0;
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    if (end - start > SDP_LIMITS.lineChars)
      throw new SdpError(`an SDP line over ${SDP_LIMITS.lineChars} characters`);
    if (++lines > SDP_LIMITS.lines) throw new SdpError(`SDP over ${SDP_LIMITS.lines} lines`);
    if (text.startsWith('m=', start) && ++media > SDP_LIMITS.media)
      throw new SdpError(`SDP with over ${SDP_LIMITS.media} media sections (m= lines)`);
    start = end + 1;
  }
}

function parseBounded(text: string): SessionDescription {
  checkSdpBounds(text);
  try {
    return parse(text);
  } catch (err) {
    throw new SdpError(`unreadable SDP: ${(err as Error).message}`);
  }
}

/** Reads the media we care about; throws SdpError when the SDP is not usable at all. */
export function readSdp(text: string): RemoteSdp {
  return readParsed(parseBounded(text));
}

function readParsed(s: SessionDescription): RemoteSdp {
  const out: RemoteSdp = { audio: undefined, image: undefined };
  for (const m of s.media ?? []) {
    const address = m.connection?.ip ?? s.connection?.ip;
    if (typeof address !== 'string' || !Number.isInteger(m.port) || m.port <= 0 || m.port > 65535) continue;
    if (m.type === 'audio' && !out.audio && /^RTP\/AVP$/i.test(String(m.protocol))) {
      const payloadTypes = String(m.payloads ?? '')
        .split(/\s+/)
        .filter(Boolean)
        .map(Number)
        .filter((n) => Number.isInteger(n));
      out.audio = { address, port: m.port, payloadTypes };
    } else if (
      m.type === 'image' &&
      !out.image &&
      /^udptl$/i.test(String(m.protocol)) &&
      /t38/i.test(String(m.payloads))
    ) {
      out.image = { address, port: m.port, t38: readT38(Array.isArray(m.invalid) ? m.invalid : []) };
    }
  }
  return out;
}

function readT38(attrs: { value: string }[]): T38Sdp {
  const t: T38Sdp = {
    version: 0,
    maxBitRate: 14400,
    rateManagement: 'transferredTCF',
    maxDatagram: 72,
    errorCorrection: 'none',
    fillBitRemoval: false,
  };
  for (const { value } of attrs) {
    if (typeof value !== 'string') continue;
    const [rawName, rawVal = ''] = value.split(':', 2) as [string, string?];
    const name = rawName.trim().toLowerCase();
    const val = rawVal.trim();
    const n = Number(val);
    if (name === 't38faxversion' && Number.isInteger(n)) t.version = n;
    else if (name === 't38maxbitrate' && Number.isInteger(n) && n > 0) t.maxBitRate = n;
    else if (name === 't38faxratemanagement')
      t.rateManagement = val.toLowerCase() === 'localtcf' ? 'localTCF' : 'transferredTCF';
    else if (name === 't38faxmaxdatagram' && Number.isInteger(n) && n > 0) t.maxDatagram = n;
    else if (name === 't38faxudpec')
      t.errorCorrection = /redundancy/i.test(val) ? 'redundancy' : /fec/i.test(val) ? 'fec' : 'none';
    else if (name === 't38faxfillbitremoval') t.fillBitRemoval = val === '' || val === '1';
    // T38FaxMaxBuffer, T38FaxTranscodingMMR/JBIG, T38VendorInfo and the rest: accepted, unused.
  }
  return t;
}

export interface LocalMedia {
  address: string;
  port: number;
  /** o= session id and version (the version goes up with each new offer in a dialog). */
  sessionId: number;
  version: number;
}

function base(l: LocalMedia): SessionDescription {
  const ipVer = l.address.includes(':') ? 6 : 4;
  return {
    version: 0,
    origin: {
      username: 'faxline',
      sessionId: l.sessionId,
      sessionVersion: l.version,
      netType: 'IN',
      ipVer,
      address: l.address,
    },
    name: 'faxline',
    connection: { version: ipVer, ip: l.address },
    timing: { start: 0, stop: 0 },
    media: [],
  };
}

function audioMedia(port: number, pts: number[]): SessionDescription['media'][number] {
  return {
    type: 'audio',
    port,
    protocol: 'RTP/AVP',
    payloads: pts.join(' '),
    rtp: pts.map((p) => ({ payload: p, codec: p === 0 ? 'PCMU' : 'PCMA', rate: 8000 })),
    fmtp: [],
    ptime: 20,
    direction: 'sendrecv',
  };
}

function imageMedia(port: number, t: T38Sdp): SessionDescription['media'][number] {
  const ec = { redundancy: 't38UDPRedundancy', fec: 't38UDPFEC', none: 't38UDPNoEC' }[t.errorCorrection];
  const attrs = [
    `T38FaxVersion:${t.version}`,
    `T38MaxBitRate:${t.maxBitRate}`,
    `T38FaxRateManagement:${t.rateManagement}`,
    `T38FaxMaxBuffer:1800`,
    `T38FaxMaxDatagram:${t.maxDatagram}`,
    `T38FaxUdpEC:${ec}`,
  ];
  if (t.fillBitRemoval) attrs.push('T38FaxFillBitRemoval');
  return {
    type: 'image',
    port,
    protocol: 'udptl',
    payloads: 't38',
    rtp: [],
    fmtp: [],
    invalid: attrs.map((value) => ({ value })),
  };
}

export function audioOffer(l: LocalMedia): string {
  const s = base(l);
  s.media.push(audioMedia(l.port, [0, 8]));
  return write(s);
}

export function t38Offer(l: LocalMedia): string {
  const s = base(l);
  s.media.push(imageMedia(l.port, ourT38));
  return write(s);
}

/** Our T.38 terms given theirs: the version and rate we both do, redundancy as our recovery. */
export function agreeT38(theirs: T38Sdp): T38Sdp {
  return {
    version: Math.min(theirs.version, ourT38.version),
    maxBitRate: Math.min(theirs.maxBitRate, ourT38.maxBitRate),
    rateManagement: theirs.rateManagement,
    maxDatagram: theirs.maxDatagram,
    errorCorrection: theirs.errorCorrection === 'none' ? 'none' : 'redundancy',
    fillBitRemoval: false,
  };
}

export type Answer =
  | {
      ok: true;
      sdp: string;
      transport: 'audio';
      payloadType: 0 | 8;
      remote: { address: string; port: number };
    }
  | { ok: true; sdp: string; transport: 't38'; t38: T38Sdp; remote: { address: string; port: number } }
  | { ok: false; reason: string };

/**
 * Answers an offer: T.38 when offered and allowed, else G.711 (PCMU before PCMA as offered).
 * Media lines we decline are answered with port 0, as RFC 3264 asks. Never throws: an offer past
 * SDP_LIMITS or one that cannot be read or answered is { ok: false } (the call gets 488).
 */
export function answerOffer(offerText: string, l: LocalMedia, allowT38: boolean): Answer {
  try {
    return answer(parseBounded(offerText), l, allowT38);
  } catch (err) {
    return { ok: false, reason: err instanceof SdpError ? err.message : 'the offer cannot be answered' };
  }
}

function answer(offer: SessionDescription, l: LocalMedia, allowT38: boolean): Answer {
  const remote = readParsed(offer);
  const chooseT38 = allowT38 && remote.image !== undefined;
  const pt = remote.audio?.payloadTypes.find((p) => p === 0 || p === 8) as 0 | 8 | undefined;
  if (!chooseT38 && pt === undefined) return { ok: false, reason: 'no PCMU, PCMA or T.38 offered' };
  const s = base(l);
  let taken = false;
  for (const m of offer.media ?? []) {
    if (!taken && chooseT38 && m.type === 'image' && remote.image && m.port === remote.image.port) {
      s.media.push(imageMedia(l.port, agreeT38(remote.image.t38)));
      taken = true;
    } else if (
      !taken &&
      !chooseT38 &&
      m.type === 'audio' &&
      pt !== undefined &&
      remote.audio &&
      m.port === remote.audio.port
    ) {
      s.media.push(audioMedia(l.port, [pt]));
      taken = true;
    } else {
      // Declined: its type, protocol and formats as offered (RFC 3264 6), when they are plain tokens.
      const token = (v: unknown, dflt: string) =>
        typeof v === 'string' && /^[\w./-]{1,32}$/.test(v) ? v : dflt;
      s.media.push({
        type: token(m.type, 'audio'),
        port: 0,
        protocol: token(m.protocol, 'RTP/AVP'),
        payloads: /^[\w./ -]{1,64}$/.test(String(m.payloads ?? '')) ? String(m.payloads) : '0',
        rtp: [],
        fmtp: [],
      });
    }
  }
  const sdp = write(s);
  if (chooseT38 && remote.image)
    return { ok: true, sdp, transport: 't38', t38: agreeT38(remote.image.t38), remote: remote.image };
  if (remote.audio && pt !== undefined)
    return { ok: true, sdp, transport: 'audio', payloadType: pt, remote: remote.audio };
  return { ok: false, reason: 'no usable media' };
}
