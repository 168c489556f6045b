// A short-lived cache of the intake's reference reads (Fax Defaults, Smart Templates, source jobs):
// a sender publishing thousands of commands for one account would otherwise repeat the same lookup
// per command. Only SELECTs are cached, by statement and values, for `ttlMs`; a change to a Fax
// Default reaches the AMQP intake at most that much later.
import type { Queryable } from '../db/pool.ts';

export function cachedReads(db: Queryable, ttlMs: number, maxEntries = 10_000): Queryable {
  const cache = new Map<string, { until: number; result: Promise<unknown> }>();
  return {
    query: ((text: string, values?: unknown[]) => {
      if (!/^\s*SELECT\b/i.test(text)) return db.query(text, values);
      const key = `${text}\u0000${JSON.stringify(values ?? [])}`;
      const now = Date.now();
      const hit = cache.get(key);
      if (hit && hit.until > now) return hit.result;
      if (cache.size >= maxEntries) cache.clear();
      const result = db.query(text, values);
      cache.set(key, { until: now + ttlMs, result });
      result.catch(() => cache.delete(key));
      return result;
    }) as Queryable['query'],
  };
}
