// Telling "the database is unreachable right now" apart from a real error: the first is answered
// with 503 by the API and waited out by workers; the second is a bug or bad data.
const unavailableCodes = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now (starting up / recovering)
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  '53300', // too_many_connections
]);

export function isDbUnavailable(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null;
  if (!e) return false;
  if (e.code && unavailableCodes.has(e.code)) return true;
  return /Connection terminated|connection error|Query read timeout|timeout exceeded when trying to connect|the database system is (starting up|shutting down|in recovery mode)/i.test(
    e.message ?? '',
  );
}

/**
 * Runs `fn`, and runs it again while the database is unreachable (up to `maxMs`). For writes that
 * must not be dropped — the recorded outcome of a call that already happened.
 */
export async function untilDbAvailable<T>(fn: () => Promise<T>, maxMs = 10 * 60_000): Promise<T> {
  const until = Date.now() + maxMs;
  for (let n = 0; ; n++) {
    try {
      return await fn();
    } catch (err) {
      if (!isDbUnavailable(err) || Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, Math.min(200 * 2 ** n, 3000)));
    }
  }
}
