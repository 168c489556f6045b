import type { z } from 'zod';
import { ApiError } from './envelope.ts';
import { describeIssues } from './schemas.ts';

/** Parses a JSON body with a schema; a failure is 422 naming the field and the reason. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new ApiError(400, 'Request body must be a JSON object');
  const r = schema.safeParse(body);
  if (!r.success) throw new ApiError(422, describeIssues(r.error, body));
  return r.data;
}
