import { PermanentMessageError, type MessageHandler } from '../amqp/broker.ts';
import type { Pool } from '../db/pool.ts';
import { cancelCommand } from '../domain/commands.ts';
import type { Scheduler } from '../scheduler/scheduler.ts';
import { getJob } from '../jobs/repo.ts';
import type { Logger } from '../log.ts';
import { deliveryParent, inSpan, linksTo } from '../trace.ts';

/**
 * The cancel worker: cleans up after a cancelled scheduled fax by removing its pg-boss job, when it
 * had one (a far-tier fax has none: its row, now cancelled, is all there was). Cleanup only: the
 * fax's state already forbids sending, so a lost or late cancel command changes nothing.
 */
export function cancelHandler(d: { db: Pool; scheduler: Scheduler; log: Logger }): MessageHandler {
  return async (msg, body) => {
    const p = cancelCommand.safeParse(body);
    if (!p.success) throw new PermanentMessageError(`invalid command: ${p.error.issues[0]?.message}`);
    const cmd = p.data;
    // A child of the cancel request's trace, linked to the fax's own trace.
    await inSpan(
      'fax.cancel',
      {
        parent: deliveryParent(msg.properties.headers),
        attributes: { 'faxline.job_id': cmd.job_id, 'faxline.account_id': cmd.account_id },
      },
      async (span) => {
        const job = await getJob(d.db, cmd.job_id, cmd.account_id);
        if (job) span?.addLinks(linksTo([job.trace_context]));
        span?.setAttribute('faxline.state', job?.state ?? 'missing');
        if (!job || job.state !== 'cancelled') return;
        const ref = (
          await d.db.query<{ schedule_ref: string | null }>(
            'SELECT schedule_ref FROM fax_jobs WHERE id = $1',
            [job.id],
          )
        ).rows[0]?.schedule_ref;
        span?.setAttribute('faxline.unscheduled', Boolean(ref));
        if (ref) await d.scheduler.unschedule(ref);
        d.log.info(
          { jobId: job.id, requestId: cmd.request_id },
          'scheduled fax cancelled; due-time job removed',
        );
      },
    );
  };
}
