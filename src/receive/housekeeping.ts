// The receiving side's periodic work, run by every send worker (several at once do no harm: each
// statement takes its rows with SKIP LOCKED or only touches rows not yet changed):
// - the sweep: receptions still 'receiving' past INBOUND_MAX_CALL_SECONDS (their process died) are
//   failed and announced (fax.receive_failed), so none stays "receiving" for ever;
// - retention: the images of received faxes past their account's retention are removed.
import type { Pool } from '../db/pool.ts';
import { failAbandoned, purgeReceivedImages } from './store.ts';

export interface HousekeepingOptions {
  db: Pool;
  /** DOCUMENT_RETENTION_DAYS: the default retention of received images (0: forever). */
  retentionDays: number;
  /** INBOUND_MAX_CALL_SECONDS. */
  maxCallSeconds: number;
  intervalMs: number;
  now?: () => Date;
  onDone?: (r: { failed: number; purged: number }) => void;
  onError?: (err: unknown) => void;
}

/** One pass: sweep then purge (bounded batches until nothing is left). */
export async function housekeepingPass(o: Omit<HousekeepingOptions, 'intervalMs'>): Promise<{
  failed: number;
  purged: number;
}> {
  const now = o.now?.() ?? new Date();
  // A minute of slack past the longest call: a live process always completes first.
  const cutoff = new Date(now.getTime() - (o.maxCallSeconds + 60) * 1000);
  let failed = 0;
  let purged = 0;
  for (let i = 0; i < 100; i++) {
    const n = await failAbandoned(o.db, cutoff);
    failed += n;
    if (n === 0) break;
  }
  for (let i = 0; i < 100; i++) {
    const n = await purgeReceivedImages(o.db, now, o.retentionDays);
    purged += n;
    if (n === 0) break;
  }
  return { failed, purged };
}

export function startReceiveHousekeeping(o: HousekeepingOptions): { stop(): Promise<void> } {
  let running: Promise<void> = Promise.resolve();
  const tick = () => {
    running = running
      .then(async () => {
        const r = await housekeepingPass(o);
        if (r.failed + r.purged > 0) o.onDone?.(r);
      })
      .catch((err: unknown) => o.onError?.(err));
  };
  tick();
  const timer = setInterval(tick, o.intervalMs);
  timer.unref();
  return {
    stop: async () => {
      clearInterval(timer);
      await running;
    },
  };
}
