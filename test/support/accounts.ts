// Two seeded accounts on one started service: the usual start of a test of account-scoped
// operations (one account acts, the other's ids must behave like missing ones).
import assert from 'node:assert/strict';
import pg from 'pg';
import type { DemoSeed } from '../../src/admin/seed.ts';
import { call, seedAccount, tokenFor, type Reply } from './client.ts';
import { startService } from './harness.ts';

export interface TwoAccounts {
  s: Awaited<ReturnType<typeof startService>>;
  a: DemoSeed;
  b: DemoSeed;
  tokenA: string;
  tokenB: string;
  /** A connection as the database owner (row-level security does not apply), for checking rows. */
  owner: pg.Client;
  /** A customer-API call with a token and an optional JSON body. */
  api: (method: string, path: string, token: string, body?: unknown) => Promise<Reply>;
  close: () => Promise<void>;
}

export async function twoAccounts(
  env: Record<string, string> = {},
  o: { cover?: boolean } = {},
): Promise<TwoAccounts> {
  const s = await startService({ env });
  const a = await seedAccount(s, o);
  const b = await seedAccount(s, o);
  const owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
  await owner.connect();
  return {
    s,
    a,
    b,
    tokenA: await tokenFor(s.url, a.api_key),
    tokenB: await tokenFor(s.url, b.api_key),
    owner,
    api: (method, path, token, body) =>
      call(s.url, method, path, { token, ...(body !== undefined ? { body } : {}) }),
    close: async () => {
      await owner.end();
      await s.dropAll();
    },
  };
}

/** Asserts a refusal in the envelope: the HTTP status, a status that is not success (1), and the message. */
export function assertRefused(r: Reply, http: number, message: string | RegExp): void {
  assert.equal(r.http, http, JSON.stringify(r.body));
  assert.notEqual(r.body.status, 1, JSON.stringify(r.body));
  if (typeof message === 'string') assert.equal(r.body.message, message);
  else assert.match(r.body.message, message);
}
