// POST /v1/faxes/preview: the send body, checked and rendered without sending. Answers the page
// count, the resolved cover-page values and a PNG of one page (the first, or ?page=N) exactly as it
// will go on the line (bilevel, at the requested quality), with its rows resampled to square pixels.
import type { FastifyInstance } from 'fastify';
import { loadFaxDefault, loadSmartTemplate, loadTimeZone, type CoverContext } from '../../documents/cover.ts';
import { DocumentError } from '../../documents/errors.ts';
import { headerLineOf, headerPdf, headerTexts } from '../../documents/header.ts';
import { type Fetcher, checkDocuments } from '../../documents/prepare.ts';
import { bilevelToPng } from '../../documents/render/png.ts';
import { renderSource } from '../../documents/render/render.ts';
import { X_DPI, Y_DPI } from '../../documents/render/raster.ts';
import { decodeDocument } from '../../intake/send.ts';
import { accountOf, requireToken } from '../auth-hook.ts';
import { z } from 'zod';
import { ApiError, ok } from '../../domain/envelope.ts';
import { answer, bodyErrors, envelope, operation, refusal, tokenErrors, unavailable } from '../openapi.ts';
import { sendFaxBody, type SendFaxBody } from '../../domain/schemas.ts';
import type { ApiDeps } from '../deps.ts';
import { parseBody } from '../../domain/validate.ts';

/** Fetching and checking every document of a preview. */
const PREVIEW_TIMEOUT_MS = 60_000;

/** A document problem is the sender's to fix: 422 with the failure code a job would show. */
function documentFailure(err: unknown): never {
  if (err instanceof DocumentError) throw new ApiError(422, err.message, { data: { code: err.code } });
  // The preview's own time limit, spent mostly waiting for the account's earlier previews (the
  // preview's sandbox and render process are shared fairly, one task at a time): busy, not broken.
  if (err instanceof DOMException && err.name === 'TimeoutError')
    throw new ApiError(
      503,
      `preview: not ready within ${PREVIEW_TIMEOUT_MS / 1000} s (the previews are busy, e.g. with this account's earlier previews); try again later`,
      { data: { code: 'preview_busy' }, headers: { 'retry-after': '30' } },
    );
  throw err;
}

const contract = operation({
  tag: 'Send Faxes',
  summary: 'Preview a fax: check and render the send body without sending it',
  description:
    'The same body as POST /v1/faxes/send. Answers the page count, the resolved cover-page values and a PNG of one ' +
    'page (the first, or ?page=N) exactly as it will go on the line (bilevel, at the requested quality), its rows ' +
    'resampled to square pixels. Nothing is stored or sent.',
  auth: true,
  body: sendFaxBody,
  querystring: z.object({
    page: z.number().int().min(1).default(1).describe('The page to render, from 1 (the cover page first).'),
  }),
  responses: {
    '200': answer(
      'The preview.',
      envelope(
        z.object({
          page_count: z.number().int(),
          document_pages: z.number().int(),
          fax_quality: z.enum(['low', 'standard', 'hd']),
          resolution: z.object({ x_dpi: z.number(), y_dpi: z.number() }),
          cover: z
            .object({
              source: z.string(),
              template_id: z.string().nullable(),
              smart_document_id: z.string().nullable(),
              pages: z.number().int(),
              values: z.record(z.string(), z.unknown()),
            })
            .nullable(),
          page: z.object({
            number: z.number().int(),
            header_line: z
              .string()
              .nullable()
              .describe(
                "The header line printed at the top of this page (the Fax Default's header_line), or null.",
              ),
            fax_width: z.number().int(),
            fax_height: z.number().int(),
            png_width: z.number().int(),
            png_height: z.number().int(),
            png_base64: z.string(),
          }),
        }),
      ),
    ),
    ...bodyErrors,
    '422': refusal(
      'Invalid field or page; template_id / smart_document_id not of this account; a document that fails the checks a send would fail (`data.code` is the failure code the job would show).',
      'page: the fax has 2 page(s)',
    ),
    ...tokenErrors,
    '503': unavailable,
  },
});

export function registerPreviewRoutes(app: FastifyInstance, d: ApiDeps): void {
  const auth = requireToken(d);

  app.post<{ Querystring: { page?: string } }>(
    '/v1/faxes/preview',
    { schema: contract, preHandler: auth },
    async (req) => {
      const body = parseBody(sendFaxBody, req.body);
      const pageParam = req.query.page ?? '1';
      if (!/^[1-9][0-9]{0,5}$/.test(pageParam)) throw new ApiError(422, 'page: must be a page number from 1');
      return ok('Fax preview', await previewFax(d, accountOf(req), body, Number(pageParam)));
    },
  );
}

/**
 * The preview of a send body (checked with parseBody): page count, cover values and page `wanted`
 * as a PNG. Shared by POST /v1/faxes/preview and the console's "Preview".
 */
