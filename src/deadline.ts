// A signal that aborts at a deadline or when a parent signal aborts, and that is released as soon
// as the work it guards ends.
//
// Why not `AbortSignal.any([parent, AbortSignal.timeout(ms)])`: in Node 24 (since nodejs/node#57867)
// `any()` puts every timeout source, and the combined signal, in a process-wide set that is only
// emptied when the timer fires. Both signals, their timer and bookkeeping therefore stayed alive
// for the whole timeout after the work had finished: with a 30-minute call deadline, one set per
// call for 30 minutes (the send worker's heap crept by about 1 KB per fax in the soak).

export interface Deadline {
  readonly signal: AbortSignal;
  /** True when the deadline (not the parent) ended the work. */
  readonly timedOut: boolean;
  /** Clears the timer and unhooks from the parent; call when the work ends (idempotent). */
  dispose(): void;
}

export function deadline(ms: number, parent?: AbortSignal, what = 'the operation'): Deadline {
  const ctl = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    parent?.removeEventListener('abort', onParent); // even if nobody calls dispose()
    if (ctl.signal.aborted) return; // the parent was first
    timedOut = true;
    ctl.abort(new DOMException(`${what} took longer than ${ms} ms`, 'TimeoutError'));
  }, ms);
  timer.unref(); // like AbortSignal.timeout: the deadline alone does not keep the process running
  const onParent = () => ctl.abort(parent!.reason);
  if (parent?.aborted) ctl.abort(parent.reason);
  else parent?.addEventListener('abort', onParent, { once: true });
  return {
    signal: ctl.signal,
    get timedOut() {
      return timedOut;
    },
    dispose() {
      clearTimeout(timer);
      parent?.removeEventListener('abort', onParent);
    },
  };
}
