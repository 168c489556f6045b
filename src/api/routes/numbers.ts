import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { accountOf } from '../auth-hook.ts';
import { parseLimit } from '../cursor.ts';
import { ApiError, messages, ok } from '../../domain/envelope.ts';
import { answer, badCursor, envelope, listQuery, operation, pageMeta, tokenErrors } from '../openapi.ts';
import { page } from '../paginate.ts';
import type { RouteDeps } from '../deps.ts';

const contract = operation({
  tag: 'Numbers',
  summary: "The account's fax numbers, oldest first",
  auth: true,
  querystring: z.object(listQuery),
  responses: {
    '200': answer(
      'A page of numbers.',
      envelope(
        z.array(
          z.object({
            id: z.string(),
            number: z.string(),
            label: z.string().nullable(),
            capabilities: z.array(z.string()),
            created_at: z.string(),
          }),
        ),
      ).extend({ meta: pageMeta }),
    ),
    '422': badCursor,
    ...tokenErrors,
  },
});

/** GET /v1/numbers — the account's fax numbers, oldest first, cursor-paginated. */
export function registerNumberRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/numbers',
    { schema: contract, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const limit = parseLimit(req.query.limit);
      const context = `numbers|${accountId}`;
      const raw = req.query.cursor;
      if (raw !== undefined && typeof raw !== 'string') throw new ApiError(422, 'cursor: must be given once');
      const cursor = raw ? d.cursors.decode(raw, context) : null;
      const r = await d.tenant.tx(accountId, (c) =>
        page<{ id: string }>(c, d.cursors, context, {
          from: 'numbers',
          columns: `id, number, label, capabilities,
          to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`,
          where: [],
          values: [],
          order: 'asc',
          limit,
          cursor,
        }),
      );
      return { ...ok(messages.numbersListed, r.rows), meta: r.meta };
    },
  );
}
