// The contract between the SIP user agent (signalling, on the event loop) and the fax media engine
// (native/spandsp/faxmedia.c: RTP and UDPTL sockets, G.711, T.38 and the T.30 engine on native
// threads). Signalling opens one session per call, tells it where the far end's media is after each
// offer/answer, and hears back what the fax engine did. Nothing here paces packets: the addon does.

/** Where the far end wants media sent (from its SDP). */
export interface RemoteMedia {
  address: string;
  port: number;
}

/** T.38 parameters agreed in SDP (`m=image … udptl t38`). */
export interface T38Params {
  /** T38FaxVersion; we speak version 0. */
  version: number;
  /** T38MaxBitRate (bit/s), e.g. 14400. */
  maxBitRate: number;
  rateManagement: 'transferredTCF' | 'localTCF';
  /** T38FaxMaxDatagram: the largest UDPTL packet the far end accepts (bytes). */
  maxDatagram: number;
  /** T38FaxUdpEC: redundancy is what we send; FEC offered by the far end is answered with redundancy. */
  errorCorrection: 'redundancy' | 'fec' | 'none';
  fillBitRemoval: boolean;
}

export interface MediaStartOptions {
  role: 'send' | 'receive';
  /** TIFF Class F to send (role send), or the file to write what is received (role receive). */
  file: string;
  /** Local station identity (TSI when sending, CSI when receiving), at most 20 characters. */
  ident: string;
  /** Offer/accept error correction mode (needed for T.6 on the line). */
  ecm: boolean;
  /** Starts on audio (G.711) or directly on T.38 (when the INVITE itself was image/t38). */
  transport: 'audio' | 't38';
  remote: RemoteMedia;
  /** Audio only: RTP payload type agreed (0 PCMU, 8 PCMA). */
  payloadType?: 0 | 8;
  /** T.38 only. */
  t38?: T38Params;
  /** Gives up (T.30 timeouts aside) after this long in milliseconds. */
  maxMs?: number;
  /**
   * Receiving: a page longer than this (millimetres at its own resolution) ends the exchange; the
   * pages before it are kept (INBOUND_MAX_PAGE_MM). 0 or absent: no limit.
   */
  maxPageMm?: number;
  /**
   * Receiving: once this many pages arrived and the far end announces more, the exchange ends after
   * that page's confirmation (INBOUND_MAX_PAGES). 0 or absent: no limit.
   */
  maxPages?: number;
  /**
   * Receiving with ECM: offer T.6 (MMR) coding as well as T.4 (INBOUND_T6). Off, an ECM block's
   * decoded rows are bounded by T.4's end-of-line codes (at most 8.7 MB at A4 width); on, by one bit a
   * row (113 MB). Sending always offers what the far end takes.
   */
  rxT6?: boolean;
}

export type MediaEvent =
  /** Phase B done: training succeeded at this rate. */
  | { type: 'connected'; bitRate: number; ecm: boolean; remoteIdent: string }
  /** One more page sent (role send) or received (role receive). */
  | { type: 'page'; pages: number }
  /** The T.30 exchange ended (the session stops its media afterwards). */
  | { type: 'done'; result: MediaResult };

export interface MediaResult {
  ok: boolean;
  /** SpanDSP T.30 completion code (T30_ERR_*), 0 when ok. */
  code: number;
  text: string;
  pages: number;
  bitRate: number;
  ecm: boolean;
  remoteIdent: string;
  xResolution: number;
  yResolution: number;
  /** 1 T.4 1-D, 2 T.4 2-D, 3 T.6. */
  encoding: number;
  transport: 'audio' | 't38';
  /** Milliseconds from start() to the end of the exchange. */
  durationMs: number;
  /**
   * Receiving: the last page in the file went past the page length limit (it ended within one ECM
   * block) and is not to be kept.
   */
  lastPageRejected?: boolean;
}

export interface MediaStats {
  rtpSent: number;
  rtpReceived: number;
  udptlSent: number;
  udptlReceived: number;
  /** Packets the far end's sequence numbers say we never got (before redundancy recovered them). */
  lost: number;
  /** UDPTL packets recovered from redundancy. */
  recovered: number;
  /** p99 of the deviation of our send times from the 20 ms (audio) schedule, in microseconds. */
  sendJitterP99Us: number;
}

export interface MediaSession {
  /** The local UDP port (RTP and UDPTL share it), taken from the RTP_PORTS range. */
  readonly port: number;
  /** Starts the fax engine and the media clock. Call once, after the answer is known. */
  start(o: MediaStartOptions, onEvent: (e: MediaEvent) => void): void;
  /** The call moved to T.38 (re-INVITE accepted either way): the engine continues over UDPTL. */
  switchToT38(remote: RemoteMedia, t38: T38Params): void;
  /** The far end's media address changed (re-INVITE keeping audio). */
  updateRemote(remote: RemoteMedia): void;
  /** Stops media now (BYE, CANCEL, abort). A running exchange ends with a `done` event (not ok). */
  stop(): void;
  stats(): MediaStats;
  /** Frees the port. Safe to call twice. */
  close(): void;
}

export interface MediaEngine {
  /** Binds a UDP port from [portMin, portMax] on `address` (even ports, as RTP expects). */
  open(o: { address: string; portMin: number; portMax: number }): MediaSession;
  /** Calls whose media the engine currently runs. */
  active(): number;
}
