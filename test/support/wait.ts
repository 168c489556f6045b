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
