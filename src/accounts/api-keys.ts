// An account's API keys over the API: create (the secret shown once), list, revoke. Run inside a
// transaction scoped to the account (TenantDb): the API role reads every column of api_keys but the
// hash (migration 015), so a listing can never leak one.
import { z } from 'zod';
import { ApiError } from '../domain/envelope.ts';
import { displayPrefix, hashSecret, newApiKey } from '../auth/keys.ts';
import type { Queryable } from '../db/pool.ts';
import { isId } from '../domain/ids.ts';

export const apiKeyCreateBody = z
  .object({
    name: z
      .string({ message: 'must be a string' })
      .trim()
      .min(1, 'must not be empty')
      .max(100, 'is longer than 100 characters')
      .optional()
      .describe('A label to tell keys apart (e.g. "billing server").'),
  })
  .strict();

export interface ApiKeyView {
  id: string;
  name: string | null;
  key_prefix: string;
  created_at: string;
  last_used_at: string | null;
}

const COLUMNS = `id, name, key_prefix,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at,
  to_char(last_used_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS last_used_at`;

export const keyMessages = {
  created: 'API key created successfully; its secret is shown only in this answer',
  listed: 'API keys retrieved successfully',
  revoked: 'API key has been revoked.',
  notFound: 'API key not found',
  lastKey:
    'The last active API key of an account cannot be revoked: create another key first (POST /v1/api-keys)',
} as const;

/** Serialises key changes of one account (the cap and the last-key rule read, then write). */
async function lockKeys(c: Queryable, accountId: string): Promise<void> {
  await c.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 7301019))', [`api_keys:${accountId}`]);
}

async function activeCount(c: Queryable, accountId: string): Promise<number> {
  const r = await c.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL',
    [accountId],
  );
  return r.rows[0]!.n;
}

/** A new key of the account, at most `max` active keys; the secret is returned here only. */
export async function createKey(
  c: Queryable,
  accountId: string,
  name: string | null,
  max: number,
): Promise<ApiKeyView & { api_key: string }> {
  await lockKeys(c, accountId);
  if ((await activeCount(c, accountId)) >= max)
    throw new ApiError(
      422,
      `API key limit reached: an account may have at most ${max} active keys; revoke one first`,
    );
  const key = newApiKey();
  const r = await c.query<ApiKeyView>(
    `INSERT INTO api_keys (account_id, key_prefix, key_hash, name) VALUES ($1, $2, $3, $4)
     RETURNING ${COLUMNS}`,
    [accountId, displayPrefix(key), hashSecret(key), name],
  );
  return { ...r.rows[0]!, api_key: key };
}

/** The account's active keys, oldest first (at most API_KEYS_PER_ACCOUNT: no pages needed). */
export async function listKeys(c: Queryable, accountId: string): Promise<ApiKeyView[]> {
  const r = await c.query<ApiKeyView>(
    `SELECT ${COLUMNS} FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL ORDER BY created_at, id`,
    [accountId],
  );
  return r.rows;
}

/**
 * Revokes a key of the account: from the next request on, its access tokens are refused (the token
 * check reads the key's revoked_at on every request). The last active key cannot be revoked (409), so
 * an account can never lock itself out; a key may revoke itself when another active key remains.
 */
export async function revokeKeyOf(c: Queryable, accountId: string, id: string): Promise<void> {
  if (!isId(id)) throw new ApiError(404, keyMessages.notFound);
  await lockKeys(c, accountId);
  const k = await c.query('SELECT 1 FROM api_keys WHERE id = $1 AND revoked_at IS NULL', [id]);
  if (k.rowCount !== 1) throw new ApiError(404, keyMessages.notFound);
  if ((await activeCount(c, accountId)) <= 1) throw new ApiError(409, keyMessages.lastKey);
  await c.query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [id]);
  // Revoked keys are kept (a token of one is answered "revoked"), the newest KEEP_REVOKED of them:
  // creating and revoking keys in a loop must not grow the table without bound.
  await c.query(
    `DELETE FROM api_keys WHERE id IN (
       SELECT id FROM api_keys WHERE account_id = $1 AND revoked_at IS NOT NULL
        ORDER BY revoked_at DESC, id OFFSET $2)`,
    [accountId, KEEP_REVOKED],
  );
}

/** Revoked keys of an account kept after a revocation over the API. */
export const KEEP_REVOKED = 100;
