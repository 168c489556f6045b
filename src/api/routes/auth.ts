import type { FastifyInstance } from 'fastify';
import { issueToken } from '../../auth/service.ts';
import type { Clock } from '../../clock.ts';
import type { Queryable } from '../../db/pool.ts';
import { ApiError, messages, ok } from '../envelope.ts';
import { authBody } from '../schemas.ts';
import { parseBody } from '../validate.ts';

export function registerAuthRoutes(app: FastifyInstance, d: { db: Queryable; clock: Clock }): void {
  app.post('/v1/auth', async (req) => {
    const body = parseBody(authBody, req.body);
    const token = await issueToken(d.db, d.clock, body.api_secret_key);
    if (!token) throw new ApiError(401, messages.keyInvalid);
    return ok(messages.tokenGenerated, token);
  });
}
