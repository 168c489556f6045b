// PDF checks in a sandbox: a small pool of child processes (src/documents/sandbox/child.ts), each
// started with a V8 heap cap, its resident memory watched and its time limited. A decompression
// bomb or a pathological file gets its process killed and fails that one document; the pool starts
// a fresh process for the next one, so the worker keeps serving other faxes. Checks wait for a
// process fairly between accounts (fair-queue.ts: with more than one process, no account holds them
// all), and a killed process's exit is awaited before its place is given to the next check, so no
// more than `concurrency` processes are ever alive. Besides the checks of a document (`check`), a
// process reads a Smart Template's form at upload (`formFields`) and fills a Smart Template for a fax
// or a preview (`fillTemplate`): pdf-lib, which parses a whole file synchronously, under the same
// queue, caps and failure codes, off the caller's event loop.
import { availableParallelism } from 'node:os';
import {
  HEAVY_TASK_CPU_MS,
  busy,
  cpuMs,
  deprioritize,
  diedOfHeap,
  startCapped,
  type CappedChild,
  idle,
  killChild,
  RecentCpu,
  rssBytes,
} from './capped-child.ts';
import { DocumentError } from './errors.ts';
import { FairGate } from './fair-queue.ts';
import type { SandboxReply, SandboxRequest, SandboxResults, SandboxTask } from './sandbox/child.ts';
import type { CoverValues, FilledTemplate } from './cover.ts';
import type { FormField } from './sandbox/form.ts';
import type { InspectLimits, PdfInfo } from './sandbox/inspect.ts';

export type { PdfInfo, PageInfo } from './sandbox/inspect.ts';
export type { FormField } from './sandbox/form.ts';
export { checkCodes, imageCodes } from './formats.ts';

export interface SandboxLimits extends InspectLimits {
  timeoutMs: number;
  memoryMb: number;
  /** Processes checking at once; 0 = one per CPU core. */
  concurrency: number;
  /**
   * Whether a check past HEAVY_TASK_CPU_MS of CPU, and a heavy account's next checks, run at the
   * low CPU priority (HEAVY_NICE, 10; the default, true). False keeps every check at the normal
   * priority: for callers that measure a check's bounds rather than its share of a busy machine
   * (beside other nice-0 work, a niced check gets a tenth of the CPU).
   */
  lowerHeavy?: boolean;
}

export const defaultSandboxLimits: SandboxLimits = {
  maxPages: 500,
  maxStreamBytes: 256 * 1024 * 1024,
  maxDecodedBytes: 1024 * 1024 * 1024,
  timeoutMs: 30_000,
  memoryMb: 512,
  concurrency: 0,
};

/** Codes of the sandbox itself (the checks' own codes are in checkCodes). */
export const sandboxCodes = {
  timeout: 'pdf_check_timeout',
  memory: 'pdf_check_memory',
  crashed: 'pdf_check_crashed',
} as const;

const childUrl = new URL('./sandbox/child.ts', import.meta.url);
const RSS_POLL_MS = 20;
const STARTUP_MS = 30_000;

interface Slot extends CappedChild {
  busy: boolean;
  /** Set when the process was killed: resolves once its exit is seen. */
  gone: Promise<void> | null;
  /** Killed by close(): a check it was running ends with a plain error, never blamed on the file. */
  closed?: true;
}

export class PdfSandbox {
  readonly limits: SandboxLimits;
  private readonly slots = new Set<Slot>();
  private readonly gate: FairGate;
  private nextId = 1;
  private closed = false;
  private readonly recent = new RecentCpu();

  constructor(limits: SandboxLimits) {
    this.limits = limits;
    this.gate = new FairGate(this.size);
  }

  private get size(): number {
    return this.limits.concurrency > 0 ? this.limits.concurrency : availableParallelism();
  }

  /**
   * Checks one document of `accountId` (a PDF, or a TIFF, JPEG or PNG it returns made into a PDF);
   * rejects with a DocumentError for the file's faults, with `signal`'s reason on abort.
   */
  check(bytes: Uint8Array, name: string, signal?: AbortSignal, accountId = ''): Promise<PdfInfo> {
    return this.submit<'check'>({ kind: 'check', bytes, name, limits: this.limits }, signal, accountId);
  }

  /**
   * Reads the form fields of a Smart Template's PDF (one that passed `check`) and fills it once with
   * sample values (sandbox/form.ts); rejects as `check` does, with 'smart_template_broken' for a
   * form that cannot be read or filled.
   */
  formFields(bytes: Uint8Array, name: string, signal?: AbortSignal, accountId = ''): Promise<FormField[]> {
    return this.submit<'formFields'>({ kind: 'formFields', bytes, name }, signal, accountId);
  }

