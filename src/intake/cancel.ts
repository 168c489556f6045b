// Cancel of a scheduled fax. The answer is decided here, synchronously, by one conditional state
// transition (scheduled → cancelled): if the due-time worker moved the fax on first, the cancel is
// refused with the state it is in; if the cancel wins, the due-time worker finds nothing to send.
// The cancel command then travels on RabbitMQ; the cancel worker removes the pg-boss job.
import type { Broker } from '../amqp/broker.ts';
import { ApiError, messages } from '../domain/envelope.ts';
import type { Pool } from '../db/pool.ts';
import type { CancelCommand } from '../domain/commands.ts';
import { isId } from '../domain/ids.ts';
import { getJob, transition } from '../jobs/repo.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';

export async function cancelScheduled(
  d: { db: Pool; broker: Broker; log: Logger; metrics?: Metrics },
  accountId: string,
  jobId: string,
  requestId: string | null,
): Promise<void> {
  const count = (outcome: 'cancelled' | 'refused' | 'not_found') =>
    d.metrics?.scheduledCancels.inc({ outcome });
  if (!isId(jobId)) {
    count('not_found');
    throw new ApiError(404, messages.faxNotFound);
  }
  const row = await transition(d.db, jobId, 'cancelled', {
    from: ['scheduled'],
    accountId,
    set: { completed_at: new Date() },
    detail: { by: 'customer' },
  });
  if (!row) {
    const cur = await getJob(d.db, jobId, accountId);
    if (!cur) {
      count('not_found');
      throw new ApiError(404, messages.faxNotFound);
    }
    count('refused');
    throw new ApiError(
      409,
      `Fax cannot be cancelled: it is no longer scheduled (current state: ${cur.state})`,
      {
        data: { job_id: cur.id, state: cur.state },
      },
    );
  }
  count('cancelled');
  d.metrics?.transitions.inc({ to: 'cancelled' });
  const cmd: CancelCommand = {
    version: 1,
    type: 'cancel',
    job_id: jobId,
    account_id: accountId,
    issued_at: new Date().toISOString(),
    ...(requestId ? { request_id: requestId } : {}),
  };
  // Not awaited: the answer is already true (the transition above), and the command only cleans up
  // the pg-boss job; if it is lost, that job fires, finds the fax cancelled and does nothing.
  // Waiting for the quorum queue's confirm would add about 50 ms to every cancel for no guarantee.
  void d.broker
    .publish(d.broker.names.commands, 'cancel', cmd, { messageId: `${jobId}:cancel` })
    .catch((err: unknown) =>
      // The fax is cancelled already; the leftover pg-boss job will find it cancelled and do nothing.
      d.log.warn(
        { jobId, requestId, err: (err as Error).message },
        'cancel command not published; cleanup deferred',
      ),
    );
}
