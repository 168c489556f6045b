// The suite's one way to wait: poll an observable condition (a state, a log line, a queue depth, a
// counter) until it holds, bounded in time. Tests never sleep a fixed time and then assert that
// something did not happen; they wait for a sign that the system has gone past that point.

/** Polls `fn` until it returns a truthy value or the time runs out. */
export async function eventually<T>(
  fn: () => Promise<T | undefined | null | false>,
  timeoutMs = 15_000,
  stepMs = 50,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < until) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, stepMs));
  }
  throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
}