  /**
   * Fills the Smart Template `bytes` (named `name` in messages) with a fax's cover `values` and
   * flattens it; the total page count it shows is `documentPages` plus the template's own pages,
   * which are answered with the PDF. Rejects as `check` does, with 'smart_template_broken' for a
   * form that cannot be read or filled (cover.ts TemplateFiller).
   */
  fillTemplate(
    bytes: Uint8Array,
    name: string,
    values: CoverValues,
    documentPages: number,
    signal?: AbortSignal,
    accountId = '',
  ): Promise<FilledTemplate> {
    return this.submit<'fillTemplate'>(
      { kind: 'fillTemplate', bytes, name, values, documentPages },
      signal,
      accountId,
    );
  }

  private async submit<K extends SandboxTask['kind']>(
    req: Extract<SandboxTask, { kind: K }>,
    signal: AbortSignal | undefined,
    accountId: string,
  ): Promise<SandboxResults[K]> {
    const permit = await this.gate.acquire(accountId, signal);
    if (this.closed) {
      permit();
      throw new Error('the PDF sandbox is closed');
    }
    const slot = this.acquire(accountId);
    try {
      return (await this.run(slot, req, signal, accountId)) as SandboxResults[K];
    } finally {
      // The place is given back once a killed process has exited (its memory is free).
      void this.release(slot).finally(permit);
    }
  }

  /**
   * Kills every sandbox process; a check running or waiting ends with a plain error (never blamed on
   * the file), and later checks are refused, so no process outlives the owner's stop.
   */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.slots];
    for (const s of all) {
      s.closed = true;
      this.drop(s);
    }
    await Promise.all(all.map((s) => s.gone ?? Promise.resolve()));
  }

  /**
   * An idle process, or a new one (the gate's permit guarantees there is room for it). A heavy
   * account (RecentCpu) gets a low-priority process, another account a normal one, a new one where
   * there is room rather than a low-priority one.
   */
  private acquire(accountId: string): Slot {
    const heavy = this.recent.heavy(accountId);
    const free = [...this.slots].filter((x) => !x.busy);
    const s = free.find((x) => x.niced === heavy) ?? (this.slots.size < this.size ? this.spawn() : free[0]!);
    if (heavy && !s.niced && this.limits.lowerHeavy !== false) s.niced = deprioritize(s.proc);
    s.busy = true;
    return s;
  }

  private async release(slot: Slot): Promise<void> {
    slot.busy = false;
    if (slot.proc.exitCode === null && slot.proc.signalCode === null && this.slots.has(slot)) {
      // A process that grew large while checking (half-way from its start-up size to the cap) is
      // replaced rather than kept.
      const cap = this.limits.memoryMb * 1024 * 1024;
      // A low-priority process is kept, for the next task of a heavy account.
      if (rssBytes(slot.proc.pid) > slot.baseRss + (cap - slot.baseRss) / 2) this.drop(slot);
      else idle(slot.proc);
    }
    await slot.gone;
  }

  private spawn(): Slot {
    const slot: Slot = Object.assign(
      startCapped(childUrl, this.limits.memoryMb, 'PDF sandbox process', () => this.slots.delete(slot)),
      { busy: false, gone: null },
    );
    this.slots.add(slot);
    return slot;
  }

  private drop(slot: Slot): void {
    this.slots.delete(slot);
    slot.gone ??= kill(slot);
  }

  private async run(
    slot: Slot,
    req: SandboxTask,
    signal: AbortSignal | undefined,
    accountId: string,
  ): Promise<SandboxResults[keyof SandboxResults]> {
    const { proc } = slot;
    const { name } = req;
    const doing = {
      check: 'checking the PDF',
      formFields: 'reading the form of the PDF',
      fillTemplate: 'filling its form',
    }[req.kind];
    busy(proc);
    const id = this.nextId++;
    const capBytes = this.limits.memoryMb * 1024 * 1024;
    return new Promise((resolve, reject) => {
      let settled = false;
      const cleanup = () => {
        settled = true;
        if (cpuStart) this.recent.add(accountId, (cpuMs(proc.pid) ?? 0) - cpuStart);
        clearTimeout(timer);
        clearInterval(poll);
        proc.off('message', onMessage);
        proc.off('exit', onExit);
        signal?.removeEventListener('abort', onAbort);
      };
      const fail = (err: Error) => {
        if (settled) return;
        cleanup();
        reject(err);
      };
      const killWith = (err: Error) => {
        if (settled) return;
        this.drop(slot);
        fail(err);
      };
      const onMessage = (m: SandboxReply | { ready: true }) => {
        if (!('id' in m) || m.id !== id || settled) return;
        cleanup();
        if (m.ok) resolve(m.value);
        else reject(new DocumentError(m.code, m.message));
      };
      const onExit = () => {
        // A process that never started is our problem, not the file's: a plain error is retried.
        if (!slot.started) return fail(new Error(`PDF sandbox process did not start: ${slot.stderr}`));
        if (slot.closed) return fail(new Error('the PDF sandbox was closed during the check'));
        const oom = diedOfHeap(slot.stderr);
        fail(
          oom
            ? memoryError(name, doing, this.limits.memoryMb)
            : new DocumentError(
                sandboxCodes.crashed,
                `${name}: ${req.kind === 'check' ? 'the PDF check' : doing} stopped unexpectedly (the file is pathological)`,
              ),
        );
      };
      const onAbort = () => killWith(signal!.reason as Error);
      // Until the process is up, a generous start-up limit (our problem: a plain, retried error);
      // from the moment the file is handed over, the check's own time limit (the file's problem).
      let timer = setTimeout(
        () => killWith(new Error('PDF sandbox process did not start in time')),
        Math.max(STARTUP_MS, this.limits.timeoutMs),
      );
      // CPU time of the process when the file was handed over (0: not yet).
      let cpuStart = 0;
      const poll = setInterval(() => {
        if (rssBytes(proc.pid) > capBytes) return killWith(memoryError(name, doing, this.limits.memoryMb));
        // A heavy check runs on at a low CPU priority, so light checks keep the CPU.
        if (
          cpuStart &&
          !slot.niced &&
          this.limits.lowerHeavy !== false &&
          (cpuMs(proc.pid) ?? 0) - cpuStart > HEAVY_TASK_CPU_MS
        )
          slot.niced = deprioritize(proc);
      }, RSS_POLL_MS);
      proc.on('message', onMessage);
      proc.once('exit', onExit);
      signal?.addEventListener('abort', onAbort, { once: true });
      slot.ready.then(
        () => {
          if (settled) return;
          clearTimeout(timer);
          timer = setTimeout(
            () =>
              killWith(
                new DocumentError(
                  sandboxCodes.timeout,
                  `${name}: ${doing} took longer than ${this.limits.timeoutMs / 1000} s (the file is pathological)`,
                ),
              ),
            this.limits.timeoutMs,
          );
          cpuStart = cpuMs(proc.pid) ?? 0;
          proc.send({ ...req, id } as SandboxRequest, (err) => {
            if (err) killWith(err);
          });
        },
        (err: unknown) => killWith(err as Error),
      );
    });
  }
}

