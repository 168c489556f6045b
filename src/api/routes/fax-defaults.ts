// /v1/fax-defaults: the account's Fax Defaults (the template_id of a send). Create, list (cursor
// pages, oldest first), get, update, delete. Another account's id, a made-up one and a deleted one
// are all answered 404 with the same message; the logic is in src/accounts/fax-defaults.ts.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import {
  createFaxDefault,
  deleteFaxDefault,
  FAX_DEFAULT_VIEW_COLUMNS,
  faxDefaultCreateBody,
  faxDefaultUpdateBody,
  faxDefaultView,
  getFaxDefault,
  updateFaxDefault,
} from '../../accounts/fax-defaults.ts';
import { accountOf } from '../auth-hook.ts';
import { ApiError, ok } from '../../domain/envelope.ts';
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

export const faxDefaultMessages = {
  created: 'Fax Default created successfully',
  listed: 'Fax Defaults retrieved successfully',
  found: 'Fax Default retrieved successfully',
  updated: 'Fax Default updated successfully',
  deleted: 'Fax Default has been deleted successfully.',
  notFound: 'Fax Default not found',
} as const;
const m = faxDefaultMessages;

const params = z.object({ id: z.string().describe('The Fax Default id (the template_id of a send).') });
const notFound = refusal(
  'No such Fax Default in this account (also: deleted, or of another account).',
  m.notFound,
);
const invalid = (example: string) =>
  refusal(
    'A field is missing, invalid or unknown, or holds text PostgreSQL cannot store: the message names it and says why.',
    example,
  );

const contracts = {
  create: operation({
    tag: 'Templates',
    summary: 'Create a Fax Default (sender identity, quality and cover page)',
    description:
      "With is_default true it becomes the account's default Fax Default (used by a send without template_id) and the previous default stops being one.",
    auth: true,
    body: faxDefaultCreateBody,
    responses: {
      '200': answer('Created.', envelope(faxDefaultView)),
      ...bodyErrors,
      '422': refusal(
        'A field is missing, invalid or unknown, or holds text PostgreSQL cannot store (the message names it and says why); or the account holds FAX_DEFAULTS_PER_ACCOUNT Fax Defaults already.',
        'fax_as: must be an E.164 number: +, a first digit 1-9, then 1 to 14 more digits',
      ),
      ...tokenErrors,
    },
  }),
  list: operation({
    tag: 'Templates',
    summary: "The account's Fax Defaults, oldest first",
    auth: true,
    querystring: z.object(listQuery),
    responses: {
      '200': answer('A page of Fax Defaults.', envelope(z.array(faxDefaultView)).extend({ meta: pageMeta })),
      '422': badCursor,
      ...tokenErrors,
    },
  }),
  get: operation({
    tag: 'Templates',
    summary: 'One Fax Default',
    auth: true,
    params,
    responses: {
      '200': answer('The Fax Default.', envelope(faxDefaultView)),
      '404': notFound,
      ...tokenErrors,
    },
  }),
  update: operation({
    tag: 'Templates',
    summary: 'Change fields of a Fax Default, or make it the default',
    description:
      'Only the fields given change; null clears an optional text field. Faxes already accepted keep the values they were accepted with; later sends and previews use the new ones at once.',
    auth: true,
    params,
    body: faxDefaultUpdateBody,
    responses: {
      '200': answer('Updated: the Fax Default as it is now.', envelope(faxDefaultView)),
      ...bodyErrors,
      '404': notFound,
      '422': invalid('sender_email: must be an e-mail address such as name@example.org'),
      ...tokenErrors,
    },
  }),
  delete: operation({
    tag: 'Templates',
    summary: 'Delete a Fax Default',
    description:
      'A send naming it is refused afterwards (422, as for an unknown template_id); if it was the default, the account has none. Faxes already accepted keep its values.',
    auth: true,
    params,
    responses: {
      '200': answer('Deleted.', envelope(), { status: 1, message: m.deleted }),
      '404': notFound,
      ...tokenErrors,
    },
  }),
};

export function registerFaxDefaultRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.post('/v1/fax-defaults', { schema: contracts.create, preHandler: d.auth }, async (req) => {
    const body = parseBody(faxDefaultCreateBody, req.body);
    const accountId = accountOf(req);
    const row = await d.tenant.tx(accountId, (c) =>
      createFaxDefault(c, accountId, body, d.accountLimits.fax_defaults, d.defaultCallerId),
    );
    return ok(m.created, row);
  });

  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/fax-defaults',
    { schema: contracts.list, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const context = `fax-defaults|${accountId}`;
      const r = await listPage<{ id: string }>(d, accountId, req.query, context, {
        from: 'fax_defaults',
        columns: FAX_DEFAULT_VIEW_COLUMNS,
        where: ['account_id = $1'],
        values: [accountId],
        order: 'asc',
      });
      return { ...ok(m.listed, r.rows), meta: r.meta };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/fax-defaults/:id',
    { schema: contracts.get, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const row = await d.tenant.tx(accountId, (c) => getFaxDefault(c, accountId, req.params.id));
      if (!row) throw new ApiError(404, m.notFound);
      return ok(m.found, row);
    },
  );

  app.patch<{ Params: { id: string } }>(
    '/v1/fax-defaults/:id',
    { schema: contracts.update, preHandler: d.auth },
    async (req) => {
      const body = parseBody(faxDefaultUpdateBody, req.body);
      const accountId = accountOf(req);
      const row = await d.tenant.tx(accountId, (c) =>
        updateFaxDefault(c, accountId, req.params.id, body, d.defaultCallerId),
      );
      if (!row) throw new ApiError(404, m.notFound);
      return ok(m.updated, row);
    },
  );

  app.delete<{ Params: { id: string } }>(
    '/v1/fax-defaults/:id',
    { schema: contracts.delete, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const gone = await d.tenant.tx(accountId, (c) => deleteFaxDefault(c, accountId, req.params.id));
      if (!gone) throw new ApiError(404, m.notFound);
      return ok(m.deleted);
    },
  );
}
