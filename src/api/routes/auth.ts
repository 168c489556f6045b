import type { FastifyInstance } from 'fastify';
import { addressKey, type FailureLimiter } from '../../auth/failures.ts';
import { hashSecret } from '../../auth/keys.ts';
import { issueToken } from '../../auth/service.ts';
import type { Clock } from '../../clock.ts';
import { ApiError, messages, ok } from '../envelope.ts';
import { authBody } from '../schemas.ts';
import type { TenantDb } from '../tenant-db.ts';
import { parseBody } from '../validate.ts';

/** Failed-attempt limits of POST /v1/auth and the live-token cap per key. */
export interface AuthLimits {
  perAddress: FailureLimiter;
  perKey: FailureLimiter;
  maxTokensPerKey: number;
}

function tooMany(what: string, retryAfter: number): ApiError {
  return new ApiError(429, `Too many failed authentication attempts ${what}; retry after ${retryAfter} s`, {
    data: { retry_after: retryAfter },
    headers: { 'retry-after': String(retryAfter) },
  });
}

export function registerAuthRoutes(
  app: FastifyInstance,
  d: { tenant: TenantDb; clock: Clock; authLimits: AuthLimits },
): void {
  const { perAddress, perKey, maxTokensPerKey } = d.authLimits;
  app.post('/v1/auth', async (req) => {
    // Refused before the key is looked at: a blocked address learns nothing, not even from a right key.
    const addr = addressKey(req.ip);
    const wait = perAddress.retryAfter(addr);
    if (wait > 0) throw tooMany('from this address', wait);
    let body;
    try {
      body = parseBody(authBody, req.body);
    } catch (err) {
      perAddress.fail(addr);
      throw err;
    }
    const key = hashSecret(body.api_secret_key).toString('base64url');
    const keyWait = perKey.retryAfter(key);
    if (keyWait > 0) throw tooMany('with this API key', keyWait);
    const token = await issueToken(d.tenant.pool, d.clock, body.api_secret_key, maxTokensPerKey);
    if (!token) {
      perAddress.fail(addr);
      perKey.fail(key);
      throw new ApiError(401, messages.keyInvalid);
    }
    return ok(messages.tokenGenerated, token);
  });
}
