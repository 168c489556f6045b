// The fax media engine over the native addon native/spandsp/faxmedia.c: RTP/G.711 and UDPTL/T.38
// with SpanDSP's T.30, paced and processed on the addon's own threads. Optional like the loopback
// line: null where the addon is not built.
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { createRequire } from 'node:module';
import { isIPv4 } from 'node:net';
import type {
  MediaEngine,
  MediaEvent,
  MediaSession,
  MediaStartOptions,
  MediaStats,
  RemoteMedia,
  T38Params,
} from './media.ts';
import type { EngineCounters, MediaMetricsSource } from './media-metrics.ts';

declare const handleBrand: unique symbol;
type Handle = { readonly [handleBrand]: true };

interface NativeT38 {
  t38Version: number;
  maxBitRate: number;
  rateManagement: 1 | 2;
  maxDatagram: number;
  errorCorrection: 0 | 1 | 2;
  fillBitRemoval: boolean;
}

/** What the addon exports (native/spandsp/faxmedia.c). */
export interface FaxmediaAddon {
  configure(o: { threads?: number; realtime?: boolean; concealRepeat?: boolean }): void;
  open(address: string, portMin: number, portMax: number): { handle: Handle; port: number };
  start(
    h: Handle,
    o: {
      send: boolean;
      file: string;
      ident: string;
      ecm: boolean;
      t38: boolean;
      address: string;
      port: number;
      payloadType: number;
      maxMs: number;
      maxPageMm: number;
      maxPages: number;
      rxT6: number;
    } & NativeT38,
    onEvent: (e: MediaEvent) => void,
  ): void;
  switchToT38(h: Handle, address: string, port: number, t38: NativeT38): void;
  updateRemote(h: Handle, address: string, port: number): void;
  stop(h: Handle): void;
  close(h: Handle): void;
  stats(h: Handle): NativeMediaStats;
  active(): number;
  engineStats(reset?: boolean): EngineStats;
  engineCounters(): EngineCounters;
  takeJitterWindow(): { samples: number; p99Us: number };
  udptlDecode(b: Buffer): UdptlPacket | null;
  udptlEncode(seq: number, primary: Buffer, secondaries: Buffer[], maxDatagram: number): Buffer;
}

/** MediaStats and the jitter buffer's and UDPTL receiver's own counters. */
export interface NativeMediaStats extends MediaStats {
  /** Audio frames played as silence (or repeated) because their packet never came. */
  concealed: number;
  /** Packets that came after their turn (RTP) and were dropped. */
  late: number;
  /** Packets received twice, or UDPTL packets already delivered or given up. */
  duplicates: number;
  /** Datagrams that were neither RTP nor UDPTL. */
  malformed: number;
  /**
   * Datagrams dropped unread because they did not come from the far end's signalled media address
   * and port (anyone can send to an open UDP port).
   */
  droppedSource: number;
  /** Receiving: the most rows one page has had so far (the page under way included). */
  longestPageRows: number;
  /** The same in millimetres, at that page's vertical resolution. */
  longestPageMm: number;
}

/** A session with the engine's full counters. */
export interface NativeMediaSession extends MediaSession {
  stats(): NativeMediaStats;
}

export interface EngineStats {
  /** Send-time deviations recorded (one per packet due, audio or T.38). */
  samples: number;
  p50Us: number;
  p99Us: number;
  p999Us: number;
  /** Times a session's clock was set forward because its media thread stalled over 200 ms. */
  lateResets: number;
  /** The latest a packet left against its schedule, in microseconds. */
  maxLateUs: number;
  /**
   * The longest one piece of a media thread's work took, in microseconds, by kind: the 2 ms tick
   * (every session's packets due and their modem work), a command from JavaScript, a received
   * datagram. A late packet with short work means the thread was not run (or waited on a lock).
   */
  maxWorkUs: { tick: number; command: number; packet: number };
  /** Pieces of work over 20 ms (one audio packet's time). */
  slowWork: number;
  threads: number;
  /** Whether the media threads run at real-time priority (SCHED_FIFO 10; needs CAP_SYS_NICE). */
  realtime: boolean;
  /** What a lost audio packet is played as (process-wide). */
  conceal: Conceal;
}

