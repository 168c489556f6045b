// The loopback line: our T.30 sender (SpanDSP) against a virtual receiving fax machine (SpanDSP),
// exchanging real fax signalling in memory over audio modems or T.38. The exchange runs on the
// libuv thread pool as fast as the CPU goes; its progress is then replayed to the job at line
// speed divided by `speedup` (0 = no pacing).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CallControl, FailureType, Outcome, PreparedFax, TransmissionBackend } from './backend.ts';
import { sleep } from './simulated.ts';
import {
  type Faxloop,
  type FaxloopOptions,
  type FaxloopResult,
  loadFaxloop,
  unavailableMessage,
} from './spandsp/addon.ts';

/** Virtual receivers chosen by destination number (documented in docs/lines-retries.md, "Loopback line"). */
export const loopbackNumbers = {
  '+19995550101': 'refuses fine and superfine resolution (standard only)',
  '+19995550102': 'line drops after the first page',
  '+19995550103': 'supports only V.27ter (4,800 bit/s)',
  '+19995550104': 'voice line: nothing answers with fax tones',
} as const;

type Receiver = Pick<FaxloopOptions, 'rxResolutions' | 'dropAfterPages' | 'rxModems' | 'answer'>;

export function receiverFor(number: string, c: Faxloop['constants']): Receiver {
  switch (number) {
    case '+19995550101':
      return { rxResolutions: c.STANDARD };
    case '+19995550102':
      return { dropAfterPages: 1 };
    case '+19995550103':
      return { rxModems: c.V27TER };
    case '+19995550104':
      return { answer: false };
    default:
      return {};
  }
}

/** Maps the engine's T.30 completion code to a failure type and whether a retry makes sense. */
export function classify(
  r: FaxloopResult,
  c: Faxloop['constants'],
): { type: FailureType; retryable: boolean } {
  if (r.completionCode === c.ERR_T0_EXPIRED || r.completionCode === c.ERR_T1_EXPIRED)
    return { type: 'no_fax_tone', retryable: true };
  // The far end cannot take this fax as it is: dialling again will not change that.
  if ([c.ERR_NORESSUPPORT, c.ERR_NOSIZESUPPORT, c.ERR_INCOMPATIBLE].includes(r.completionCode))
    return { type: 'protocol_error', retryable: false };
  if (r.pagesReceived > 0 || r.pagesSent > 0) return { type: 'call_dropped', retryable: true };
  return { type: 'protocol_error', retryable: true };
}

/** A counting semaphore: exchanges are CPU work, so only so many run at once. */
class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];
  constructor(n: number) {
    this.free = n;
  }
  async take(): Promise<() => void> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((r) => this.waiting.push(r));
    return () => {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    };
  }
}

export interface LoopbackOptions {
  /** Exchanges computed at once (default: cores − 1, at least 1), so the event loop keeps a core. */
  concurrency?: number;
  transport: 'audio' | 't38';
  ecm: boolean;
  speedup: number;
  /** Keep what the virtual receiver got (tests compare it with what was sent). */
  keepReceivedIn?: string;
  /** Keep the TIFF each call was handed, as `<job>-<attempt>-sent.tif` (tests compare it with the API's image). */
  keepSentIn?: string;
}

export class LoopbackLine implements TransmissionBackend {
  readonly name = 'loopback';
  private readonly addon: Faxloop;
  private readonly o: LoopbackOptions;
  private readonly slots: Slots;

  constructor(o: LoopbackOptions) {
    const addon = loadFaxloop();
    if (!addon) throw new Error(unavailableMessage);
    this.addon = addon;
    this.o = o;
    this.slots = new Slots(o.concurrency ?? Math.max(1, availableParallelism() - 1));
  }

  async transmit(fax: PreparedFax, ctl: CallControl): Promise<Outcome> {
    const started = Date.now();
    if (!fax.tiff) {
      return {
        ok: false,
        type: 'backend_error',
        code: 'NO_IMAGE',
        message: 'the loopback line needs the rendered fax image',
        pagesSent: 0,
        retryable: false,
        durationMs: 0,
      };
    }
    const dir = await mkdtemp(join(tmpdir(), 'faxline-loop-'));
    try {
      const txFile = join(dir, 'tx.tif');
      const rxFile = join(this.o.keepReceivedIn ?? dir, `${fax.jobId}-${fax.attempt}.tif`);
      await writeFile(txFile, fax.tiff);
      if (this.o.keepSentIn)
        await writeFile(join(this.o.keepSentIn, `${fax.jobId}-${fax.attempt}-sent.tif`), fax.tiff);
      await ctl.onProgress({ type: 'dialling' });
      const release = await this.slots.take();
      const r = await this.addon
        .run({
          txFile,
          rxFile,
          t38: this.o.transport === 't38',
          ecm: this.o.ecm,
          txIdent: fax.stationId ?? fax.callerId,
          rxIdent: fax.faxNumber,
          ...receiverFor(fax.faxNumber, this.addon.constants),
        })
        .finally(release);
      // Replay the engine's own progress at line speed.
      let at = 0;
      for (const e of r.events.filter((x) => x.side === 't' && x.phase !== 'e')) {
        if (this.o.speedup > 0) await sleep((e.tMs - at) / this.o.speedup, ctl.signal);
        at = e.tMs;
        if (e.phase === 'b') await ctl.onProgress({ type: 'connected', bitRate: e.bitRate });
        else if (e.phase === 'd')
          await ctl.onProgress({ type: 'page_sent', page: e.pages, of: fax.pageBytes.length });
      }
      if (this.o.speedup > 0) await sleep((r.lineTimeMs - at) / this.o.speedup, ctl.signal);
      const engine = {
        t30_code: r.completionCode,
        t30_text: r.completionText,
        receiver_code: r.receiverCode,
        receiver_text: r.receiverText,
        ecm: r.ecm,
        bit_rate: r.bitRate,
        x_resolution_ppm: r.xResolution,
        y_resolution_ppm: r.yResolution,
        compression:
          ({ 1: 'T.4 1-D (MH)', 2: 'T.4 2-D (MR)', 3: 'T.6 (MMR)' } as Record<number, string>)[r.encoding] ??
          r.encoding,
        line_time_ms: r.lineTimeMs,
        transport: this.o.transport,
      };
      if (r.ok)
        return {
          ok: true,
          pages: r.pagesSent,
          durationMs: r.lineTimeMs,
          remoteStationId: r.remoteIdent,
          bitRate: r.bitRate,
          engine,
        };
      const c = classify(r, this.addon.constants);
      return {
        ok: false,
        type: c.type,
        code: `T30_${r.completionCode}`,
        message: `T.30: ${r.completionText}`,
        pagesSent: r.pagesSent,
        retryable: c.retryable,
        durationMs: r.lineTimeMs,
        engine,
      };
    } catch (err) {
      if (!ctl.signal.aborted) throw err;
      return {
        ok: false,
        type: 'aborted',
        code: 'ABORTED',
        message: 'call aborted before completion',
        pagesSent: 0,
        retryable: true,
        durationMs: Date.now() - started,
      };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
}
