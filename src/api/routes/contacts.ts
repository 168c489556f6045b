import type { FastifyInstance } from 'fastify';
import { isId } from '../../domain/ids.ts';
import { accountOf } from '../auth-hook.ts';
import { ApiError, messages, ok } from '../envelope.ts';
import type { RouteDeps } from '../server.ts';

/** POST /v1/contacts/delete — permanent; the spec answers a missing or unknown id with 422. */
export function registerContactRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.post('/v1/contacts/delete', { preHandler: d.auth }, async (req) => {
    const body = req.body;
    if (body === null || typeof body !== 'object' || Array.isArray(body))
      throw new ApiError(400, 'Request body must be a JSON object');
    const id = (body as { id?: unknown }).id;
    if (id === undefined || id === null || id === '') throw new ApiError(422, messages.contactIdRequired);
    if (typeof id !== 'string') throw new ApiError(422, 'The id field must be a string.');
    if (!isId(id)) throw new ApiError(422, messages.contactNotFound);
    const r = await d.tenant.tx(accountOf(req), (c) => c.query('DELETE FROM contacts WHERE id = $1', [id]));
    if (r.rowCount !== 1) throw new ApiError(422, messages.contactNotFound);
    return ok(messages.contactDeleted);
  });
}