export interface UdptlPacket {
  seq: number;
  primary: Buffer;
  recovery: 'redundancy' | 'fec' | 'none';
  secondary: Buffer[];
  fecSpan: number;
  fecEntries: number;
}

/** What a lost audio packet is played as: the last frame again (default), or silence. */
export type Conceal = 'repeat' | 'silence';

const addonPath = new URL('../../../native/spandsp/build/Release/faxmedia.node', import.meta.url).pathname;

export const mediaUnavailableMessage =
  'the SIP fax media engine is not available: install libspandsp-dev and libtiff-dev, then run `npm run build:native`';

let cached: FaxmediaAddon | null | undefined;

/** The addon, or null when it is not built here. */
export function loadFaxmedia(): FaxmediaAddon | null {
  if (cached !== undefined) return cached;
  if (!existsSync(addonPath)) return (cached = null);
  try {
    cached = createRequire(import.meta.url)(addonPath) as FaxmediaAddon;
  } catch {
    cached = null; // built against a library that is no longer installed
  }
  return cached;
}

function checkRemote(r: RemoteMedia): void {
  if (!isIPv4(r.address)) throw new Error(`media address ${r.address} is not an IPv4 address`);
  if (!Number.isInteger(r.port) || r.port < 1 || r.port > 65535)
    throw new Error(`media port ${r.port} is not valid`);
}

function nativeT38(p: T38Params | undefined): NativeT38 {
  const t = p ?? {
    version: 0,
    maxBitRate: 14400,
    rateManagement: 'transferredTCF',
    maxDatagram: 400,
    errorCorrection: 'redundancy',
    fillBitRemoval: false,
  };
  if (t.version !== 0) throw new Error(`T.38 version ${t.version} is not supported (version 0 only)`);
  return {
    t38Version: t.version,
    maxBitRate: t.maxBitRate,
    rateManagement: t.rateManagement === 'localTCF' ? 1 : 2,
    // The UDPTL packet size the redundancy is fitted under (the primary IFP always goes; SpanDSP
    // sends image data in 30 ms chunks, 54 octets at 14,400 bit/s); far ends that write 0 mean "no limit".
    maxDatagram: t.maxDatagram > 0 ? t.maxDatagram : 1400,
    errorCorrection: t.errorCorrection === 'none' ? 0 : t.errorCorrection === 'fec' ? 2 : 1,
    fillBitRemoval: t.fillBitRemoval,
  };
}

class NativeSession implements NativeMediaSession {
  readonly port: number;
  private readonly addon: FaxmediaAddon;
  private readonly handle: Handle;
  private started = false;
  private closed = false;

  constructor(addon: FaxmediaAddon, handle: Handle, port: number) {
    this.addon = addon;
    this.handle = handle;
    this.port = port;
  }

  start(o: MediaStartOptions, onEvent: (e: MediaEvent) => void): void {
    if (this.closed) throw new Error('the media session is closed');
    if (this.started) throw new Error('the media session was already started');
    if (o.ident.length > 20 || !/^[\x20-\x7e]*$/.test(o.ident))
      throw new Error('the station identity must be at most 20 printable ASCII characters');
    if (o.file === '') throw new Error('start() needs a TIFF file');
    checkRemote(o.remote);
    if (o.transport === 't38' && !o.t38) throw new Error('a T.38 start needs its T.38 parameters');
    this.started = true;
    this.addon.start(
      this.handle,
      {
        send: o.role === 'send',
        file: o.file,
        ident: o.ident,
        ecm: o.ecm,
        t38: o.transport === 't38',
        address: o.remote.address,
        port: o.remote.port,
        payloadType: o.payloadType ?? 0,
        maxMs: o.maxMs ?? 0,
        maxPageMm: o.maxPageMm ?? 0,
        maxPages: o.maxPages ?? 0,
        rxT6: o.rxT6 ? 1 : 0,
        ...nativeT38(o.t38),
      },
      onEvent,
    );
  }

