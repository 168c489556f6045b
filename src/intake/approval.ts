// Approval before sending. A fax sent with approval_required waits in `awaiting_approval`: no
// command on RabbitMQ, no pg-boss job, no line. Approving moves it on (to `accepted` and its command
// is published, or to `scheduled` with its due-time job when scheduled_date is still ahead);
// rejecting ends it `rejected`. Both are single conditional transitions, so two approvers (or an
// approve racing a reject or a cancel) cannot both win. Used by the API and by the admin CLI.
import { ApiError, messages } from '../domain/envelope.ts';
import type { Clock } from '../clock.ts';
import type { Queryable } from '../db/pool.ts';
import { isId } from '../domain/ids.ts';
import type { CommandPublisher } from '../jobs/command-publisher.ts';
import { getJob, type JobRow, transition } from '../jobs/repo.ts';
import type { Scheduler } from '../scheduler/scheduler.ts';

export interface ApprovalDeps {
  /** Runs `fn` in one transaction (scoped to the account for the API; the owner's for the CLI). */
  tx: <T>(fn: (c: Queryable) => Promise<T>) => Promise<T>;
  scheduler: Pick<Scheduler, 'schedule'>;
  publisher: Pick<CommandPublisher, 'publish'>;
  clock: Clock;
}

function notAwaiting(job: JobRow): ApiError {
  return new ApiError(409, `Fax is not awaiting approval (current state: ${job.state})`, {
    data: { job_id: job.id, state: job.state },
  });
}

/** Who decided, recorded in the transition's detail. */
export interface Decider {
  by: 'api' | 'admin';
  note?: string;
}

export async function approveFax(
  d: ApprovalDeps,
  accountId: string,
  jobId: string,
  who: Decider,
): Promise<JobRow> {
  if (!isId(jobId)) throw new ApiError(404, messages.faxNotFound);
  const row = await d.tx(async (c) => {
    const job = await getJob(c, jobId, accountId);
    if (!job) throw new ApiError(404, messages.faxNotFound);
    if (job.state !== 'awaiting_approval') throw notAwaiting(job);
    const later = job.scheduled_at !== null && job.scheduled_at.getTime() > d.clock.now().getTime();
    const moved = await transition(c, job.id, later ? 'scheduled' : 'accepted', {
      from: ['awaiting_approval'],
      accountId,
      set: { dispatched_at: later ? new Date() : null },
      detail: { approved: true, ...who },
    });
    if (!moved) throw notAwaiting((await getJob(c, jobId, accountId)) ?? job);
    if (later) await d.scheduler.schedule(c, job.id, accountId, job.scheduled_at!);
    return moved;
  });
  if (row.state === 'accepted') {
    // If the publish is not confirmed the job stays accepted and undispatched (no dispatched_at): the
    // command publisher's sweep republishes it, so an approval is never lost.
    await d.publisher
      .publish({
        type: row.kind,
        job_id: row.id,
        account_id: row.account_id,
        ...(row.request_id ? { request_id: row.request_id } : {}),
        trace: row.trace_context,
      })
      .catch(() => undefined);
  }
  return row;
}

export async function rejectFax(
  d: Pick<ApprovalDeps, 'tx'>,
  accountId: string,
  jobId: string,
  who: Decider & { reason?: string },
): Promise<JobRow> {
  if (!isId(jobId)) throw new ApiError(404, messages.faxNotFound);
  return d.tx(async (c) => {
    const moved = await transition(c, jobId, 'rejected', {
      from: ['awaiting_approval'],
      accountId,
      set: {
        completed_at: new Date(),
        failure_code: 'rejected',
        failure_reason: who.reason ? `rejected: ${who.reason}` : 'rejected before sending',
      },
      detail: { approved: false, ...who },
    });
    if (moved) return moved;
    const job = await getJob(c, jobId, accountId);
    if (!job) throw new ApiError(404, messages.faxNotFound);
    throw notAwaiting(job);
  });
}

/** cancel-schedule of a scheduled fax that still awaits approval (it holds no pg-boss job yet). */
export async function cancelAwaitingScheduled(
  d: Pick<ApprovalDeps, 'tx'>,
  accountId: string,
  jobId: string,
): Promise<boolean> {
  return d.tx(async (c) => {
    const job = await getJob(c, jobId, accountId);
    if (!job || job.state !== 'awaiting_approval' || job.scheduled_at === null) return false;
    const moved = await transition(c, jobId, 'cancelled', {
      from: ['awaiting_approval'],
      accountId,
      set: { completed_at: new Date() },
      detail: { by: 'customer' },
    });
    return moved !== null;
  });
}
