// A broadcast (POST /v1/faxes/send with recipients) as a whole: its jobs with counts per state, and
// its cancellation. Another account's broadcast id answers exactly as a missing one (404).
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { CancelCommand } from '../../domain/commands.ts';
import { ApiError, messages, ok } from '../../domain/envelope.ts';
import { isId } from '../../domain/ids.ts';
import { type JobState, jobStates } from '../../domain/states.ts';
import { strict } from '../../domain/schemas.ts';
import { parseBody } from '../../domain/validate.ts';
import { type JobRow, openJobRows, transitionMany } from '../../jobs/repo.ts';
import { accountOf } from '../auth-hook.ts';
import type { RouteDeps } from '../deps.ts';
import {
  answer,
  badCursor,
  bodyErrors,
  envelope,
  faxJob,
  listQuery,
  operation,
  pageMeta,
  refusal,
  tokenErrors,
} from '../openapi.ts';
import { listPage } from '../paginate.ts';
import { jobView } from './faxes.ts';

/** States a broadcast's cancel moves to cancelled: every state before the line is dialled. */
export const CANCELLABLE: readonly JobState[] = [
  'accepted',
  'awaiting_approval',
  'scheduled',
  'preparing',
  'queued',
  'blocked',
  'retry_waiting',
];

export const cancelBroadcastBody = strict({
  broadcast_id: z.string({ message: 'is required' }).min(1, 'is required'),
});

const counts = z
  .record(z.enum(jobStates), z.number().int())
  .describe('Jobs per state (states with none are left out).');

const broadcastView = z.object({
  broadcast_id: z.string(),
  created_at: z.string(),
  recipients: z.number().int().describe('Jobs in the broadcast: one per recipient.'),
  counts,
  jobs: z.array(faxJob).describe('A page of its jobs (oldest first, a stable order); meta pages on.'),
});

const notFound = refusal(
  "No such broadcast in this account (another account's ids answer the same).",
  messages.broadcastNotFound,
);

const contracts = {
  get: operation({
    tag: 'Manage Faxes',
    summary: 'A broadcast: counts of its jobs per state, and its jobs, paged',
    auth: true,
    params: z.object({ broadcast_id: z.string() }),
    querystring: z.object(listQuery),
    responses: {
      '200': answer('The broadcast.', envelope(broadcastView).extend({ meta: pageMeta })),
      '404': notFound,
      '422': badCursor,
      ...tokenErrors,
    },
  }),
  cancel: operation({
    tag: 'Manage Faxes',
    summary: 'Cancel a broadcast: every job of it not yet on the line',
    description: `Jobs in ${CANCELLABLE.join(', ')} are cancelled (never sent); jobs being dialled or sent, and finished ones, are left as they are. The answer counts both.`,
    auth: true,
    body: cancelBroadcastBody,
    responses: {
      '200': answer(
        'Cancelled what was still waiting.',
        envelope(
          z.object({
            broadcast_id: z.string(),
            cancelled: z.number().int(),
            not_cancelled: z.number().int().describe('Jobs on the line or finished.'),
            counts,
          }),
        ),
        {
          status: 1,
          message: messages.broadcastCancelled,
          data: { broadcast_id: '…', cancelled: 198, not_cancelled: 2, counts: { cancelled: 198 } },
        },
      ),
      '404': notFound,
      '409': refusal(
        'Nothing left to cancel: every job is on the line or finished.',
        'Broadcast cannot be cancelled: none of its faxes is still waiting to be sent',
        0,
        { broadcast_id: '…', counts: { delivered: 200 } },
      ),
      ...bodyErrors,
      ...tokenErrors,
    },
  }),
};

type Queryable = import('../../db/pool.ts').Queryable;

async function countsOf(c: Queryable, broadcastId: string): Promise<Partial<Record<JobState, number>>> {
  const r = await c.query<{ state: JobState; n: number }>(
    'SELECT state, count(*)::int AS n FROM fax_jobs WHERE broadcast_id = $1 GROUP BY state ORDER BY state',
    [broadcastId],
  );
  return Object.fromEntries(r.rows.map((x) => [x.state, x.n]));
}

