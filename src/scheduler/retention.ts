// The retention schedule (docs/audit-retention.md): a pg-boss cron schedule (RETENTION_PURGE_CRON, UTC)
// makes one job per tick in a queue that holds at most one job queued or active, so replicas of the
// scheduler run one pass at a time between them, and a pass that outlasts a tick is not stacked. The
// pass itself (what is purged) is the caller's: src/accounts/retention.ts.
import type { PgBoss } from 'pg-boss';
import type { Logger } from '../log.ts';

export const RETENTION_QUEUE = 'faxline-retention';

export async function scheduleRetention(
  boss: PgBoss,
  o: { cron: string; pass: () => Promise<Record<string, number>>; log: Logger },
): Promise<void> {
  await boss.createQueue(RETENTION_QUEUE, {
    policy: 'exclusive',
    // A pass is bounded batches; one that takes longer than this is retried by the next tick.
    expireInSeconds: 15 * 60,
    retryLimit: 0,
    retentionSeconds: 86_400,
  });
  await boss.schedule(RETENTION_QUEUE, o.cron, null, { tz: 'UTC' });
  await boss.work(RETENTION_QUEUE, { batchSize: 1, pollingIntervalSeconds: 10 }, async () => {
    const started = Date.now();
    const r = await o.pass();
    if (Object.values(r).some((n) => n > 0))
      o.log.info({ ...r, ms: Date.now() - started }, 'retention pass: content past its retention deleted');
  });
}