  switchToT38(remote: RemoteMedia, t38: T38Params): void {
    if (this.closed) return;
    checkRemote(remote);
    this.addon.switchToT38(this.handle, remote.address, remote.port, nativeT38(t38));
  }

  updateRemote(remote: RemoteMedia): void {
    if (this.closed) return;
    checkRemote(remote);
    this.addon.updateRemote(this.handle, remote.address, remote.port);
  }

  stop(): void {
    if (!this.closed) this.addon.stop(this.handle);
  }

  stats(): NativeMediaStats {
    return this.addon.stats(this.handle);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.addon.close(this.handle);
  }
}

export class NativeMediaEngine implements MediaEngine, MediaMetricsSource {
  private readonly addon: FaxmediaAddon;

  /**
   * Throws with mediaUnavailableMessage where the addon is not built. `threads`: media threads
   * (default: cores, at most 4); `realtime`: ask for real-time scheduling of them (default true;
   * without the capability they run at normal priority); `conceal`: what a lost audio packet is
   * played as, `repeat` (default: the last frame again, which keeps the modem's carrier up so that
   * ECM can ask for the damaged frames; docs/lines-retries.md has the figures) or `silence`.
   */
  constructor(o: { threads?: number; realtime?: boolean; conceal?: Conceal } = {}) {
    const addon = loadFaxmedia();
    if (!addon) throw new Error(mediaUnavailableMessage);
    this.addon = addon;
    // Media threads are made at the first open(); later thread settings are ignored by the addon.
    // Concealment is process-wide and takes effect at once.
    addon.configure({
      threads: o.threads ?? Math.min(4, Math.max(1, availableParallelism())),
      realtime: o.realtime ?? true,
      concealRepeat: o.conceal !== 'silence',
    });
  }

  /** Sets what lost audio packets are played as, for every call of the process, at once. */
  setConceal(c: Conceal): void {
    this.addon.configure({ concealRepeat: c === 'repeat' });
  }

  open(o: { address: string; portMin: number; portMax: number }): NativeMediaSession {
    if (!isIPv4(o.address)) throw new Error(`media address ${o.address} is not an IPv4 address`);
    const { handle, port } = this.addon.open(o.address, o.portMin, o.portMax);
    return new NativeSession(this.addon, handle, port);
  }

  active(): number {
    return this.addon.active();
  }

  /** Send-time deviation over every session of this process (for benchmarks and metrics). */
  engineStats(reset = false): EngineStats {
    return this.addon.engineStats(reset);
  }

  /** Process-wide packet totals by protocol and running sessions by transport (for metrics). */
  counters(): EngineCounters {
    return this.addon.engineCounters();
  }

  /** Send-time deviation p99 since the previous call (a window of its own, apart from engineStats). */
  takeJitterWindow(): { samples: number; p99Us: number } {
    return this.addon.takeJitterWindow();
  }

  /** Media-thread stalls since the process started (for metrics). */
  stalls(): { lateResets: number; slowWork: number } {
    const e = this.addon.engineStats(false);
    return { lateResets: e.lateResets, slowWork: e.slowWork };
  }
}

let engine: NativeMediaEngine | null | undefined;

/**
 * The process's media engine (its threads are shared by every call), or null where the addon is
 * not built; mediaUnavailableMessage says how to get it. `conceal` (SIP_AUDIO_CONCEAL) applies to
 * the whole process.
 */
export function loadMediaEngine(o: { conceal?: Conceal } = {}): NativeMediaEngine | null {
  if (engine === undefined) engine = loadFaxmedia() ? new NativeMediaEngine() : null;
  if (engine && o.conceal) engine.setConceal(o.conceal);
  return engine;
}