export function registerBroadcastRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.get<{ Params: { broadcast_id: string }; Querystring: Record<string, unknown> }>(
    '/v1/broadcasts/:broadcast_id',
    { schema: contracts.get, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const id = req.params.broadcast_id;
      const head = isId(id)
        ? await d.tenant.tx(accountId, async (c) => {
            const b = await c.query<{ id: string; created_at: Date; recipients: number }>(
              'SELECT id, created_at, recipients FROM broadcasts WHERE id = $1',
              [id],
            );
            const row = b.rows[0];
            return row ? { ...row, counts: await countsOf(c, id) } : null;
          })
        : null;
      if (!head) throw new ApiError(404, messages.broadcastNotFound);
      const page = await listPage<JobRow>(d, accountId, req.query, `broadcast|${accountId}|${id}`, {
        from: 'fax_jobs',
        columns: '*',
        where: ['broadcast_id = $1'],
        values: [id],
        order: 'asc',
      });
      // Each recipient's cover text is sealed in its row: opened as GET /v1/faxes/{id} opens it.
      const jobs = await d.tenant.tx(accountId, (c) => openJobRows(c, page.rows));
      return {
        ...ok(messages.broadcastFound, {
          broadcast_id: head.id,
          created_at: head.created_at.toISOString(),
          recipients: head.recipients,
          counts: head.counts,
          jobs: jobs.map(jobView),
        }),
        meta: page.meta,
      };
    },
  );

  app.post('/v1/broadcasts/cancel', { schema: contracts.cancel, preHandler: d.auth }, async (req) => {
    const body = parseBody(cancelBroadcastBody, req.body);
    const accountId = accountOf(req);
    const id = body.broadcast_id;
    const out = isId(id)
      ? await d.tenant.tx(accountId, async (c) => {
          const b = await c.query('SELECT 1 FROM broadcasts WHERE id = $1', [id]);
          if (b.rowCount !== 1) return null;
          const ids = await c.query<{ id: string }>(
            'SELECT id FROM fax_jobs WHERE broadcast_id = $1 AND state = ANY($2::text[])',
            [id, CANCELLABLE],
          );
          // One statement; each job moves only if it is still in a cancellable state (the fence).
          const moved = await transitionMany(
            c,
            ids.rows.map((r) => r.id),
            'cancelled',
            {
              from: CANCELLABLE,
              set: { completed_at: new Date() },
              detail: { by: 'customer', broadcast_id: id },
            },
          );
          return { moved, counts: await countsOf(c, id) };
        })
      : null;
    if (!out) throw new ApiError(404, messages.broadcastNotFound);
    const total = Object.values(out.counts).reduce((a, n) => a + n, 0);
    if (out.moved.length === 0)
      throw new ApiError(
        409,
        'Broadcast cannot be cancelled: none of its faxes is still waiting to be sent',
        {
          data: { broadcast_id: id, counts: out.counts },
        },
      );
    d.metrics.transitions.inc({ to: 'cancelled' }, out.moved.length);
    // Cleanup of the due-time jobs of scheduled faxes, as for cancel-schedule: not awaited, since
    // the faxes' state already forbids sending (a due-time job that fires finds them cancelled).
    for (const row of out.moved.filter((r) => r.from_state === 'scheduled')) {
      const cmd: CancelCommand = {
        version: 1,
        type: 'cancel',
        job_id: row.id,
        account_id: accountId,
        issued_at: new Date().toISOString(),
        request_id: req.id,
      };
      void d.broker
        .publish(d.broker.names.commands, 'cancel', cmd, { messageId: `${row.id}:cancel` })
        .catch((err: unknown) =>
          d.log.warn({ jobId: row.id, err: (err as Error).message }, 'cancel command not published'),
        );
    }
    return ok(messages.broadcastCancelled, {
      broadcast_id: id,
      cancelled: out.moved.length,
      not_cancelled: total - out.moved.length,
      counts: out.counts,
    });
  });
}
