// API keys of the caller's account at /v1/api-keys: create (the secret shown once), list, revoke.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { apiKeyCreateBody, createKey, keyMessages, listKeys, revokeKeyOf } from '../../accounts/api-keys.ts';
import { accountOf } from '../auth-hook.ts';
import { ok } from '../../domain/envelope.ts';
import { answer, bodyErrors, envelope, operation, refusal, tokenErrors } from '../openapi.ts';
import type { RouteDeps } from '../deps.ts';
import { parseBody } from '../../domain/validate.ts';

const apiKey = z.object({
  id: z.string(),
  name: z.string().nullable(),
  key_prefix: z.string().describe('The first characters of the key, to tell keys apart.'),
  created_at: z.string(),
  last_used_at: z
    .string()
    .nullable()
    .describe('When the key was last exchanged for a token (POST /v1/auth).'),
});

const contracts = {
  create: operation({
    tag: 'Workspace',
    summary: 'Create an API key; its secret is shown once, in this answer',
    auth: true,
    body: apiKeyCreateBody,
    responses: {
      '200': answer(
        'Created. `api_key` is the secret: it is stored only as a hash and never shown again.',
        envelope(apiKey.extend({ api_key: z.string() })),
      ),
      ...bodyErrors,
      '422': refusal(
        'name invalid, or the account holds API_KEYS_PER_ACCOUNT active keys already.',
        'API key limit reached: an account may have at most 20 active keys; revoke one first',
      ),
      ...tokenErrors,
    },
  }),
  list: operation({
    tag: 'Workspace',
    summary: "The account's active API keys (never their secrets)",
    auth: true,
    responses: { '200': answer('The active keys, oldest first.', envelope(z.array(apiKey))), ...tokenErrors },
  }),
  revoke: operation({
    tag: 'Workspace',
    summary: 'Revoke an API key and every access token issued from it',
    description:
      'Takes effect on the next request of any of its tokens. A key may revoke itself while another active key remains; the last active key cannot be revoked (409).',
    auth: true,
    params: z.object({ id: z.string() }),
    responses: {
      '200': answer('Revoked.', envelope(), { status: 1, message: keyMessages.revoked }),
      '404': refusal(
        "No active key with this id in this account (another account's ids answer the same).",
        keyMessages.notFound,
      ),
      '409': refusal('It is the last active key of the account.', keyMessages.lastKey),
      ...tokenErrors,
    },
  }),
};

export function registerApiKeyRoutes(app: FastifyInstance, d: RouteDeps): void {
  const max = d.accountLimits.api_keys;
  app.post('/v1/api-keys', { schema: contracts.create, preHandler: d.auth }, async (req) => {
    const body = parseBody(apiKeyCreateBody, req.body);
    const accountId = accountOf(req);
    const key = await d.tenant.tx(accountId, (c) => createKey(c, accountId, body.name ?? null, max));
    return ok(keyMessages.created, key);
  });

  app.get('/v1/api-keys', { schema: contracts.list, preHandler: d.auth }, async (req) => {
    const accountId = accountOf(req);
    return ok(keyMessages.listed, await d.tenant.tx(accountId, (c) => listKeys(c, accountId)));
  });

  app.delete<{ Params: { id: string } }>(
    '/v1/api-keys/:id',
    { schema: contracts.revoke, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      await d.tenant.tx(accountId, (c) => revokeKeyOf(c, accountId, req.params.id));
      return ok(keyMessages.revoked);
    },
  );
}
