// /v1/smart-templates: the account's Smart Templates (the smart_document_id of a send). Upload a PDF
// with form fields (Base64 JSON, like file_data of a send), list, get, list its fields, delete.
// Another account's id, a made-up one and a deleted one are all answered 404 with the same message;
// the logic is in src/accounts/smart-templates.ts.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { DocumentError } from '../../documents/errors.ts';
import {
  assertRoomForSmartTemplate,
  createSmartTemplate,
  deleteSmartTemplate,
  getSmartTemplate,
  inspectSmartTemplate,
  saveInspection,
  SMART_TEMPLATE_VIEW_COLUMNS,
  smartTemplateCreateBody,
  smartTemplateField,
  smartTemplateView,
  type SmartTemplateView,
  uninspectedPdf,
} from '../../accounts/smart-templates.ts';
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
  unavailable,
} from '../openapi.ts';
import { listPage } from '../paginate.ts';
import type { RouteDeps } from '../deps.ts';
import { parseBody } from '../../domain/validate.ts';
import { decodePdfField } from '../../intake/send.ts';

export const smartTemplateMessages = {
  created: 'Smart Template uploaded successfully',
  listed: 'Smart Templates retrieved successfully',
  found: 'Smart Template retrieved successfully',
  fieldsListed: 'Smart Template fields retrieved successfully',
  deleted: 'Smart Template has been deleted successfully.',
  notFound: 'Smart Template not found',
} as const;
const m = smartTemplateMessages;

/** Checking an upload in the sandbox, waiting for a sandbox process included. */
const CHECK_TIMEOUT_MS = 60_000;

/** A PDF the checks refuse is the customer's to fix: 422 with the failure code a send would show. */
function checkFailure(err: unknown): never {
  if (err instanceof DocumentError)
    throw new ApiError(422, `file_data: ${err.message}`, { data: { code: err.code } });
  if (err instanceof DOMException && err.name === 'TimeoutError')
    throw new ApiError(
      503,
      `file_data: not checked within ${CHECK_TIMEOUT_MS / 1000} s (the PDF checks are busy); try again later`,
      { data: { code: 'check_busy' }, headers: { 'retry-after': '30' } },
    );
  throw err;
}

const params = z.object({
  id: z.string().describe('The Smart Template id (the smart_document_id of a send).'),
});
const notFound = refusal(
  'No such Smart Template in this account (also: deleted, or of another account).',
  m.notFound,
);
const checkRefusal = refusal(
  'A field is missing or invalid; the account holds SMART_TEMPLATES_PER_ACCOUNT templates already; file_data is not Base64 or not a PDF; or the PDF fails the checks a document of a send would fail, or its form cannot be read or filled (`data.code`: the failure code).',
  'file_data: the PDF is encrypted',
  0,
  { code: 'pdf_encrypted' },
);

const contracts = {
  create: operation({
    tag: 'Templates',
    summary: 'Upload a Smart Template: a PDF with form fields',
    description:
      'The PDF goes through the same sandboxed checks as a document of a send (same limits); then its form fields are read and it is filled once with sample values, so a template that could not be filled is refused now. Text fields whose names match a cover value (see `fills`) are filled at each send, then the form is flattened.',
    auth: true,
    body: smartTemplateCreateBody,
    responses: {
      '200': answer('Uploaded, with the fields found.', envelope(smartTemplateView)),
      ...bodyErrors,
      '422': checkRefusal,
      ...tokenErrors,
      '503': unavailable,
    },
  }),
  list: operation({
    tag: 'Templates',
    summary: "The account's Smart Templates, oldest first",
    auth: true,
    querystring: z.object(listQuery),
    responses: {
      '200': answer(
        'A page of Smart Templates.',
        envelope(z.array(smartTemplateView)).extend({ meta: pageMeta }),
      ),
      '422': badCursor,
      ...tokenErrors,
    },
  }),
  get: operation({
    tag: 'Templates',
    summary: 'One Smart Template, with its fields',
    auth: true,
    params,
    responses: {
      '200': answer('The Smart Template.', envelope(smartTemplateView)),
      '404': notFound,
      ...tokenErrors,
    },
  }),
  fields: operation({
    tag: 'Templates',
    summary: "A Smart Template's form fields",
    auth: true,
    params,
    responses: {
      '200': answer('Its fields, in the order of the form.', envelope(z.array(smartTemplateField))),
      '404': notFound,
      ...tokenErrors,
    },
  }),
  delete: operation({
    tag: 'Templates',
    summary: 'Delete a Smart Template',
    description:
      'A send naming it is refused afterwards (422, as for an unknown smart_document_id). Faxes already accepted with it keep it as their cover.',
    auth: true,
    params,
    responses: {
      '200': answer('Deleted.', envelope(), { status: 1, message: m.deleted }),
      '404': notFound,
      ...tokenErrors,
    },
  }),
};

