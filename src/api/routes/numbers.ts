import type { FastifyInstance } from 'fastify';
import { accountOf } from '../auth-hook.ts';
import { parseLimit } from '../cursor.ts';
import { ApiError, messages, ok } from '../envelope.ts';
import { page } from '../paginate.ts';
import type { RouteDeps } from '../server.ts';

/** GET /v1/numbers — the account's fax numbers, oldest first, cursor-paginated. */
export function registerNumberRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.get<{ Querystring: Record<string, unknown> }>('/v1/numbers', { preHandler: d.auth }, async (req) => {
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
  });
}
