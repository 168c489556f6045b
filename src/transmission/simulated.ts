// The simulated line: a backend users can test against without a phone line. Line time follows
// the physics of a T.30 call (see README "Simulated line"): call set-up and training, then per page
// 8 x bytes / bit rate plus the post-page exchange, then hang-up; divided by `speedup`.
import type { CallControl, Outcome, PreparedFax, TransmissionBackend } from './backend.ts';

export const lineTiming = {
  answerAndTrainingMs: 7000,
  postPageMs: 2500,
  hangupMs: 3000,
  defaultBitRate: 14_400,
};

/** Line time of one page, in ms, at `bitRate` bit/s. */
export function pageLineMs(bytes: number, bitRate: number): number {
  return (8 * bytes * 1000) / bitRate + lineTiming.postPageMs;
}

export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0) return signal.aborted ? Promise.reject(new Error('aborted')) : Promise.resolve();
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(new Error('aborted'));
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
}

export class SimulatedLine implements TransmissionBackend {
  readonly name = 'simulated';
  private readonly speedup: number;
  constructor(speedup: number) {
    this.speedup = speedup;
  }

  private scaled(ms: number): number {
    return this.speedup === 0 ? 0 : ms / this.speedup;
  }

  async transmit(fax: PreparedFax, ctl: CallControl): Promise<Outcome> {
    const started = Date.now();
    const bitRate = lineTiming.defaultBitRate;
    let sent = 0;
    try {
      await ctl.onProgress({ type: 'dialling' });
      await sleep(this.scaled(lineTiming.answerAndTrainingMs), ctl.signal);
      await ctl.onProgress({ type: 'connected', bitRate });
      for (const bytes of fax.pageBytes) {
        await sleep(this.scaled(pageLineMs(bytes, bitRate)), ctl.signal);
        sent++;
        await ctl.onProgress({ type: 'page_sent', page: sent, of: fax.pageBytes.length });
      }
      await sleep(this.scaled(lineTiming.hangupMs), ctl.signal);
    } catch (err) {
      if (!ctl.signal.aborted) throw err;
      return {
        ok: false,
        type: 'aborted',
        code: 'ABORTED',
        message: 'call aborted before completion',
        pagesSent: sent,
        retryable: true,
        durationMs: Date.now() - started,
      };
    }
    return {
      ok: true,
      pages: sent,
      durationMs: Date.now() - started,
      remoteStationId: fax.faxNumber,
      bitRate,
    };
  }
}
