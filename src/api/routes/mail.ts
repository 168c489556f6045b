// The mail gateway's settings over the API (docs/mail.md): who may send faxes by mail
// (/v1/mail-senders: list, create, delete) and what the gateway does with a message
// (/v1/mail-settings: body, receipts, sender_auth, subject_token).
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import {
  deleteSender,
  insertSender,
  loadSettings,
  mailMessages,
  SENDER_COLUMNS,
  updateSettings,
} from '../../accounts/mail.ts';
import { checkCallerId } from '../../accounts/numbers.ts';
import { E164_PATTERN } from '../../domain/e164.ts';
import { ApiError, ok } from '../../domain/envelope.ts';
import { isId } from '../../domain/ids.ts';
import { authModes, bodyModes, receiptModes, senderEntry } from '../../domain/mail.ts';
import { parseBody } from '../../domain/validate.ts';
import { accountOf } from '../auth-hook.ts';
import type { RouteDeps } from '../deps.ts';
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

const sender = z.object({
  id: z.string(),
  address: z
    .string()
    .describe('An address (doctor@clinic.example) or a domain pattern (*@clinic.example), lower-case.'),
  caller_id: z
    .string()
    .nullable()
    .describe('The caller id faxes from this sender are sent with; null: the Fax Default’s.'),
  created_at: z.string(),
});

const senderBody = z.strictObject({
  address: z
    .string({ message: 'is required: an email address or *@domain' })
    .describe('doctor@clinic.example, or *@clinic.example for every address of the domain.'),
  caller_id: z
    .string({ message: 'must be a string' })
    .regex(E164_PATTERN, 'must be an E.164 number, e.g. +15550100123')
    .optional()
    .describe('One of the account’s numbers (or the installation’s default caller id).'),
});

const settings = z.object({
  body: z
    .enum(bodyModes)
    .describe(
      'cover: subject and text go on the cover page; ignore: only the attachments; page: the text as a first page.',
    ),
  receipts: z
    .enum(receiptModes)
    .describe(
      'all: a receipt at once and a result per number; failures: only failed results; none: no mail.',
    ),
  sender_auth: z
    .enum(authModes)
    .describe(
      'SPF/DKIM/DMARC of each message: enforce (a failing message is dropped), record (logged and counted), off.',
    ),
  subject_token: z
    .string()
    .nullable()
    .describe(
      'When set, a message is taken only if its subject contains this secret (it is removed from the cover).',
    ),
});

const settingsBody = z
  .strictObject({
    body: z.enum(bodyModes, { message: 'must be cover, ignore or page' }).optional(),
    receipts: z.enum(receiptModes, { message: 'must be all, failures or none' }).optional(),
    sender_auth: z.enum(authModes, { message: 'must be enforce, record or off' }).optional(),
    subject_token: z
      .string({ message: 'must be a string or null' })
      .regex(/^[\x21-\x7e]{8,128}$/, 'must be 8 to 128 printable characters without spaces')
      .nullable()
      .optional(),
  })
  .refine(
    (b) => Object.keys(b).length > 0,
    'give at least one of body, receipts, sender_auth, subject_token',
  );

const idParams = z.object({ id: z.string().describe('id of the sender entry.') });
const notFound = refusal(
  "No such sender entry in this account (another account's ids answer the same).",
  mailMessages.senderNotFound,
);

