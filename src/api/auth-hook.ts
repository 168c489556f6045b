import type { FastifyReply, FastifyRequest } from 'fastify';
import { authenticate, batchedTokenLookup } from '../auth/service.ts';
import type { Clock } from '../clock.ts';
import { ApiError, messages } from '../domain/envelope.ts';
import type { RateLimiter } from './rate-limit.ts';
import type { TenantDb } from '../db/tenant-db.ts';

/** The hooks made by requireToken: buildServer runs them in onRequest, before the body is read. */
const tokenChecks = new WeakSet<object>();

export function isTokenCheck(hook: unknown): boolean {
  return typeof hook === 'function' && tokenChecks.has(hook);
}

/**
 * The token check of protected routes: sets request.accountId or answers 401 in the envelope; then
 * takes one request from the account's rate-limit bucket (429 when empty). Routes name it as their
 * preHandler or onRequest; buildServer moves it to onRequest either way, so it runs before the body
 * is read and parsed (it reads only the Authorization header).
 */
export function requireToken(d: { tenant: TenantDb; clock: Clock; limiter: RateLimiter }) {
  const lookup = batchedTokenLookup(d.tenant.pool);
  const check = async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const r = await authenticate(lookup, d.clock, req.headers.authorization);
    if (!r.ok)
      throw new ApiError(401, messages.unauthorized, {
        status: 401,
        data: r.reason,
        headers: { 'www-authenticate': 'Bearer' },
      });
    req.accountId = r.accountId;
    req.actor = { type: 'api_key', id: r.keyId };
    d.limiter.take(r.accountId);
  };
  tokenChecks.add(check);
  return check;
}

export function accountOf(req: FastifyRequest): string {
  if (!req.accountId)
    throw new ApiError(401, messages.unauthorized, { status: 401, data: 'not authenticated' });
  return req.accountId;
}
