import type { FastifyInstance } from 'fastify';
import { issueToken } from '../../auth/service.ts';
import type { Clock } from '../../clock.ts';
import { ApiError, messages, ok } from '../envelope.ts';
import { authBody } from '../schemas.ts';
import type { TenantDb } from '../tenant-db.ts';
import { parseBody } from '../validate.ts';

export function registerAuthRoutes(app: FastifyInstance, d: { tenant: TenantDb; clock: Clock }): void {
  app.post('/v1/auth', async (req) => {
    const body = parseBody(authBody, req.body);
    const token = await issueToken(d.tenant.pool, d.clock, body.api_secret_key);
    if (!token) throw new ApiError(401, messages.keyInvalid);
    return ok(messages.tokenGenerated, token);
  });
}
