// Webhook endpoints of the caller's account, their delivery log, and /asyncapi.json.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Clock } from '../../clock.ts';
import { isId } from '../../domain/ids.ts';
import { asyncApiDocument } from '../../events/asyncapi.ts';
import { eventTypes } from '../../events/types.ts';
import { literalAddressRefusal } from '../../webhooks/address.ts';
import {
  createEndpointWithinCap,
  deleteEndpoint,
  type EndpointRow,
  getEndpoint,
  listDeliveries,
  listEndpoints,
} from '../../webhooks/repo.ts';
import { accountOf, requireToken } from '../auth-hook.ts';
import { ApiError, ok } from '../../domain/envelope.ts';
import { answer, bodyErrors, envelope, internal, operation, refusal, tokenErrors } from '../openapi.ts';
import type { RateLimiter } from '../rate-limit.ts';
import type { TenantDb } from '../../db/tenant-db.ts';
import { strict } from '../../domain/schemas.ts';
import { parseBody } from '../../domain/validate.ts';

export const webhookBody = strict({
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

const webhook = z.object({
  webhook_id: z.string(),
  url: z.string(),
  event_types: z.array(z.enum(eventTypes)).nullable().describe('null: every event type.'),
  created_at: z.string(),
  paused_until: z
    .string()
    .nullable()
    .describe('Set while deliveries wait after attempts in a row without an answer.'),
});
const webhookParams = z.object({ id: z.string() });
const notFound = refusal('No such webhook in this account.', NOT_FOUND);

const contracts = {
  create: operation({
    tag: 'Workspace',
    summary: 'Add a webhook endpoint; its signing secret is shown once, here',
    auth: true,
    body: webhookBody,
    responses: {
      '200': answer('Created.', envelope(webhook.extend({ secret: z.string() }))),
      ...bodyErrors,
      '422': refusal(
        'Invalid url or event_types, an address refused by WEBHOOK_ALLOW, or the account holds WEBHOOK_ENDPOINTS_PER_ACCOUNT webhooks already.',
        'url: must be an http or https URL without credentials',
      ),
      ...tokenErrors,
    },
  }),
  list: operation({
    tag: 'Workspace',
    summary: "The account's webhook endpoints",
    auth: true,
    responses: {
      '200': answer('The webhooks (possibly none).', envelope(z.array(webhook))),
      ...tokenErrors,
    },
  }),
  delete: operation({
    tag: 'Workspace',
    summary: 'Delete a webhook endpoint',
    auth: true,
    params: webhookParams,
    responses: {
      '200': answer('Deleted.', envelope(), { status: 1, message: 'Webhook deleted' }),
      '404': notFound,
      ...tokenErrors,
    },
  }),
  deliveries: operation({
    tag: 'Workspace',
    summary: "A webhook's delivery log, newest first",
    auth: true,
    params: webhookParams,
    querystring: z.object({
      limit: z.number().int().min(1).max(1000).default(50).describe('Page size, 1 to 1000, default 50.'),
      cursor: z.string().optional().describe('meta.next_cursor of the previous page, unchanged.'),
    }),
    responses: {
      '200': answer(
        'A page of deliveries.',
        envelope(
          z.object({
            webhook,
            deliveries: z.array(
              z.object({
                delivery_id: z.string(),
                event_id: z.string(),
                event_type: z.string(),
                job_id: z.string(),
                sequence: z.number().int(),
                state: z.enum(['pending', 'delivered', 'failed']),
                attempts: z.number().int(),
                next_attempt_at: z.string().nullable(),
                last_status: z.number().int().nullable(),
                last_error: z.string().nullable(),
                created_at: z.string(),
                delivered_at: z.string().nullable(),
                attempt_log: z.array(
                  z.object({
                    attempt: z.number().int(),
                    at: z.string(),
                    http_status: z.number().int().nullable(),
                    error: z.string().nullable(),
                    duration_ms: z.number(),
                  }),
                ),
              }),
            ),
            meta: z.object({
              next_cursor: z.string().nullable(),
              has_more: z.boolean(),
              limit: z.number().int(),
            }),
          }),
        ),
      ),
      '404': notFound,
      '422': refusal(
        'limit out of range, or a cursor this list did not issue.',
        'limit: must be an integer from 1 to 1000',
      ),
      ...tokenErrors,
    },
  }),
};

function view(e: EndpointRow) {
  return {
    webhook_id: e.id,
    url: e.url,
    event_types: e.event_types,
    created_at: e.created_at.toISOString(),
    // Set when the endpoint's deliveries had to wait after attempts in a row without an answer;
    // cleared by the next successful delivery.
    paused_until: e.paused_until?.toISOString() ?? null,
  };
}

/**
 * Adds a webhook endpoint (POST /v1/webhooks and the console's Webhooks page): the body's rules, the
 * address allow-list (WEBHOOK_ALLOW) and the per-account cap, each refusal a 422 naming its field.
 */
export async function createWebhook(
  d: { tenant: TenantDb; webhookAllow: string[]; maxEndpoints: number },
  accountId: string,
  input: unknown,
): Promise<EndpointRow> {
  const body = parseBody(webhookBody, input);
  const refusal = literalAddressRefusal(new URL(body.url), d.webhookAllow);
  if (refusal) throw new ApiError(422, refusal);
  const e = await d.tenant.tx(accountId, (c) =>
    createEndpointWithinCap(c, accountId, body.url, body.event_types ?? null, d.maxEndpoints),
  );
  if (!e)
    throw new ApiError(
      422,
      `Webhook limit reached: an account may have at most ${d.maxEndpoints} webhooks; delete one first`,
    );
  return e;
}

/** The message of a webhook id that is not this account's (or no webhook's). */
export const webhookNotFound = NOT_FOUND;

type EventRouteDeps = {
  tenant: TenantDb;
  limiter: RateLimiter;
  clock: Clock;
  webhookAllow: string[];
  queuePrefix: string;
  /** WEBHOOK_ENDPOINTS_PER_ACCOUNT */
  maxEndpoints: number;
};

export function registerEventRoutes(app: FastifyInstance, d: EventRouteDeps): void {
  // In a plugin, like buildServer's routes: loaded after @fastify/swagger, which then documents them.
  void app.register(async (scope) => eventRoutes(scope, d));
}

function eventRoutes(app: FastifyInstance, d: EventRouteDeps): void {
  // Request handling runs as the API role with the account set per transaction (row-level security).
  const db = (req: FastifyRequest) => d.tenant.scoped(accountOf(req));
  const auth = requireToken(d);
  const doc = asyncApiDocument(d.queuePrefix);
  app.get('/asyncapi.json', { schema: internal }, async () => doc);

  app.post('/v1/webhooks', { schema: contracts.create, preHandler: auth }, async (req) => {
    const e = await createWebhook(d, accountOf(req), req.body);
    // The signing secret is shown once, here.
    return ok('Webhook created', { ...view(e), secret: e.secret });
  });

  app.get('/v1/webhooks', { schema: contracts.list, preHandler: auth }, async (req) => {
    const rows = await listEndpoints(db(req), accountOf(req));
    return ok('Webhooks', rows.map(view));
  });

  app.delete<{ Params: { id: string } }>(
    '/v1/webhooks/:id',
    { schema: contracts.delete, preHandler: auth },
    async (req) => {
      const id = req.params.id;
      if (!isId(id) || !(await deleteEndpoint(db(req), id, accountOf(req))))
        throw new ApiError(404, NOT_FOUND);
      return ok('Webhook deleted');
    },
  );

  // Cursor pagination like the customer API's lists: `limit` (default 50, at most 1000) and an
  // opaque `cursor` from the previous page's meta.next_cursor; newest deliveries first.
  app.get<{ Params: { id: string }; Querystring: { limit?: string; cursor?: string } }>(
    '/v1/webhooks/:id/deliveries',
    { schema: contracts.deliveries, preHandler: auth },
    async (req) => {
      const id = req.params.id;
      const e = isId(id) ? await getEndpoint(db(req), id, accountOf(req)) : null;
      if (!e) throw new ApiError(404, NOT_FOUND);
      const limit = req.query.limit === undefined ? 50 : Number(req.query.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
        throw new ApiError(422, 'limit: must be an integer from 1 to 1000');
      let before: string | null = null;
      if (req.query.cursor !== undefined) {
        const decoded = Buffer.from(req.query.cursor, 'base64url').toString('utf8');
        if (!/^d:\d{1,18}$/.test(decoded))
          throw new ApiError(422, 'cursor: is not a cursor from a previous page');
        before = decoded.slice(2);
      }
      const rows = await listDeliveries(db(req), e.id, limit + 1, before);
      // The endpoint is read again after its deliveries: a 2xx closes the breaker in the statement
      // that records the delivery, so a delivery seen as delivered never shows beside a pause that
      // the first read (taken before that statement committed) still held.
      const now = await getEndpoint(db(req), id, accountOf(req));
      if (!now) throw new ApiError(404, NOT_FOUND);
      const page = rows.slice(0, limit);
      const hasMore = rows.length > limit;
      const last = page.at(-1);
      return ok('Webhook deliveries', {
        webhook: view(now),
        deliveries: page,
        meta: {
          next_cursor: hasMore && last ? Buffer.from(`d:${last.delivery_id}`).toString('base64url') : null,
          has_more: hasMore,
          limit,
        },
      });
    },
  );
}
