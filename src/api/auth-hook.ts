import type { FastifyReply, FastifyRequest } from 'fastify';
import { authenticate } from '../auth/service.ts';
import type { Clock } from '../clock.ts';
import type { Queryable } from '../db/pool.ts';
import { ApiError, messages } from './envelope.ts';

/** preHandler for protected routes: sets request.accountId or answers 401 in the envelope. */
export function requireToken(d: { db: Queryable; clock: Clock }) {
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const r = await authenticate(d.db, d.clock, req.headers.authorization);
    if (!r.ok)
      throw new ApiError(401, messages.unauthorized, {
        status: 401,
        data: r.reason,
        headers: { 'www-authenticate': 'Bearer' },
      });
    req.accountId = r.accountId;
  };
}

export function accountOf(req: FastifyRequest): string {
  if (!req.accountId)
    throw new ApiError(401, messages.unauthorized, { status: 401, data: 'not authenticated' });
  return req.accountId;
}