const contracts = {
  list: operation({
    tag: 'Workspace',
    summary: 'Senders allowed to send faxes by mail, oldest first',
    auth: true,
    querystring: z.object(listQuery),
    responses: {
      '200': answer('A page of sender entries.', envelope(z.array(sender)).extend({ meta: pageMeta })),
      '422': badCursor,
      ...tokenErrors,
    },
  }),
  create: operation({
    tag: 'Workspace',
    summary: 'Allow a sender (an address or *@domain) to send faxes by mail',
    description:
      'Mail to <number>@MAIL_DOMAIN from this sender becomes a fax of this account (docs/mail.md). An address sends for one account only. Deny by default: mail from anyone else is dropped without reply.',
    auth: true,
    body: senderBody,
    responses: {
      '200': answer('Allowed.', envelope(sender)),
      ...bodyErrors,
      '409': refusal(
        'The address (or pattern) is already allowed, in this or another account.',
        mailMessages.senderTaken('doctor@clinic.example'),
      ),
      '422': refusal(
        'Not an address or *@domain, or a caller_id that is not the account’s.',
        'address: must be an email address (doctor@clinic.example) or *@domain',
      ),
      ...tokenErrors,
    },
  }),
  remove: operation({
    tag: 'Workspace',
    summary: 'Remove a sender entry',
    auth: true,
    params: idParams,
    responses: {
      '200': answer('Removed.', envelope()),
      '404': notFound,
      ...tokenErrors,
    },
  }),
  settings: operation({
    tag: 'Workspace',
    summary: 'The mail gateway settings of the account',
    auth: true,
    responses: { '200': answer('The settings.', envelope(settings)), ...tokenErrors },
  }),
  patchSettings: operation({
    tag: 'Workspace',
    summary: 'Change the mail gateway settings of the account',
    auth: true,
    body: settingsBody,
    responses: {
      '200': answer('The settings as they are now.', envelope(settings)),
      ...bodyErrors,
      '422': refusal('A field is invalid (the message names it).', 'receipts: must be all, failures or none'),
      ...tokenErrors,
    },
  }),
};

/**
 * Allows a sender (an address or `*@domain`, optional caller_id) to fax by mail: POST /v1/mail-senders
 * and the console's Mail senders page. 422 for a bad address or a caller_id not the account's, 409
 * when the entry is taken (here or in another account).
 */
export async function addMailSender(
  d: Pick<RouteDeps, 'tenant' | 'defaultCallerId'>,
  accountId: string,
  input: unknown,
) {
  const body = parseBody(senderBody, input);
  const address = senderEntry(body.address);
  if (!address)
    throw new ApiError(422, 'address: must be an email address (doctor@clinic.example) or *@domain');
  const row = await d.tenant.tx(accountId, async (c) => {
    if (body.caller_id !== undefined) {
      const refusal = await checkCallerId(c, accountId, body.caller_id, d.defaultCallerId ?? '', null);
      if (refusal) throw refusal;
    }
    return insertSender(c, accountId, address, body.caller_id ?? null);
  });
  if (!row) throw new ApiError(409, mailMessages.senderTaken(address));
  return row;
}

/** Removes a sender entry; 404 for an id that is not this account's (or nobody's). */
export async function removeMailSender(d: Pick<RouteDeps, 'tenant'>, accountId: string, id: string) {
  const gone = isId(id) && (await d.tenant.tx(accountId, (c) => deleteSender(c, id)));
  if (!gone) throw new ApiError(404, mailMessages.senderNotFound);
}

export function registerMailRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/mail-senders',
    { schema: contracts.list, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const r = await listPage<{ id: string }>(d, accountId, req.query, `mail-senders|${accountId}`, {
        from: 'mail_senders',
        columns: SENDER_COLUMNS,
        where: [],
        values: [],
        order: 'asc',
      });
      return { ...ok(mailMessages.sendersListed, r.rows), meta: r.meta };
    },
  );

  app.post('/v1/mail-senders', { schema: contracts.create, preHandler: d.auth }, async (req) => {
    const row = await addMailSender(d, accountOf(req), req.body);
    return ok(mailMessages.senderAdded, row);
  });

  app.delete<{ Params: { id: string } }>(
    '/v1/mail-senders/:id',
    { schema: contracts.remove, preHandler: d.auth },
    async (req) => {
      const id = req.params.id;
      await removeMailSender(d, accountOf(req), id);
      return ok(mailMessages.senderDeleted);
    },
  );

  app.get('/v1/mail-settings', { schema: contracts.settings, preHandler: d.auth }, async (req) => {
    const accountId = accountOf(req);
    return ok(mailMessages.settings, await d.tenant.tx(accountId, (c) => loadSettings(c, accountId)));
  });

  app.patch('/v1/mail-settings', { schema: contracts.patchSettings, preHandler: d.auth }, async (req) => {
    const body = parseBody(settingsBody, req.body);
    const accountId = accountOf(req);
    const patch = Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined));
    const next = await d.tenant.tx(accountId, (c) => updateSettings(c, accountId, patch));
    return ok(mailMessages.settingsUpdated, next);
  });
}
