import type { FastifyReply, FastifyRequest } from 'fastify';
import { authenticate, batchedTokenLookup } from '../auth/service.ts';
import type { Clock } from '../clock.ts';
import { ApiError, messages } from './envelope.ts';
import type { RateLimiter } from './rate-limit.ts';
import type { TenantDb } from './tenant-db.ts';

/**
 * preHandler for protected routes: sets request.accountId or answers 401 in the envelope; then
 * takes one request from the account's rate-limit bucket (429 when empty).
 */
export function requireToken(d: { tenant: TenantDb; clock: Clock; limiter: RateLimiter }) {
  const lookup = batchedTokenLookup(d.tenant.pool);
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const r = await authenticate(lookup, d.clock, req.headers.authorization);
    if (!r.ok)
      throw new ApiError(401, messages.unauthorized, {
        status: 401,
        data: r.reason,
        headers: { 'www-authenticate': 'Bearer' },
      });
    req.accountId = r.accountId;
    d.limiter.take(r.accountId);
  };
}

export function accountOf(req: FastifyRequest): string {
  if (!req.accountId)
    throw new ApiError(401, messages.unauthorized, { status: 401, data: 'not authenticated' });
  return req.accountId;
}