function memoryError(name: string, doing: string, mb: number): DocumentError {
  return new DocumentError(
    sandboxCodes.memory,
    `${name}: ${doing} needed more than ${mb} MB of memory (a decompression bomb or pathological file)`,
  );
}

function kill(s: Slot): Promise<void> {
  return killChild(s.proc);
}

/** Limits of one fax's documents together (the per-document ones are checked in the sandbox). */
export interface FaxLimits {
  /** Pages of all documents (the cover page not counted). */
  maxPages: number;
  /** Decoded bytes of all documents' streams together. */
  maxDecodedBytes: number;
}

export const defaultFaxLimits: FaxLimits = { maxPages: 1000, maxDecodedBytes: 2 * 1024 * 1024 * 1024 };

export const faxCodes = {
  tooManyPages: 'fax_too_many_pages',
  decodedTooLarge: 'fax_decoded_too_large',
} as const;

/**
 * Adds up a fax's checked documents, one at a time, and refuses the fax with a DocumentError at the
 * document that takes it past a limit (so the documents after it are not even checked).
 */
export class FaxBudget {
  private pages = 0;
  private decoded = 0;
  private readonly names: string[] = [];
  readonly limits: FaxLimits;
  constructor(l: FaxLimits) {
    this.limits = l;
  }

  add(name: string, doc: { pageCount: number; decodedBytes: number }): void {
    this.pages += doc.pageCount;
    this.decoded += doc.decodedBytes;
    this.names.push(name);
    const which =
      this.names.length === 1 ? name : `${this.names.length} documents (${this.names.join(', ')})`;
    if (this.pages > this.limits.maxPages)
      throw new DocumentError(
        faxCodes.tooManyPages,
        `${which}: ${this.pages} pages; at most ${this.limits.maxPages} are accepted per fax`,
      );
    if (this.decoded > this.limits.maxDecodedBytes)
      throw new DocumentError(
        faxCodes.decodedTooLarge,
        `${which}: their streams decode to ${this.decoded} bytes; at most ${this.limits.maxDecodedBytes} are accepted per fax`,
      );
  }
}
