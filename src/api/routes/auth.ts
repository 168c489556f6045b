import type { FastifyInstance } from 'fastify';
import { addressKey, type FailureLimiter } from '../../auth/failures.ts';
import { hashSecret } from '../../auth/keys.ts';
import { issueToken } from '../../auth/service.ts';
import type { Clock } from '../../clock.ts';
import { z } from 'zod';
import { ApiError, messages, ok } from '../../domain/envelope.ts';
import { answer, bodyErrors, envelope, errorEnvelope, operation, refusal } from '../openapi.ts';
import { authBody } from '../../domain/schemas.ts';
import type { TenantDb } from '../../db/tenant-db.ts';
import { parseBody } from '../../domain/validate.ts';

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

const contract = operation({
  tag: 'Authentication',
  summary: 'Exchange an API key for an access token (86,400 s)',
  auth: false,
  body: authBody,
  responses: {
    '200': answer(
      'Token issued.',
      envelope(
        z.object({ access_token: z.string(), token_type: z.literal('Bearer'), expires_in: z.literal(86400) }),
      ),
      {
        status: 1,
        message: messages.tokenGenerated,
        data: { access_token: 'fxl_at_…', token_type: 'Bearer', expires_in: 86400 },
      },
    ),
    '401': refusal('Unknown or revoked API key.', messages.keyInvalid),
    '429': answer(
      'Too many failed attempts from this address or with this key; wait `Retry-After` seconds (also in `data.retry_after`).',
      errorEnvelope,
      {
        status: 0,
        message: 'Too many failed authentication attempts from this address; retry after 15 s',
        data: { retry_after: 15 },
      },
      { 'Retry-After': 'Seconds to wait.' },
    ),
    ...bodyErrors,
  },
});

export function registerAuthRoutes(
  app: FastifyInstance,
  d: { tenant: TenantDb; clock: Clock; authLimits: AuthLimits },
): void {
  const { perAddress, perKey, maxTokensPerKey } = d.authLimits;
  app.post('/v1/auth', { schema: contract }, async (req) => {
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
