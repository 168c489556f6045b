import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { isId } from '../../domain/ids.ts';
import { isJobState, jobStates } from '../../domain/states.ts';
import { approveFax, cancelAwaitingScheduled, rejectFax } from '../../intake/approval.ts';
import { cancelScheduled } from '../../intake/cancel.ts';
import { acceptForward, acceptSend, type Idempotency } from '../../intake/send.ts';
import { getHistory, getJob, type JobRow } from '../../jobs/repo.ts';
import { attemptView, getAttempts } from '../../lines/repo.ts';
import { accountOf } from '../auth-hook.ts';
import { parseLimit } from '../cursor.ts';
import { ApiError, messages, ok } from '../envelope.ts';
import { page } from '../paginate.ts';
import { approveBody, cancelScheduleBody, forwardFaxBody, rejectBody, sendFaxBody } from '../schemas.ts';
import type { RouteDeps } from '../server.ts';
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

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/** JSON with object keys sorted, so the same body in another key order has the same fingerprint. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v !== null && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v);
}

/** The Idempotency-Key header with the fingerprint of this route and body; undefined when absent. */
function idempotencyOf(req: FastifyRequest, route: string): Idempotency | undefined {
  const h = req.headers['idempotency-key'];
  if (h === undefined) return undefined;
  if (typeof h !== 'string' || !IDEMPOTENCY_KEY.test(h))
    throw new ApiError(422, 'Idempotency-Key: must be 1 to 255 visible ASCII characters, given once');
  const hash = createHash('sha256').update(route).update('\0').update(canonical(req.body)).digest();
  return { key: h, hash };
}

export function registerFaxRoutes(app: FastifyInstance, d: RouteDeps): void {
  const auth = d.auth;
  const approval = (accountId: string) => ({
    tx: <T>(fn: (c: import('../../db/pool.ts').Queryable) => Promise<T>) => d.tenant.tx(accountId, fn),
    scheduler: d.scheduler,
    dispatcher: d.dispatcher,
    clock: d.clock,
  });

  app.post('/v1/faxes/send', { preHandler: auth }, async (req) => {
    const body = parseBody(sendFaxBody, req.body);
    const jobId = await acceptSend(d, accountOf(req), body, req.id, idempotencyOf(req, 'send'));
    return ok(messages.processed, { job_id: jobId });
  });

  app.post('/v1/faxes/forward', { preHandler: auth }, async (req) => {
    const body = parseBody(forwardFaxBody, req.body);
    const jobId = await acceptForward(d, accountOf(req), body, req.id, idempotencyOf(req, 'forward'));
    return ok(messages.processed, { job_id: jobId });
  });

  app.post('/v1/faxes/cancel-schedule', { preHandler: auth }, async (req) => {
    const body = parseBody(cancelScheduleBody, req.body);
    const accountId = accountOf(req);
    // A scheduled fax that still awaits approval holds no pg-boss job: cancelled here directly.
    if (isId(body.job_id) && (await cancelAwaitingScheduled(approval(accountId), accountId, body.job_id))) {
      d.metrics.scheduledCancels.inc({ outcome: 'cancelled' });
      return ok(messages.cancelled);
    }
    await cancelScheduled(
      { db: d.tenant.scoped(accountId), broker: d.broker, log: d.log, metrics: d.metrics },
      accountId,
      body.job_id,
      req.id,
    );
    return ok(messages.cancelled);
  });

  app.post('/v1/faxes/approve', { preHandler: auth }, async (req) => {
    const body = parseBody(approveBody, req.body);
    const accountId = accountOf(req);
    const row = await approveFax(approval(accountId), accountId, body.job_id, { by: 'api' });
    return ok(messages.faxApproved, { job_id: row.id, state: row.state });
  });

  app.post('/v1/faxes/reject', { preHandler: auth }, async (req) => {
    const body = parseBody(rejectBody, req.body);
    const accountId = accountOf(req);
    const row = await rejectFax(approval(accountId), accountId, body.job_id, {
      by: 'api',
      ...(body.reason !== undefined ? { reason: body.reason } : {}),
    });
    return ok(messages.faxRejected, { job_id: row.id, state: row.state });
  });

  app.get<{ Querystring: Record<string, unknown> }>('/v1/faxes', { preHandler: auth }, async (req) => {
    const accountId = accountOf(req);
    const limit = parseLimit(req.query.limit);
    const state = req.query.state;
    if (state !== undefined && (typeof state !== 'string' || !isJobState(state)))
      throw new ApiError(422, `state: must be one of ${jobStates.join(', ')}`);
    const raw = req.query.cursor;
    if (raw !== undefined && typeof raw !== 'string') throw new ApiError(422, 'cursor: must be given once');
    const context = `faxes|${accountId}|${state ?? '*'}`;
    const cursor = raw ? d.cursors.decode(raw, context) : null;
    const r = await d.tenant.tx(accountId, (c) =>
      page<JobRow>(c, d.cursors, context, {
        from: 'fax_jobs',
        columns: '*',
        where: state ? ['state = $1'] : [],
        values: state ? [state] : [],
        order: 'desc',
        limit,
        cursor,
      }),
    );
    return { ...ok(messages.faxesListed, r.rows.map(jobView)), meta: r.meta };
  });

  app.get<{ Params: { job_id: string } }>('/v1/faxes/:job_id', { preHandler: auth }, async (req) => {
    const id = req.params.job_id;
    const found = isId(id)
      ? await d.tenant.tx(accountOf(req), async (c) => {
          const job = await getJob(c, id);
          return job
            ? { job, history: await getHistory(c, job.id), attempts: await getAttempts(c, job.id) }
            : null;
        })
      : null;
    if (!found) throw new ApiError(404, messages.faxNotFound);
    return ok(messages.faxFound, {
      ...jobView(found.job),
      attempt_history: found.attempts.map(attemptView),
      history: found.history.map((h) => ({
        from: h.from_state,
        to: h.to_state,
        attempt: h.attempt,
        at: h.at.toISOString(),
        detail: h.detail,
      })),
    });
  });
}
