import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import {
  CONTACT_COLUMNS,
  contactCreateBody,
  contactMessages,
  contactSearch,
  contactUpdateBody,
  createContact,
  deleteContact,
  getContact,
  updateContact,
  type ContactRow,
} from '../../accounts/contacts.ts';
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
import { contactDeleteBody } from '../../domain/schemas.ts';
import type { RouteDeps } from '../deps.ts';
import { parseBody } from '../../domain/validate.ts';

const contact = z.object({
  id: z.string().describe('The encrypted contact ID (as POST /v1/contacts/delete takes it).'),
  name: z.string(),
  fax_number: z.string().nullable(),
  company: z.string().nullable(),
  created_at: z.string(),
});
const contactParams = z.object({ id: z.string().describe('The encrypted contact ID.') });
const NOT_FOUND_404 = refusal(
  "No such contact in this account (another account's contact ids answer the same).",
  messages.contactNotFound,
);
const duplicate = refusal(
  'Another contact of this account has this fax_number (`data.id` is its id).',
  'fax_number: a contact with this fax number exists already in your account',
  0,
  { id: 'bX9w…' },
);

const contracts = {
  delete: operation({
    tag: 'Contacts',
    summary: 'Delete a contact permanently',
    auth: true,
    body: contactDeleteBody,
    responses: {
      '200': answer('Deleted.', envelope(), { status: 1, message: messages.contactDeleted }),
      '422': refusal(
        'id missing (`The id field is required.`), or no such contact in this account.',
        messages.contactNotFound,
      ),
      '400': bodyErrors['400'],
      '413': bodyErrors['413'],
      '415': bodyErrors['415'],
      ...tokenErrors,
    },
  }),
  create: operation({
    tag: 'Contacts',
    summary: 'Create a contact',
    description:
      'One contact per fax number in an account (a second one → 409); at most CONTACTS_PER_ACCOUNT contacts (→ 422).',
    auth: true,
    body: contactCreateBody,
    responses: {
      '200': answer('Created.', envelope(contact)),
      ...bodyErrors,
      '409': duplicate,
      '422': refusal(
        'A field is missing or invalid (the message names it), or the account holds CONTACTS_PER_ACCOUNT contacts already.',
        'fax_number: must be an E.164 number: +, a first digit 1-9, then 1 to 14 more digits',
      ),
      ...tokenErrors,
    },
  }),
  list: operation({
    tag: 'Contacts',
    summary: "The account's contacts, oldest first; `search` by name or number",
    auth: true,
    querystring: z.object({
      ...listQuery,
      search: z
        .string()
        .max(100)
        .optional()
        .describe(
          'Case-insensitive part of the name, or digits of the fax number (other characters ignored for the number). At most 100 characters.',
        ),
    }),
    responses: {
      '200': answer('A page of contacts.', envelope(z.array(contact)).extend({ meta: pageMeta })),
      '422': badCursor,
      ...tokenErrors,
    },
  }),
  get: operation({
    tag: 'Contacts',
    summary: 'One contact',
    auth: true,
    params: contactParams,
    responses: { '200': answer('The contact.', envelope(contact)), '404': NOT_FOUND_404, ...tokenErrors },
  }),
  update: operation({
    tag: 'Contacts',
    summary: "Change a contact's name, fax_number or company",
    auth: true,
    params: contactParams,
    body: contactUpdateBody,
    responses: {
      '200': answer('Updated.', envelope(contact)),
      '404': NOT_FOUND_404,
      ...bodyErrors,
      '409': duplicate,
      ...tokenErrors,
    },
  }),
};

/**
 * Contacts at /v1/contacts. POST /v1/contacts/delete is the spec's (422 for a missing or unknown id);
 * the other operations are designed in its style: 404 for an id that is not the account's. Ids are
 * the encrypted contact ids (src/api/contact-id.ts).
 */
export function registerContactRoutes(app: FastifyInstance, d: RouteDeps): void {
  const view = (r: ContactRow) => ({ ...r, id: d.contactIds.encode(r.id) });
  const encode = (id: string) => d.contactIds.encode(id);
  const maxContacts = d.accountLimits.contacts;

  app.post('/v1/contacts/delete', { schema: contracts.delete, preHandler: d.auth }, async (req) => {
    const body = req.body;
    if (body === null || typeof body !== 'object' || Array.isArray(body))
      throw new ApiError(400, 'Request body must be a JSON object');
    const id = (body as { id?: unknown }).id;
    if (id === undefined || id === null || id === '') throw new ApiError(422, messages.contactIdRequired);
    if (typeof id !== 'string') throw new ApiError(422, 'The id field must be a string.');
    parseBody(contactDeleteBody, body); // any other field: 422 naming it
    // An id this installation did not issue (altered, made up, a raw UUID) is simply not found.
    const contactId = d.contactIds.decode(id);
    if (contactId === null) throw new ApiError(422, messages.contactNotFound);
    const gone = await d.tenant.tx(accountOf(req), (c) => deleteContact(c, contactId));
    if (!gone) throw new ApiError(422, messages.contactNotFound);
    return ok(messages.contactDeleted);
  });

  app.post('/v1/contacts', { schema: contracts.create, preHandler: d.auth }, async (req) => {
    const body = parseBody(contactCreateBody, req.body);
    const accountId = accountOf(req);
    const row = await d.tenant.tx(accountId, (c) => createContact(c, accountId, body, maxContacts, encode));
    return ok(contactMessages.created, view(row));
  });

  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/contacts',
    { schema: contracts.list, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const search = req.query.search;
      if (search !== undefined && typeof search !== 'string')
        throw new ApiError(422, 'search: must be given once');
      if (search !== undefined && search.length > 100)
        throw new ApiError(422, 'search: is longer than 100 characters');
      const filter = search ? contactSearch(search) : { where: [], values: [] };
      // The cursor is bound to the account and the search: it cannot be replayed on another list.
      const context = `contacts|${accountId}|${search ?? ''}`;
      const r = await listPage<ContactRow>(d, accountId, req.query, context, {
        from: 'contacts',
        columns: CONTACT_COLUMNS,
        where: filter.where,
        values: filter.values,
        order: 'asc',
      });
      return { ...ok(contactMessages.listed, r.rows.map(view)), meta: r.meta };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/contacts/:id',
    { schema: contracts.get, preHandler: d.auth },
    async (req) => {
      const id = d.contactIds.decode(req.params.id);
      const row = id === null ? null : await d.tenant.tx(accountOf(req), (c) => getContact(c, id));
      if (!row) throw new ApiError(404, messages.contactNotFound);
      return ok(contactMessages.found, view(row));
    },
  );

  app.patch<{ Params: { id: string } }>(
    '/v1/contacts/:id',
    { schema: contracts.update, preHandler: d.auth },
    async (req) => {
      const patch = parseBody(contactUpdateBody, req.body);
      const accountId = accountOf(req);
      const id = d.contactIds.decode(req.params.id);
      const row =
        id === null
          ? null
          : await d.tenant.tx(accountId, (c) => updateContact(c, accountId, id, patch, encode));
      if (!row) throw new ApiError(404, messages.contactNotFound);
      return ok(contactMessages.updated, view(row));
    },
  );
}