export async function previewFax(
  d: Pick<ApiDeps, 'tenant' | 'fetcher' | 'clock' | 'previews' | 'maxDocumentBytes'>,
  accountId: string,
  body: SendFaxBody,
  wanted: number,
) {
  // Reads run as the API role with the account set (row-level security), like every request.
  const db = d.tenant.scoped(accountId);

  const fd = await loadFaxDefault(db, accountId, body.template_id ?? 'default');
  if (body.template_id !== undefined && !fd)
    throw new ApiError(422, 'template_id: no Fax Default with this id exists in your account');
  let smart: CoverContext['smartTemplate'] = null;
  if (body.smart_document_id !== undefined) {
    smart = await loadSmartTemplate(db, accountId, body.smart_document_id).catch(documentFailure);
    if (!smart)
      throw new ApiError(422, 'smart_document_id: no Smart Template with this id exists in your account');
  }
  const callerId = body.caller_id ?? fd?.fax_as;
  if (!callerId)
    throw new ApiError(
      422,
      'caller_id: is required because the account has no default Fax Default to take fax_as from',
    );
  const quality = body.fax_quality ?? fd?.fax_quality ?? 'standard';
  const first = body.recipients?.[0];
  const subject = first?.subject ?? body.subject;
  const message = first?.message ?? body.message;
  const recipientName = first?.to_name ?? body.recipient_name;
  const ctx: CoverContext = {
    timeZone: await loadTimeZone(db, accountId),
    faxDefault: fd,
    smartTemplate: smart,
    // A broadcast previews with its first recipient's cover fields.
    faxNumber: body.fax_number ?? first?.fax_number ?? '',
    callerId,
    options: {
      ...(subject !== undefined ? { subject } : {}),
      ...(message !== undefined ? { message } : {}),
      ...(body.sender_name !== undefined ? { sender_name: body.sender_name } : {}),
      ...(recipientName !== undefined ? { recipient_name: recipientName } : {}),
    },
  };

  const signal = AbortSignal.timeout(PREVIEW_TIMEOUT_MS);
  // The same checks, fax limits and cover as a send (checkDocuments), so a preview passes exactly
  // what a send would; a document's problem is the sender's to fix (422 with its code).
  const sources = body.fax_data.map((doc, i) => ({
    file_name: doc.file_name,
    file_url: doc.file_url ?? null,
    content: doc.file_data !== undefined ? decodeDocument(doc.file_data, i, d.maxDocumentBytes) : null,
  }));
  const fetcher: Fetcher =
    d.fetcher ??
    (() => {
      throw new DocumentError('url_not_previewable', 'file_url documents cannot be previewed here');
    });
  const now = d.clock.now();
  const {
    inputs: docs,
    documentPages,
    cover,
  } = await checkDocuments(sources, fetcher, signal, {
    checks: d.previews.checks,
    cover: ctx,
    now,
    accountId,
  }).catch(documentFailure);
  const total = documentPages + (cover?.pages ?? 0);
  if (wanted > total) throw new ApiError(422, `page: the fax has ${total} page(s)`);
  // The header line of this page, drawn as a send draws it.
  const headerLine = headerLineOf(ctx, now);
  const headerText = headerLine ? headerTexts(headerLine, wanted - 1, 1, total)[0]! : null;
  const header = headerText !== null ? await headerPdf([headerText]) : undefined;

  let index = wanted - 1;
  const source = docs.find((x) => (index < x.pages ? true : ((index -= x.pages), false)))!;
  // Rendered in the API's own render processes (RENDER_PREVIEW_PROCESSES), never in this process's heap.
  const img = await d.previews.renderPool
    .run(
      { kind: 'page-image', ...renderSource(source), page: index, quality, ...(header ? { header } : {}) },
      { accountId, signal },
    )
    .catch((err: unknown) =>
      documentFailure(
        err instanceof DocumentError ? new DocumentError(err.code, `${source.name}: ${err.message}`) : err,
      ),
    );
  if (img.kind !== 'page-image') throw new Error('unexpected render result');
  const png = bilevelToPng(img.rows, img.width, img.height, X_DPI, Y_DPI[quality]);

  return {
    page_count: total,
    document_pages: documentPages,
    fax_quality: quality,
    resolution: { x_dpi: X_DPI, y_dpi: Y_DPI[quality] },
    cover: cover
      ? {
          source: cover.source,
          template_id: cover.source === 'fax_default' ? (fd?.id ?? null) : null,
          smart_document_id: smart?.id ?? null,
          pages: cover.pages,
          values: cover.values,
        }
      : null,
    page: {
      number: wanted,
      header_line: headerText,
      fax_width: img.width,
      fax_height: img.height,
      png_width: img.width,
      png_height: Math.max(1, Math.round((img.height * X_DPI) / Y_DPI[quality])),
      png_base64: png.toString('base64'),
    },
  };
}
