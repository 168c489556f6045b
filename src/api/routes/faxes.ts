import type { FastifyInstance } from 'fastify';
import { isId } from '../../domain/ids.ts';
import { cancelScheduled } from '../../intake/cancel.ts';
import { acceptForward, acceptSend } from '../../intake/send.ts';
import { getHistory, getJob, type JobRow } from '../../jobs/repo.ts';
import { attemptView, getAttempts } from '../../lines/repo.ts';
import { accountOf, requireToken } from '../auth-hook.ts';
import { ApiError, messages, ok } from '../envelope.ts';
import { cancelScheduleBody, forwardFaxBody, sendFaxBody } from '../schemas.ts';
import type { ApiDeps } from '../server.ts';
import { parseBody } from '../validate.ts';

export function jobView(j: JobRow) {
  return {
    job_id: j.id,
    kind: j.kind,
    state: j.state,
    source_job_id: j.source_job_id,
    fax_number: j.fax_number,
    caller_id: j.caller_id,
    fax_quality: j.fax_quality,
    fax_priority: j.fax_priority,
    template_id: j.fax_default_id,
    smart_document_id: j.smart_document_id,
    scheduled_date: j.scheduled_at?.toISOString() ?? null,
    options: j.options,
    page_count: j.page_count,
    pages_sent: j.pages_sent,
    attempts: j.attempts,
    next_attempt_at: j.next_attempt_at?.toISOString() ?? null,
    failure: j.failure_code ? { code: j.failure_code, reason: j.failure_reason } : null,
    created_at: j.created_at.toISOString(),
    updated_at: j.updated_at.toISOString(),
    completed_at: j.completed_at?.toISOString() ?? null,
  };
}

export function registerFaxRoutes(app: FastifyInstance, d: ApiDeps): void {
  const auth = requireToken(d);
  const intake = {
    db: d.db,
    broker: d.broker,
    dispatcher: d.dispatcher,
    scheduler: d.scheduler,
    clock: d.clock,
    maxDocumentBytes: d.maxDocumentBytes,
  };

  app.post('/v1/faxes/send', { preHandler: auth }, async (req) => {
    const body = parseBody(sendFaxBody, req.body);
    const jobId = await acceptSend(intake, accountOf(req), body, req.id);
    return ok(messages.processed, { job_id: jobId });
  });

  app.post('/v1/faxes/forward', { preHandler: auth }, async (req) => {
    const body = parseBody(forwardFaxBody, req.body);
    const jobId = await acceptForward(intake, accountOf(req), body, req.id);
    return ok(messages.processed, { job_id: jobId });
  });

  app.post('/v1/faxes/cancel-schedule', { preHandler: auth }, async (req) => {
    const body = parseBody(cancelScheduleBody, req.body);
    await cancelScheduled(d, accountOf(req), body.job_id, req.id);
    return ok(messages.cancelled);
  });

  app.get<{ Params: { job_id: string } }>('/v1/faxes/:job_id', { preHandler: auth }, async (req) => {
    const id = req.params.job_id;
    const job = isId(id) ? await getJob(d.db, id, accountOf(req)) : null;
    if (!job) throw new ApiError(404, messages.faxNotFound);
    const history = await getHistory(d.db, job.id);
    const attempts = await getAttempts(d.db, job.id);
    return ok('Fax found', {
      ...jobView(job),
      attempt_history: attempts.map(attemptView),
      history: history.map((h) => ({
        from: h.from_state,
        to: h.to_state,
        attempt: h.attempt,
        at: h.at.toISOString(),
        detail: h.detail,
      })),
    });
  });
}
