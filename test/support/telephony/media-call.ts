// Two fax media sessions of faxline's engine (src/transmission/sip/media-engine.ts) in one test
// process, a sender and a receiver, wired to whatever addresses a test puts between them (directly,
// through rtpengine, through the lossy relay): the media half of a call, without SIP signalling.
import type {
  MediaEngine,
  MediaEvent,
  MediaResult,
  MediaSession,
  T38Params,
} from '../../../src/transmission/sip/media.ts';
import { RANGES } from './ports.ts';

export const T38_DEFAULTS: T38Params = {
  version: 0,
  maxBitRate: 14400,
  rateManagement: 'transferredTCF',
  maxDatagram: 400,
  errorCorrection: 'redundancy',
  fillBitRemoval: false,
};

export interface Leg {
  transport: 'audio' | 't38';
  /** Where this leg sends its media. */
  remote: { address: string; port: number };
  t38?: T38Params;
}

export interface MediaCallResult {
  sender: MediaResult;
  receiver: MediaResult;
  senderEvents: MediaEvent[];
  receiverEvents: MediaEvent[];
  senderStats: ReturnType<MediaSession['stats']>;
  receiverStats: ReturnType<MediaSession['stats']>;
}

/** The T.38 parameters of the `m=image` section of an SDP body (rtpengine's, a far end's). */
export function t38FromSdp(sdp: string): { port: number; t38: T38Params } {
  const m = /^m=image (\d+) udptl t38\r?$/m.exec(sdp);
  if (!m) throw new Error(`no m=image ... udptl t38 in:\n${sdp}`);
  const section = sdp.slice(m.index);
  const attr = (name: string) => new RegExp(`^a=${name}:(\\S+)\\r?$`, 'mi').exec(section)?.[1];
  const ec = attr('T38FaxUdpEC');
  return {
    port: Number(m[1]),
    t38: {
      version: Number(attr('T38FaxVersion') ?? 0),
      maxBitRate: Number(attr('T38MaxBitRate') ?? 14400),
      rateManagement: attr('T38FaxRateManagement') === 'localTCF' ? 'localTCF' : 'transferredTCF',
      maxDatagram: Number(attr('T38FaxMaxDatagram') ?? 400),
      errorCorrection: ec === 't38UDPFEC' ? 'fec' : ec === 't38UDPRedundancy' ? 'redundancy' : 'none',
      fillBitRemoval: /^a=T38FaxFillBitRemoval(:1)?\r?$/m.test(section),
    },
  };
}

/** The port of the `m=audio` section of an SDP body. */
export function audioPortFromSdp(sdp: string): number {
  const m = /^m=audio (\d+) RTP\/AVP/m.exec(sdp);
  if (!m) throw new Error(`no m=audio in:\n${sdp}`);
  return Number(m[1]);
}

/** An SDP body for a local media port: PCMU/PCMA audio, or T.38 over UDPTL with `t38`. */
export function localSdp(port: number, kind: 'audio' | 't38', t38: T38Params = T38_DEFAULTS): string {
  const head = ['v=0', `o=- ${port} 1 IN IP4 127.0.0.1`, 's=faxline-test', 'c=IN IP4 127.0.0.1', 't=0 0'];
  const body =
    kind === 'audio'
      ? [`m=audio ${port} RTP/AVP 0 8`, 'a=rtpmap:0 PCMU/8000', 'a=rtpmap:8 PCMA/8000', 'a=ptime:20']
      : [
          `m=image ${port} udptl t38`,
          `a=T38FaxVersion:${t38.version}`,
          `a=T38MaxBitRate:${t38.maxBitRate}`,
          `a=T38FaxRateManagement:${t38.rateManagement}`,
          `a=T38FaxMaxDatagram:${t38.maxDatagram}`,
          `a=T38FaxUdpEC:${t38.errorCorrection === 'fec' ? 't38UDPFEC' : 't38UDPRedundancy'}`,
        ];
  return [...head, ...body, ''].join('\r\n');
}

/** Opens a session on loopback with a port from the media range. */
export function openSession(engine: MediaEngine): MediaSession {
  return engine.open({ address: '127.0.0.1', portMin: RANGES.rtp[0], portMax: RANGES.rtp[1] });
}

/**
 * Runs one fax between two open sessions until both report `done` (bounded by `maxMs`), then closes
 * them. The legs say where each one sends and on which transport it starts.
 */
export async function runMediaCall(o: {
  sender: MediaSession;
  receiver: MediaSession;
  file: string;
  receivedFile: string;
  ecm: boolean;
  senderLeg: Leg;
  receiverLeg: Leg;
  maxMs?: number;
}): Promise<MediaCallResult> {
  const maxMs = o.maxMs ?? 240_000;
  const senderEvents: MediaEvent[] = [];
  const receiverEvents: MediaEvent[] = [];
  const timers: NodeJS.Timeout[] = [];
  const watch = (events: MediaEvent[], who: string) => {
    let resolve!: (r: MediaResult) => void;
    let reject!: (e: Error) => void;
    const result = new Promise<MediaResult>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // The engine's own maxMs ends the exchange; this only catches an engine that never reports.
    timers.push(
      setTimeout(
        () =>
          reject(
            new Error(`${who}: no 'done' within ${maxMs + 15_000} ms; events ${JSON.stringify(events)}`),
          ),
        maxMs + 15_000,
      ),
    );
    const onEvent = (e: MediaEvent) => {
      events.push(e);
      if (e.type === 'done') resolve(e.result);
    };
    return { result, onEvent };
  };
  const tx = watch(senderEvents, 'sender');
  const rx = watch(receiverEvents, 'receiver');
  try {
    o.receiver.start(
      {
        role: 'receive',
        file: o.receivedFile,
        ident: '+15550199',
        ecm: o.ecm,
        transport: o.receiverLeg.transport,
        remote: o.receiverLeg.remote,
        payloadType: 0,
        ...(o.receiverLeg.transport === 't38' ? { t38: o.receiverLeg.t38 ?? T38_DEFAULTS } : {}),
        maxMs,
      },
      rx.onEvent,
    );
    o.sender.start(
      {
        role: 'send',
        file: o.file,
        ident: '+15550100',
        ecm: o.ecm,
        transport: o.senderLeg.transport,
        remote: o.senderLeg.remote,
        payloadType: 0,
        ...(o.senderLeg.transport === 't38' ? { t38: o.senderLeg.t38 ?? T38_DEFAULTS } : {}),
        maxMs,
      },
      tx.onEvent,
    );
    const [sender, receiver] = await Promise.all([tx.result, rx.result]);
    return {
      sender,
      receiver,
      senderEvents,
      receiverEvents,
      senderStats: o.sender.stats(),
      receiverStats: o.receiver.stats(),
    };
  } finally {
    for (const t of timers) clearTimeout(t);
    o.sender.stop();
    o.receiver.stop();
    o.sender.close();
    o.receiver.close();
  }
}