/**
 * Uploads a Smart Template (POST /v1/smart-templates and the console's Cover pages): the body's
 * rules, the account's cap, the PDF sandbox's checks, then the row.
 */
export async function uploadSmartTemplate(
  d: Pick<RouteDeps, 'tenant' | 'templateChecks' | 'accountLimits' | 'maxDocumentBytes'>,
  accountId: string,
  input: unknown,
): Promise<SmartTemplateView> {
  const body = parseBody(smartTemplateCreateBody, input);
  const pdf = decodePdfField(body.file_data, 'file_data', d.maxDocumentBytes);
  // An account at its cap is refused before its PDF takes a sandbox process.
  await d.tenant.tx(accountId, (c) =>
    assertRoomForSmartTemplate(c, accountId, d.accountLimits.smart_templates),
  );
  // Checked before any transaction is open (the sandbox may take seconds).
  const inspected = await inspectSmartTemplate(
    pdf,
    body.file_name ?? body.name,
    d.templateChecks,
    AbortSignal.timeout(CHECK_TIMEOUT_MS),
    accountId,
  ).catch(checkFailure);
  const row = await d.tenant.tx(accountId, (c) =>
    createSmartTemplate(
      c,
      accountId,
      {
        name: body.name,
        fileName: body.file_name ?? null,
        pdf,
        inspected,
      },
      d.accountLimits.smart_templates,
    ),
  );
  return row;
}

export function registerSmartTemplateRoutes(app: FastifyInstance, d: RouteDeps): void {
  // The API's PDF sandbox (the previews'), shared fairly between accounts, with a send's limits: it
  // checks the upload and reads its form, so no upload is parsed on this event loop.

  /** A live template of the account with its fields (read now for one uploaded before they were kept). */
  async function withFields(accountId: string, id: string): Promise<SmartTemplateView> {
    const row = await d.tenant.tx(accountId, (c) => getSmartTemplate(c, accountId, id));
    if (!row) throw new ApiError(404, m.notFound);
    if (row.fields !== null) return row;
    const pdf = await d.tenant.tx(accountId, (c) => uninspectedPdf(c, accountId, id));
    if (!pdf) return (await d.tenant.tx(accountId, (c) => getSmartTemplate(c, accountId, id))) ?? notGone();
    const inspected = await inspectSmartTemplate(
      pdf,
      row.name,
      d.templateChecks,
      AbortSignal.timeout(CHECK_TIMEOUT_MS),
      accountId,
    ).catch(checkFailure);
    return (await d.tenant.tx(accountId, (c) => saveInspection(c, accountId, id, inspected))) ?? notGone();
  }
  const notGone = (): never => {
    throw new ApiError(404, m.notFound);
  };

  app.post(
    '/v1/smart-templates',
    // Carries a document: the body limit of a send, not the 64 KiB of other routes.
    { schema: contracts.create, preHandler: d.auth, bodyLimit: d.maxRequestBytes },
    async (req) => ok(m.created, await uploadSmartTemplate(d, accountOf(req), req.body)),
  );

  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/smart-templates',
    { schema: contracts.list, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const context = `smart-templates|${accountId}`;
      const r = await listPage<{ id: string }>(d, accountId, req.query, context, {
        from: 'smart_templates',
        columns: SMART_TEMPLATE_VIEW_COLUMNS,
        where: ['account_id = $1', 'deleted_at IS NULL'],
        values: [accountId],
        order: 'asc',
      });
      return { ...ok(m.listed, r.rows), meta: r.meta };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/smart-templates/:id',
    { schema: contracts.get, preHandler: d.auth },
    async (req) => ok(m.found, await withFields(accountOf(req), req.params.id)),
  );

  app.get<{ Params: { id: string } }>(
    '/v1/smart-templates/:id/fields',
    { schema: contracts.fields, preHandler: d.auth },
    async (req) => ok(m.fieldsListed, (await withFields(accountOf(req), req.params.id)).fields),
  );

  app.delete<{ Params: { id: string } }>(
    '/v1/smart-templates/:id',
    { schema: contracts.delete, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const gone = await d.tenant.tx(accountId, (c) => deleteSmartTemplate(c, accountId, req.params.id));
      if (!gone) throw new ApiError(404, m.notFound);
      return ok(m.deleted);
    },
  );
}
