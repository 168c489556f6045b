// Webhook endpoints of the caller's account, their delivery log, and /asyncapi.json.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { Clock } from '../../clock.ts';
import type { Pool } from '../../db/pool.ts';
import { isId } from '../../domain/ids.ts';
import { asyncApiDocument } from '../../events/asyncapi.ts';
import { eventTypes } from '../../events/types.ts';
import { literalAddressRefusal } from '../../webhooks/address.ts';
import {
  createEndpoint,
  deleteEndpoint,
  type EndpointRow,
  getEndpoint,
  listDeliveries,
  listEndpoints,
} from '../../webhooks/repo.ts';
import { accountOf, requireToken } from '../auth-hook.ts';
import { ApiError, ok } from '../envelope.ts';
import { parseBody } from '../validate.ts';

export const webhookBody = z.object({
  url: z
    .string({ message: 'is required' })
    .max(2048, 'is longer than 2048 characters')
    .refine((s) => {
      try {
        const u = new URL(s);
        return (u.protocol === 'https:' || u.protocol === 'http:') && !u.username && !u.password;
      } catch {
        return false;
      }
    }, 'must be an http or https URL without credentials'),
  event_types: z
    .array(z.enum(eventTypes, { message: `must be one of ${eventTypes.join(', ')}` }))
    .min(1, 'must have at least 1 event type')
    .optional(),
});

const NOT_FOUND = 'Webhook not found';

function view(e: EndpointRow) {
  return { webhook_id: e.id, url: e.url, event_types: e.event_types, created_at: e.created_at.toISOString() };
}

export function registerEventRoutes(
  app: FastifyInstance,
  d: { db: Pool; clock: Clock; webhookAllow: string[]; queuePrefix: string },
): void {
  const auth = requireToken(d);
  const doc = asyncApiDocument(d.queuePrefix);
  app.get('/asyncapi.json', async () => doc);

  app.post('/v1/webhooks', { preHandler: auth }, async (req) => {
    const body = parseBody(webhookBody, req.body);
    const refusal = literalAddressRefusal(new URL(body.url), d.webhookAllow);
    if (refusal) throw new ApiError(422, refusal);
    const e = await createEndpoint(d.db, accountOf(req), body.url, body.event_types ?? null);
    // The signing secret is shown once, here.
    return ok('Webhook created', { ...view(e), secret: e.secret });
  });

  app.get('/v1/webhooks', { preHandler: auth }, async (req) => {
    const rows = await listEndpoints(d.db, accountOf(req));
    return ok('Webhooks', rows.map(view));
  });

  app.delete<{ Params: { id: string } }>('/v1/webhooks/:id', { preHandler: auth }, async (req) => {
    const id = req.params.id;
    if (!isId(id) || !(await deleteEndpoint(d.db, id, accountOf(req)))) throw new ApiError(404, NOT_FOUND);
    return ok('Webhook deleted');
  });

  app.get<{ Params: { id: string }; Querystring: { limit?: string; before?: string } }>(
    '/v1/webhooks/:id/deliveries',
    { preHandler: auth },
    async (req) => {
      const id = req.params.id;
      const e = isId(id) ? await getEndpoint(d.db, id, accountOf(req)) : null;
      if (!e) throw new ApiError(404, NOT_FOUND);
      const limit = req.query.limit === undefined ? 50 : Number(req.query.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
        throw new ApiError(422, 'limit: must be an integer from 1 to 1000');
      const before = req.query.before;
      if (before !== undefined && !/^\d{1,18}$/.test(before))
        throw new ApiError(422, 'before: must be a delivery_id from a previous page');
      const rows = await listDeliveries(d.db, e.id, limit, before ?? null);
      return ok('Webhook deliveries', {
        webhook: view(e),
        deliveries: rows,
        meta: { limit, next_before: rows.length === limit ? (rows.at(-1)?.delivery_id ?? null) : null },
      });
    },
  );
}
