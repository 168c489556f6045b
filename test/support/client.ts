// A tiny customer-API client for tests: real HTTP against the started service.
import pg from 'pg';
import { seedDemo, type DemoSeed } from '../../src/admin/seed.ts';
import { FaxlineClient, FaxlineError } from '../../src/client/index.ts';
import type { TestService } from './harness.ts';

export interface Reply {
  http: number;
  body: { status: number; message: string; data?: any; meta?: any };
  headers: Headers;
}

export async function call(
  base: string,
  method: string,
  path: string,
  o: { token?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { ...o.headers };
  if (o.token) headers.authorization = `Bearer ${o.token}`;
  let payload: string | undefined;
  if (o.raw !== undefined) payload = o.raw;
  else if (o.body !== undefined) payload = JSON.stringify(o.body);
  if (payload !== undefined && !headers['content-type']) headers['content-type'] = 'application/json';
  const res = await fetch(base + path, {
    method,
    headers,
    ...(payload !== undefined ? { body: payload } : {}),
  });
  const text = await res.text();
  let body: Reply['body'];
  try {
    body = JSON.parse(text);
  } catch {
    body = { status: -1, message: `non-JSON body: ${text.slice(0, 200)}` };
  }
  return { http: res.status, body, headers: res.headers };
}

/**
 * A demo account seeded straight into the service's database. Its Fax Defaults draw no cover page
 * unless `cover` is set: tests about other things count the pages and events of a one-page
 * document (test/cover*.test.ts and test/render*.test.ts test covers).
 */
export async function seedAccount(s: TestService, o: { cover?: boolean } = {}): Promise<DemoSeed> {
  const c = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
  await c.connect();
  try {
    await c.query('BEGIN');
    const seed = await seedDemo(c);
    if (!o.cover)
      await c.query('UPDATE fax_defaults SET cover_page = false WHERE account_id = $1', [seed.account_id]);
    await c.query('COMMIT');
    return seed;
  } finally {
    await c.end();
  }
}

/** An access token for `apiKey`, through faxline/client (no retries: a refusal is thrown at once). */
export async function tokenFor(base: string, apiKey: string): Promise<string> {
  try {
    return await new FaxlineClient({ baseUrl: base, apiKey, retries: 0 }).accessToken();
  } catch (err) {
    if (err instanceof FaxlineError)
      throw new Error(`auth failed: ${err.http} ${err.message}`, { cause: err });
    throw err;
  }
}
