// Page sizes of the customer API's lists (customer-api.md, "Pagination meta").
import { ApiError } from './envelope.ts';

export const MAX_LIMIT = 1000;
export const DEFAULT_LIMIT = 50;

/**
 * `limit` of a list request: default 50; above 1000 it is clamped to 1000 (meta.limit says what
 * was applied); anything that is not an integer of at least 1 is refused.
 */
export function parseLimit(raw: unknown): number {
  if (raw === undefined || raw === '') return DEFAULT_LIMIT;
  if (typeof raw !== 'string' || !/^\d{1,9}$/.test(raw) || Number(raw) < 1)
    throw new ApiError(
      422,
      `limit: must be a whole number of at least 1 (a page holds at most ${MAX_LIMIT})`,
    );
  return Math.min(Number(raw), MAX_LIMIT);
}
