// The simulated line: a backend users can test against without a phone line. Line time follows
// the physics of a T.30 call (docs/lines-retries.md, "Simulated line"): dialling and ringing, answer and training,
// then per page 8 x bytes / bit rate plus the post-page exchange, then hang-up; divided by
// `speedup`. Documented test numbers (`simulatedTestNumbers`) behave like the real world,
// deterministically; any other number is answered by a fax machine and delivered.
import type { CallControl, FailureType, Outcome, PreparedFax, TransmissionBackend } from './backend.ts';

export const lineTiming = {
  /** Dialling until the far end rings (or the network answers with busy / an intercept tone). */
  dialMs: 2000,
  /** Ringing until a fax machine answers (one ring cycle). */
  ringMs: 6000,
  /** Busy tone heard and recognised. */
  busyMs: 4000,
  /** The network's intercept (SIT) tone for a number that does not exist. */
  invalidMs: 3000,
  /** T.30 waits up to 60 s for an answer. */
  noAnswerMs: 60_000,
  /** Answered, but no fax tone (CED/V.21) within T.30's T1 of 35 s: a voice line. */
  noFaxToneMs: 35_000,
  /** From answer to the end of a successful training. */
  answerAndTrainingMs: 7000,
  /** A failed training check (TCF) before falling back to a lower bit rate. */
  failedTrainingMs: 3000,
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

/** What the far end does on one call. */
export type Script =
  | { kind: 'deliver'; trainings: number[] } // bit rates tried in order; the last one trains
  | { kind: 'busy' }
  | { kind: 'no_answer' }
  | { kind: 'no_fax_tone' }
  | { kind: 'invalid_number' }
  | { kind: 'protocol_error' }
  | { kind: 'drop'; afterPage: number };

const deliver: Script = { kind: 'deliver', trainings: [lineTiming.defaultBitRate] };

export interface TestNumber {
  number: string;
  /** What the line does. */
  behaviour: string;
  /** The job's final state with the default retry policy, and its attempt history. */
  result: string;
}

/** The documented test numbers (docs/lines-retries.md, OpenAPI description). */
export const simulatedTestNumbers: readonly TestNumber[] = [
  {
    number: '+15550100000',
    behaviour: 'answered by a fax machine; every page confirmed at 14,400 bit/s',
    result: 'delivered after 1 attempt',
  },
  {
    number: '+15550100001',
    behaviour: 'busy on every call',
    result: 'failed (busy) after MAX_DIALS attempts, each retried after RETRY_BUSY_SECONDS',
  },
  {
    number: '+15550100002',
    behaviour: 'busy on the first call, then answered and delivered',
    result: 'delivered after 2 attempts (busy, delivered)',
  },
  {
    number: '+15550100003',
    behaviour: 'rings and is never answered (60 s ring timeout)',
    result: 'failed (no_answer) after MAX_DIALS attempts, each retried after RETRY_NO_ANSWER_SECONDS',
  },
  {
    number: '+15550100004',
    behaviour: 'answered by a person or voice mail: no fax tone within 35 s',
    result: 'failed (no_fax_tone) after MAX_DIALS attempts, each retried after RETRY_OTHER_SECONDS',
  },
  {
    number: '+15550100005',
    behaviour: 'the number does not exist (intercept tone)',
    result: 'failed (invalid_number) after 1 attempt; never retried',
  },
  {
    number: '+15550100008',
    behaviour: 'a poor line: training fails at 14,400 and 9,600 bit/s, succeeds at 4,800',
    result: 'delivered after 1 attempt at 4,800 bit/s (longer line time)',
  },
  {
    number: '+15550100009',
    behaviour: 'a fax protocol error (no confirmation of the first page) on the first call, then delivered',
    result: 'delivered after 2 attempts (protocol_error, delivered), retried after RETRY_PROTOCOL_SECONDS',
  },
  {
    number: '+1555010001N',
    behaviour:
      'N = 0..9: the call drops after page N on the first call (during the last page if the fax has N pages or fewer); the next call delivers',
    result: 'delivered after 2 attempts (call_dropped with N pages sent, delivered)',
  },
  {
    number: '+1555010002N',
    behaviour: 'N = 0..9: the call drops after page N on every call',
    result: 'failed (call_dropped) after MAX_TRIES attempts that reached the fax machine',
  },
];

/** The test numbers as a Markdown table, for the OpenAPI description of POST /v1/faxes/send. */
export function simulatedTestNumbersMarkdown(): string {
  return [
    '| fax_number | the simulated line | result |',
    '|---|---|---|',
    ...simulatedTestNumbers.map((t) => `| \`${t.number}\` | ${t.behaviour} | ${t.result} |`),
  ].join('\n');
}

/** The far end's behaviour for `attempt` (1-based) to `faxNumber`. Pure and deterministic. */
export function scriptFor(faxNumber: string, attempt: number): Script {
  const m = /^\+155501000(\d\d)$/.exec(faxNumber);
  if (!m) return deliver;
  const code = Number(m[1]);
  switch (code) {
    case 1:
      return { kind: 'busy' };
    case 2:
      return attempt === 1 ? { kind: 'busy' } : deliver;
    case 3:
      return { kind: 'no_answer' };
    case 4:
      return { kind: 'no_fax_tone' };
    case 5:
      return { kind: 'invalid_number' };
    case 8:
      return { kind: 'deliver', trainings: [14_400, 9600, 4800] };
    case 9:
      return attempt === 1 ? { kind: 'protocol_error' } : deliver;
  }
  if (code >= 10 && code <= 19) return attempt === 1 ? { kind: 'drop', afterPage: code - 10 } : deliver;
  if (code >= 20 && code <= 29) return { kind: 'drop', afterPage: code - 20 };
  return deliver;
}

const failures: Record<
  Exclude<Script['kind'], 'deliver' | 'drop'>,
  { type: FailureType; code: string; message: string; retryable: boolean; lineMs: number }
> = {
  busy: {
    type: 'busy',
    code: 'BUSY',
    message: 'the destination was busy',
    retryable: true,
    lineMs: lineTiming.dialMs + lineTiming.busyMs,
  },
  no_answer: {
    type: 'no_answer',
    code: 'NO_ANSWER',
    message: 'no answer within 60 s',
    retryable: true,
    lineMs: lineTiming.dialMs + lineTiming.noAnswerMs,
  },
  no_fax_tone: {
    type: 'no_fax_tone',
    code: 'NO_FAX_TONE',
    message: 'the call was answered but no fax machine responded (a voice line?)',
    retryable: true,
    lineMs: lineTiming.dialMs + lineTiming.ringMs + lineTiming.noFaxToneMs,
  },
  invalid_number: {
    type: 'invalid_number',
    code: 'INVALID_NUMBER',
    message: 'the number does not exist',
    retryable: false,
    lineMs: lineTiming.dialMs + lineTiming.invalidMs,
  },
  protocol_error: {
    type: 'protocol_error',
    code: 'PROTOCOL_ERROR',
    message: 'the receiver did not confirm page 1 (T.30 protocol error)',
    retryable: true,
    lineMs: 0, // set per call: it happens after the first page went out
  },
};

/** How many jobs (and destinations) the simulated line remembers for tests. */
export const HISTORY = 1000;

/** Sets `key` as the most recent entry; the oldest entry goes when there are more than HISTORY. */
function setRecent<V>(m: Map<string, V>, key: string, value: V): void {
  m.delete(key);
  m.set(key, value);
  if (m.size > HISTORY) m.delete(m.keys().next().value!);
}

export class SimulatedLine implements TransmissionBackend {
  readonly name = 'simulated';
  private readonly speedup: number;
  /**
   * Calls started, by job id: tests check that no job was ever called twice for one attempt. Only
   * the most recent HISTORY jobs are kept, so a long-running process does not grow with every fax.
   */
  readonly calls = new Map<string, number[]>();
  /** Calls in progress by destination (a destination leaves when its last call ends). */
  readonly active = new Map<string, number>();
  /** The most calls ever in progress at once, by destination (the most recent HISTORY numbers). */
  readonly peakByNumber = new Map<string, number>();
  peak = 0;
  private inProgress = 0;
  constructor(speedup: number) {
    this.speedup = speedup;
  }

  private scaled(ms: number): number {
    return this.speedup === 0 ? 0 : ms / this.speedup;
  }

  /** Total line time of a call (ms, unscaled): used by tests and the benchmark. */
  static lineTimeMs(fax: Pick<PreparedFax, 'faxNumber' | 'pageBytes'>, attempt = 1): number {
    const s = scriptFor(fax.faxNumber, attempt);
    if (s.kind === 'deliver') {
      const rate = s.trainings[s.trainings.length - 1] ?? lineTiming.defaultBitRate;
      return (
        lineTiming.dialMs +
        lineTiming.ringMs +
        lineTiming.answerAndTrainingMs +
        (s.trainings.length - 1) * lineTiming.failedTrainingMs +
        fax.pageBytes.reduce((a, b) => a + pageLineMs(b, rate), 0) +
        lineTiming.hangupMs
      );
    }
    if (s.kind === 'drop' || s.kind === 'protocol_error') return Number.NaN;
    return failures[s.kind].lineMs;
  }

  async transmit(fax: PreparedFax, ctl: CallControl): Promise<Outcome> {
    const started = Date.now();
    const seen = this.calls.get(fax.jobId) ?? [];
    seen.push(fax.attempt);
    setRecent(this.calls, fax.jobId, seen);
    const now = (this.active.get(fax.faxNumber) ?? 0) + 1;
    this.active.set(fax.faxNumber, now);
    setRecent(this.peakByNumber, fax.faxNumber, Math.max(now, this.peakByNumber.get(fax.faxNumber) ?? 0));
    this.peak = Math.max(this.peak, ++this.inProgress);
    try {
      return await this.call(fax, ctl, started);
    } finally {
      this.inProgress--;
      const left = (this.active.get(fax.faxNumber) ?? 1) - 1;
      if (left > 0) this.active.set(fax.faxNumber, left);
      else this.active.delete(fax.faxNumber);
    }
  }

  private async call(fax: PreparedFax, ctl: CallControl, started: number): Promise<Outcome> {
    const script = scriptFor(fax.faxNumber, fax.attempt);
    const of = fax.pageBytes.length;
    let sent = 0;
    const fail = (type: FailureType, code: string, message: string, retryable: boolean): Outcome => ({
      ok: false,
      type,
      code,
      message,
      pagesSent: sent,
      retryable,
      durationMs: Date.now() - started,
    });
    try {
      await ctl.onProgress({ type: 'dialling' });
      if (script.kind !== 'deliver' && script.kind !== 'drop' && script.kind !== 'protocol_error') {
        const f = failures[script.kind];
        await sleep(this.scaled(f.lineMs), ctl.signal);
        return fail(f.type, f.code, f.message, f.retryable);
      }
      await sleep(this.scaled(lineTiming.dialMs + lineTiming.ringMs), ctl.signal);
      const trainings = script.kind === 'deliver' ? script.trainings : [lineTiming.defaultBitRate];
      let bitRate = lineTiming.defaultBitRate;
      for (let i = 0; i < trainings.length; i++) {
        bitRate = trainings[i] ?? bitRate;
        const last = i === trainings.length - 1;
        await sleep(
          this.scaled(i === 0 ? lineTiming.answerAndTrainingMs : lineTiming.failedTrainingMs),
          ctl.signal,
        );
        await ctl.onProgress({ type: 'training', bitRate, ok: last });
      }
      await ctl.onProgress({ type: 'connected', bitRate });
      const dropAfter = script.kind === 'drop' ? Math.min(script.afterPage, of - 1) : Infinity;
      for (const bytes of fax.pageBytes) {
        if (sent >= dropAfter) {
          await sleep(this.scaled(pageLineMs(bytes, bitRate) / 2), ctl.signal);
          return fail('call_dropped', 'CALL_DROPPED', `the call dropped after page ${sent} of ${of}`, true);
        }
        await sleep(this.scaled(pageLineMs(bytes, bitRate)), ctl.signal);
        if (script.kind === 'protocol_error')
          return fail(
            failures.protocol_error.type,
            failures.protocol_error.code,
            failures.protocol_error.message,
            true,
          );
        sent++;
        await ctl.onProgress({ type: 'page_sent', page: sent, of });
      }
      await sleep(this.scaled(lineTiming.hangupMs), ctl.signal);
      return {
        ok: true,
        pages: sent,
        durationMs: Date.now() - started,
        remoteStationId: fax.faxNumber,
        bitRate,
      };
    } catch (err) {
      if (!ctl.signal.aborted) throw err;
      return fail('aborted', 'ABORTED', `call ended by the sender after ${sent} of ${of} page(s)`, true);
    }
  }

  /**
   * The simulated line lives inside the worker process: when that process dies, nobody can tell
   * how far the call got. It therefore never knows the outcome (null), like a bare modem.
   */
  reconcile(): Promise<Outcome | null> {
    return Promise.resolve(null);
  }
}
