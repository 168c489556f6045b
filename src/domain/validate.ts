import type { z } from 'zod';
import { ApiError } from './envelope.ts';
import { describeIssues, textNotStored, unstorableText } from './schemas.ts';

/** Parses a JSON body with a schema; a failure (or text PostgreSQL cannot store) is 422 naming the field. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new ApiError(400, 'Request body must be a JSON object');
  // NUL and lone surrogates anywhere in the body: PostgreSQL would refuse them later, as a 500.
  const text = textNotStored.has(schema) ? null : unstorableText(body);
  if (text) throw new ApiError(422, text);
  const r = schema.safeParse(body);
  if (!r.success) throw new ApiError(422, describeIssues(r.error, body));
  return r.data;
}
