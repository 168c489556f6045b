import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { NUMBER_COLUMNS, numberMessages, numberUpdateBody, updateNumber } from '../../accounts/numbers.ts';
import { accountOf } from '../auth-hook.ts';
import { ApiError, messages, ok } from '../../domain/envelope.ts';
import {
  answer,
  badCursor,
  bodyErrors,
  envelope,
  listQuery,
  operation,
  pageMeta,
  refusal,
  tokenErrors,
} from '../openapi.ts';
import { listPage } from '../paginate.ts';
import type { RouteDeps } from '../deps.ts';
import { parseBody } from '../../domain/validate.ts';

const number = z.object({
  id: z.string(),
  number: z.string(),
  label: z.string().nullable(),
  station_id: z
    .string()
    .nullable()
    .describe('T.30 TSI/CSID shown to the remote fax machine; null: the number itself.'),
  receive: z.boolean().describe('Whether faxes to this number are received for the account.'),
  capabilities: z.array(z.string()),
  email_to: z.array(z.string()).describe('Fax to email: who gets what this number receives (docs/mail.md).'),
  email_attach: z.enum(['pdf', 'link', 'none']).describe('pdf, link or none: what that mail carries.'),
  created_at: z.string(),
});

const contract = operation({
  tag: 'Numbers',
  summary: "The account's fax numbers, oldest first",
  auth: true,
  querystring: z.object(listQuery),
  responses: {
    '200': answer('A page of numbers.', envelope(z.array(number)).extend({ meta: pageMeta })),
    '422': badCursor,
    ...tokenErrors,
  },
});

const updateContract = operation({
  tag: 'Numbers',
  summary: "Change a number's label, station id, receiving flag or fax-to-email forwarding",
  description:
    'Numbers are assigned and released by the operator (admin CLI add-number / remove-number); the customer changes only these fields. email_to and email_attach forward what the number receives by mail (docs/mail.md).',
  auth: true,
  params: z.object({ id: z.string().describe('id of the number in GET /v1/numbers.') }),
  body: numberUpdateBody,
  responses: {
    '200': answer('Updated.', envelope(number)),
    '404': refusal(
      "No such number in this account (another account's ids answer the same).",
      numberMessages.notFound,
    ),
    ...bodyErrors,
    '422': refusal(
      'A field is invalid (the message names it), none of the three was given, or receive: true on a number without fax_receive.',
      'station_id: must be 1 to 20 characters, each a digit, a space or + (T.30 TSI/CSID)',
    ),
    ...tokenErrors,
  },
});

/** GET /v1/numbers — the account's fax numbers, oldest first, cursor-paginated; PATCH one. */
export function registerNumberRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/numbers',
    { schema: contract, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const context = `numbers|${accountId}`;
      const r = await listPage<{ id: string }>(d, accountId, req.query, context, {
        from: 'numbers',
        columns: NUMBER_COLUMNS,
        where: [],
        values: [],
        order: 'asc',
      });
      return { ...ok(messages.numbersListed, r.rows), meta: r.meta };
    },
  );

  app.patch<{ Params: { id: string } }>(
    '/v1/numbers/:id',
    { schema: updateContract, preHandler: d.auth },
    async (req) => {
      const patch = parseBody(numberUpdateBody, req.body);
      const row = await d.tenant.tx(accountOf(req), (c) => updateNumber(c, req.params.id, patch));
      if (!row) throw new ApiError(404, numberMessages.notFound);
      return ok(numberMessages.updated, row);
    },
  );
}
