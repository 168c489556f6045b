import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { isId } from '../../domain/ids.ts';
import { isJobState, jobStates } from '../../domain/states.ts';
import { approveFax, cancelAwaitingScheduled, rejectFax } from '../../intake/approval.ts';
import { cancelScheduled } from '../../intake/cancel.ts';
import { acceptForward, acceptSend, type Idempotency } from '../../intake/send.ts';
import { acceptBroadcast } from '../../intake/broadcast.ts';
import { getHistory, getJob, openJobRows, type JobRow } from '../../jobs/repo.ts';
import { attemptView, getAttempts } from '../../lines/repo.ts';
import { accountOf } from '../auth-hook.ts';
import { z } from 'zod';
import { dataErrorMessages } from '../../intake/data-errors.ts';
import { simulatedTestNumbersMarkdown } from '../../transmission/simulated.ts';
import { ApiError, messages, ok } from '../../domain/envelope.ts';
import {
  answer,
  badCursor,
  bodyErrors,
  envelope,
  faxJob,
  type FaxJobView,
  idempotencyHeader,
  listQuery,
  operation,
  pageMeta,
  refusal,
  tokenErrors,
  unavailable,
} from '../openapi.ts';
import { listPage } from '../paginate.ts';
import { E164_PATTERN } from '../../domain/e164.ts';
import {
  approveBody,
  cancelScheduleBody,
  faxOptionBounds,
  forwardFaxBody,
  rejectBody,
  sendFaxBody,
} from '../../domain/schemas.ts';
import type { ApiDeps, RouteDeps } from '../deps.ts';
import { parseBody } from '../../domain/validate.ts';

