// The suite's one way to wait: poll an observable condition (a state, a log line, a queue depth, a
// counter) until it holds, bounded in time. Tests never sleep a fixed time and then assert that
// something did not happen; they wait for a sign that the system has gone past that point.
//
// The machine sets the pace: test files run several at once, beside other work (CI_LOAD), so the
// default bound is generous (60 s): a condition that holds is seen as soon as it holds, and one
// that never holds still fails, later. FAXLINE_TEST_WAIT_SCALE multiplies every bound (default 1).

/** FAXLINE_TEST_WAIT_SCALE: multiplies every bound of a wait in the tests (default 1). */
export const SCALE = Number(process.env.FAXLINE_TEST_WAIT_SCALE ?? 1) || 1;

/** What a waiter waited for, from its source, for the failure message. */
function described(fn: () => unknown): string {
  const src = String(fn).replace(/\s+/g, ' ');
  return src.length > 240 ? `${src.slice(0, 240)}…` : src;
}

/** Polls `fn` until it returns a truthy value or the time runs out. */
export async function eventually<T>(
  fn: () => Promise<T | undefined | null | false>,
  timeoutMs = 60_000,
  stepMs = 50,
): Promise<T> {
  const bound = timeoutMs * SCALE;
  const until = Date.now() + bound;
  let last: unknown;
  let tries = 0;
  while (Date.now() < until) {
    tries++;
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, stepMs));
  }
  throw new Error(
    `condition not met within ${bound} ms (${tries} tries) waiting for: ${described(fn)}` +
      (last ? `; last error: ${String(last)}` : ''),
  );
}

/**
 * Polls `fn` until it returns `done`, for as long as its `progress` keeps changing: fails when the
 * progress has held still for `stallMs` (the system stopped, which no busy machine explains), or
 * after `capMs` in all. For waits whose length is the machine's pace through much work (the 200
 * faxes of a broadcast), where one fixed bound is either too tight beside other work or too loose
 * to catch a stop. The failure names the last progress seen.
 */
export async function whileProgressing<T>(
  fn: () => Promise<{ done: T | null | undefined; progress: string }>,
  o: { stallMs?: number; capMs?: number; stepMs?: number } = {},
): Promise<T> {
  const stall = (o.stallMs ?? 60_000) * SCALE;
  const until = Date.now() + (o.capMs ?? 600_000) * SCALE;
  let progress = '';
  let moved = Date.now();
  let last: unknown;
  while (Date.now() < until && Date.now() - moved < stall) {
    try {
      const r = await fn();
      if (r.done) return r.done;
      if (r.progress !== progress) {
        progress = r.progress;
        moved = Date.now();
      }
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, o.stepMs ?? 250));
  }
  throw new Error(
    `${Date.now() - moved >= stall ? `no progress for ${stall} ms` : `not done within the ${(o.capMs ?? 600_000) * SCALE} ms cap`}` +
      ` waiting for: ${described(fn)}; last progress: ${progress || '(none)'}` +
      (last ? `; last error: ${String(last)}` : ''),
  );
}