export function jobView(j: JobRow): FaxJobView {
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
    client_reference: j.client_reference,
    max_dials: j.max_dials,
    give_up_after: j.give_up_after,
    broadcast_id: j.broadcast_id,
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

const jobIdData = z.object({ job_id: z.string() });
const sendData = jobIdData.extend({
  broadcast_id: z
    .string()
    .optional()
    .describe('A broadcast (recipients given): its id, for GET /v1/broadcasts/{broadcast_id}.'),
  job_ids: z
    .array(z.string())
    .optional()
    .describe('A broadcast: one job per recipient, in the order of recipients (job_id is the first).'),
});
const jobState = z.object({ job_id: z.string(), state: z.string() });
const notFound = refusal('No such job in this account.', messages.faxNotFound);

/** The caller id rule (src/accounts/numbers.ts), as the send and forward operations document it. */
const CALLER_ID_RULE =
  'The caller id, however resolved, must be one of the numbers of GET /v1/numbers or the installation caller id ' +
  '(FAX_DEFAULT_CALLER_ID, also used when nothing else gives one); any other → 422 naming caller_id.';

const contracts = {
  send: operation({
    tag: 'Send Faxes',
    summary: 'Send a fax (now, at scheduled_date, or after approval)',
    description:
      'approval_required: true holds the fax in awaiting_approval until POST /v1/faxes/approve or /reject. ' +
      'caller_id and fax_quality default from the chosen Fax Default (template_id), else the account default. ' +
      'Broadcast: recipients instead of fax_number sends the same documents to each recipient (one job each, documents stored and rendered once, a cover page per recipient), up to BROADCAST_MAX_RECIPIENTS; the answer adds broadcast_id and job_ids. ' +
      'Per-fax options: client_reference (returned everywhere, in events, a list filter), max_dials and give_up_after (instead of MAX_DIALS / KILL_TIME_SECONDS). ' +
      CALLER_ID_RULE +
      '\n\n' +
      'Test numbers: with the simulated line (BACKEND=simulated, the default) these destinations behave like the ' +
      'real world, deterministically; any other number is delivered.\n\n' +
      simulatedTestNumbersMarkdown(),
    auth: true,
    body: sendFaxBody,
    headers: idempotencyHeader,
    responses: {
      '200': answer('Accepted: committed and its command confirmed by RabbitMQ.', envelope(sendData), {
        status: 1,
        message: messages.processed,
        data: { job_id: '…' },
      }),
      ...bodyErrors,
      '422': refusal(
        'Invalid field; template_id / smart_document_id not of this account; Base64 that does not decode; not a PDF; file_url not http(s); scheduled_date out of range; Idempotency-Key reused with another body; fax_number and recipients both (or neither); more recipients than BROADCAST_MAX_RECIPIENTS; max_dials / give_up_after / client_reference out of bounds.',
        'template_id: no Fax Default with this id exists in your account',
      ),
      '409': refusal(
        "The database refused the request as inconsistent with the account's stored data (e.g. its Fax Default was deleted meanwhile); nothing was accepted.",
        dataErrorMessages.integrity('23503'),
      ),
      '413': refusal(
        'A document is larger than MAX_DOCUMENT_BYTES, or the request larger than MAX_REQUEST_BYTES.',
        'fax_data[0].file_data: document is larger than 20971520 bytes',
      ),
      ...tokenErrors,
      '503': unavailable,
    },
  }),
  forward: operation({
    tag: 'Send Faxes',
    summary: "Forward an existing fax's documents to another number (new job)",
    description: `caller_id defaults to the account default's fax_as, else the source fax's. ${CALLER_ID_RULE}`,
    auth: true,
    body: forwardFaxBody,
    headers: idempotencyHeader,
    responses: {
      '200': answer('New job accepted.', envelope(jobIdData), {
        status: 1,
        message: messages.processed,
        data: { job_id: '…' },
      }),
      '404': refusal('No such job in this account.', messages.faxNotFoundForward),
      '409': refusal(
        'The source fax awaits approval or was rejected.',
        'Fax cannot be forwarded: its sending was not approved (current state: awaiting_approval)',
      ),
      ...bodyErrors,
      ...tokenErrors,
      '503': unavailable,
    },
  }),
  cancelSchedule: operation({
    tag: 'Manage Faxes',
    summary: 'Cancel a scheduled fax before it is due (also while it awaits approval)',
    auth: true,
    body: cancelScheduleBody,
    responses: {
      '200': answer('Cancelled; it will never be sent.', envelope(), {
        status: 1,
        message: messages.cancelled,
      }),
      '404': notFound,
      '409': refusal(
        'No longer scheduled; the message gives its state.',
        'Fax cannot be cancelled: it is no longer scheduled (current state: delivered)',
        0,
        { job_id: '…', state: 'delivered' },
      ),
      ...bodyErrors,
      ...tokenErrors,
    },
  }),
  approve: operation({
    tag: 'Manage Faxes',
    summary: 'Approve a fax awaiting approval (any token of the account)',
    auth: true,
    body: approveBody,
    responses: {
      '200': answer(
        'Approved: accepted now, or scheduled when scheduled_date is ahead.',
        envelope(jobState),
        {
          status: 1,
          message: messages.faxApproved,
          data: { job_id: '…', state: 'accepted' },
        },
      ),
      '404': notFound,
      '409': refusal('Not awaiting approval.', 'Fax is not awaiting approval (current state: rejected)'),
      ...bodyErrors,
      ...tokenErrors,
    },
  }),
  reject: operation({
    tag: 'Manage Faxes',
    summary: 'Reject a fax awaiting approval: it ends rejected and is never sent',
    auth: true,
    body: rejectBody,
    responses: {
      '200': answer('Rejected.', envelope(jobState), {
        status: 1,
        message: messages.faxRejected,
        data: { job_id: '…', state: 'rejected' },
      }),
      '404': notFound,
      '409': refusal('Not awaiting approval.', 'Fax is not awaiting approval (current state: accepted)'),
      ...bodyErrors,
      ...tokenErrors,
    },
  }),
  list: operation({
    tag: 'Manage Faxes',
    summary: 'List faxes, newest first (filter by state, e.g. scheduled or awaiting_approval)',
    auth: true,
    description:
      'Filters combine (AND) and work with the cursor: a cursor is bound to the filters it was issued with (another filter → 422). Dates are ISO 8601 with an offset; created_from is inclusive, created_to exclusive.',
    querystring: z.object({
      ...listQuery,
      state: z.enum(jobStates).optional().describe('Only faxes in this state.'),
      created_from: z.string().optional().describe('Only faxes accepted at or after this time (ISO 8601).'),
      created_to: z.string().optional().describe('Only faxes accepted before this time (ISO 8601).'),
      fax_number: z.string().optional().describe('Only faxes to this number (E.164, exact).'),
      client_reference: z.string().optional().describe('Only faxes with this client_reference (exact).'),
    }),
    responses: {
      '200': answer('A page of faxes.', envelope(z.array(faxJob)).extend({ meta: pageMeta })),
      '422': badCursor,
      ...tokenErrors,
    },
  }),
  get: operation({
    tag: 'Manage Faxes',
    summary: 'A fax with its state history',
    auth: true,
    params: z.object({ job_id: z.string() }),
    responses: {
      '200': answer(
        'The fax.',
        envelope(
          faxJob.extend({
            attempt_history: z
              .array(z.record(z.string(), z.unknown()))
              .describe(
                'One entry per call attempt; `engine`: what the fax engine reported for it (T.30 result, ECM, resolution, compression…), null when the line reports nothing of the kind.',
              ),
            history: z.array(
              z.object({
                from: z.string().nullable(),
                to: z.string(),
                attempt: z.number(),
                at: z.string(),
                detail: z.unknown(),
              }),
            ),
          }),
        ),
      ),
      '404': notFound,
      ...tokenErrors,
    },
  }),
};

const ISO_WITH_OFFSET = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$/;
type ListFilter = 'state' | 'created_from' | 'created_to' | 'fax_number' | 'client_reference';

/**
 * The list filters of GET /v1/faxes as SQL conditions (numbered from $1), each checked: a wrong
 * value is refused with 422 naming the parameter, never ignored.
 */
export function listFilters(q: Record<string, unknown>): { where: string[]; values: unknown[] } {
  const where: string[] = [];
  const values: unknown[] = [];
  const add = (cond: (n: string) => string, v: unknown) => {
    values.push(v);
    where.push(cond(`$${values.length}`));
  };
  const one = (name: ListFilter): string | undefined => {
    const v = q[name];
    if (v === undefined) return undefined;
    if (typeof v !== 'string') throw new ApiError(422, `${name}: must be given once`);
    return v;
  };
  const state = one('state');
  if (state !== undefined) {
    if (!isJobState(state)) throw new ApiError(422, `state: must be one of ${jobStates.join(', ')}`);
    add((n) => `state = ${n}`, state);
  }
  const date = (name: 'created_from' | 'created_to'): Date | undefined => {
    const v = one(name);
    if (v === undefined) return undefined;
    const t = ISO_WITH_OFFSET.test(v) ? new Date(v) : null;
    if (!t || Number.isNaN(t.getTime()))
      throw new ApiError(
        422,
        `${name}: must be an ISO 8601 timestamp with a time-zone offset, e.g. 2026-12-01T09:30:00Z`,
      );
    return t;
  };
  const from = date('created_from');
  const to = date('created_to');
  if (from && to && from >= to) throw new ApiError(422, 'created_to: must be later than created_from');
  if (from) add((n) => `created_at >= ${n}::timestamptz`, from.toISOString());
  if (to) add((n) => `created_at < ${n}::timestamptz`, to.toISOString());
  // A + not written as %2B arrives as a space (form encoding): read it as the + it was.
  const number = one('fax_number')?.replace(/^ /, '+');
  if (number !== undefined) {
    if (!E164_PATTERN.test(number))
      throw new ApiError(
        422,
        'fax_number: must be an E.164 number: +, a first digit 1-9, then 1 to 14 more digits',
      );
    add((n) => `fax_number = ${n}`, number);
  }
  const ref = one('client_reference');
  if (ref !== undefined) {
    if (ref.length < 1 || ref.length > faxOptionBounds.clientReferenceMax)
      throw new ApiError(
        422,
        `client_reference: must be 1 to ${faxOptionBounds.clientReferenceMax} characters`,
      );
    add((n) => `client_reference = ${n}`, ref);
  }
  return { where, values };
}

/** What approval and cancellation of an account's faxes run with. */
function approvalDeps(d: ApiDeps, accountId: string) {
  return {
    tx: <T>(fn: (c: import('../../db/pool.ts').Queryable) => Promise<T>) => d.tenant.tx(accountId, fn),
    scheduler: d.scheduler,
    publisher: d.publisher,
    clock: d.clock,
  };
}

/**
 * Cancels a scheduled fax (also one awaiting approval) before it is due: POST /v1/faxes/cancel-schedule
 * and the console's "Cancel". Throws the API's 404/409 refusals.
 */
export async function cancelFax(d: ApiDeps, accountId: string, jobId: string, requestId: string | null) {
  // A scheduled fax that still awaits approval holds no pg-boss job: cancelled here directly.
  if (isId(jobId) && (await cancelAwaitingScheduled(approvalDeps(d, accountId), accountId, jobId))) {
    d.metrics.scheduledCancels.inc({ outcome: 'cancelled' });
    return;
  }
  await cancelScheduled(
    { db: d.tenant.scoped(accountId), broker: d.broker, log: d.log, metrics: d.metrics },
    accountId,
    jobId,
    requestId,
  );
}

export function registerFaxRoutes(app: FastifyInstance, d: RouteDeps): void {
  const auth = d.auth;
  const approval = (accountId: string) => approvalDeps(d, accountId);

  app.post('/v1/faxes/send', { schema: contracts.send, preHandler: auth }, async (req) => {
    const body = parseBody(sendFaxBody, req.body);
    if (body.recipients !== undefined) {
      const answer = await acceptBroadcast(
        d,
        accountOf(req),
        { ...body, recipients: body.recipients },
        req.id,
        idempotencyOf(req, 'send'),
      );
      return ok(messages.processed, answer);
    }
    const jobId = await acceptSend(d, accountOf(req), body, req.id, idempotencyOf(req, 'send'));
    return ok(messages.processed, { job_id: jobId });
  });

  app.post('/v1/faxes/forward', { schema: contracts.forward, preHandler: auth }, async (req) => {
    const body = parseBody(forwardFaxBody, req.body);
    const jobId = await acceptForward(d, accountOf(req), body, req.id, idempotencyOf(req, 'forward'));
    return ok(messages.processed, { job_id: jobId });
  });

  app.post(
    '/v1/faxes/cancel-schedule',
    { schema: contracts.cancelSchedule, preHandler: auth },
    async (req) => {
      const body = parseBody(cancelScheduleBody, req.body);
      await cancelFax(d, accountOf(req), body.job_id, req.id);
      return ok(messages.cancelled);
    },
  );

  app.post('/v1/faxes/approve', { schema: contracts.approve, preHandler: auth }, async (req) => {
    const body = parseBody(approveBody, req.body);
    const accountId = accountOf(req);
    const row = await approveFax(approval(accountId), accountId, body.job_id, { by: 'api' });
    return ok(messages.faxApproved, { job_id: row.id, state: row.state });
  });

  app.post('/v1/faxes/reject', { schema: contracts.reject, preHandler: auth }, async (req) => {
    const body = parseBody(rejectBody, req.body);
    const accountId = accountOf(req);
    const row = await rejectFax(approval(accountId), accountId, body.job_id, {
      by: 'api',
      ...(body.reason !== undefined ? { reason: body.reason } : {}),
    });
    return ok(messages.faxRejected, { job_id: row.id, state: row.state });
  });

  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/faxes',
    { schema: contracts.list, preHandler: auth },
    async (req) => {
      const accountId = accountOf(req);
      const f = listFilters(req.query);
      // The cursor is bound to the filters: a cursor of one filtered list is refused on another.
      const context = `faxes|${accountId}|${JSON.stringify(f.values)}|${f.where.join(' AND ')}`;
      const r = await listPage<JobRow>(d, accountId, req.query, context, {
        from: 'fax_jobs',
        columns: '*',
        where: f.where,
        values: f.values,
        order: 'desc',
      });
      // Cover text and names are sealed in the rows: opened as GET /v1/faxes/{id} opens them.
      const rows = await d.tenant.tx(accountId, (c) => openJobRows(c, r.rows));
      return { ...ok(messages.faxesListed, rows.map(jobView)), meta: r.meta };
    },
  );

  app.get<{ Params: { job_id: string } }>(
    '/v1/faxes/:job_id',
    { schema: contracts.get, preHandler: auth },
    async (req) => {
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
    },
  );
}
