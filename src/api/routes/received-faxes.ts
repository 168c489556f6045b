// Receive Faxes: the account's received faxes, newest first (cursor pages, filters), one of them, its
// PDF and TIFF, marking it read or unread, deleting it. Every statement runs under the account's
// row-level security: another account's id is answered exactly as a missing one.
import type { FastifyInstance, FastifyReply } from 'fastify';
import { z } from 'zod';
import { ApiError, ok } from '../../domain/envelope.ts';
import { isE164 } from '../../domain/e164.ts';
import { parseBody } from '../../domain/validate.ts';
import {
  RECEIVED_COLUMNS,
  deleteReceived,
  getImage,
  getReceived,
  markDownloaded,
  markRead,
  receivedMessages,
} from '../../receive/store.ts';
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

const statuses = ['receiving', 'received', 'partial', 'failed'] as const;

const receivedFax = z.object({
  id: z.string(),
  status: z
    .enum(statuses)
    .describe(
      'receiving: the call is in progress (no image yet); received: every page arrived; partial: the call ended early, the pages that arrived are stored (`pages`); failed: no page arrived.',
    ),
  to: z.string().describe('The number called, one of GET /v1/numbers (E.164).'),
  number_id: z.string().nullable().describe('id of that number in GET /v1/numbers (null once released).'),
  from: z
    .string()
    .nullable()
    .describe("The caller id of the call (E.164 when the trunk's form could be normalised)."),
  remote_csid: z.string().nullable().describe("The sending machine's station id (T.30 TSI)."),
  station_id: z
    .string()
    .nullable()
    .describe('Our station id (CSI) the sender saw: the number’s station_id, else the number.'),
  pages: z.number().int().describe('Pages stored.'),
  resolution: z
    .enum(['low', 'standard', 'hd', 'other'])
    .nullable()
    .describe(
      "Vertical resolution in a send's fax_quality terms: low 98, standard 196, hd 391 lines per inch.",
    ),
  x_dpi: z.number().int().nullable(),
  y_dpi: z.number().int().nullable(),
  encoding: z.enum(['T.4 1-D', 'T.4 2-D', 'T.6']).nullable().describe('Coding of the stored image.'),
  bit_rate: z.number().int().nullable().describe('Modem rate agreed (bit/s).'),
  ecm: z.boolean().nullable().describe('Error correction mode was used.'),
  transport: z.enum(['t38', 'audio']).nullable().describe('T.38 (UDPTL) or G.711 audio.'),
  duration_ms: z.number().int().nullable().describe('From answer to the end of the fax exchange.'),
  result_code: z.number().int().nullable().describe('T.30 completion code (SpanDSP T30_ERR_*), 0 = OK.'),
  result_text: z
    .string()
    .nullable()
    .describe('The result in words; says how many pages a partial reception kept.'),
  call_id: z.string().nullable().describe('SIP Call-ID of the call.'),
  created_at: z.string().describe('When the call was answered (the list is ordered by it, newest first).'),
  received_at: z
    .string()
    .nullable()
    .describe('When the reception ended and was stored; null while receiving.'),
  read: z.boolean(),
  read_at: z.string().nullable(),
  tiff_bytes: z.number().int().nullable().describe('Size of the TIFF download; null when there is none.'),
  pdf_bytes: z.number().int().nullable().describe('Size of the PDF download; null when there is none.'),
  images_deleted_at: z
    .string()
    .nullable()
    .describe('When the images were removed (retention); the record stays.'),
  images_deleted_reason: z.enum(['retention', 'request']).nullable(),
});

const idParam = z.object({ id: z.string().describe('id of the received fax (GET /v1/received-faxes).') });
const notFound = refusal(
  "No such received fax in this account (another account's ids, and deleted faxes, answer the same).",
  receivedMessages.notFound,
);

const listQuerystring = z.object({
  ...listQuery,
  number: z.string().optional().describe('Only faxes to this number of the account (E.164).'),
  since: z.string().optional().describe('Only faxes answered at or after this time (ISO 8601).'),
  until: z.string().optional().describe('Only faxes answered before this time (ISO 8601).'),
  read: z.enum(['true', 'false']).optional().describe('true: only read ones; false: only unread ones.'),
  status: z.enum(statuses).optional().describe('Only faxes with this status.'),
});

const readBody = z
  .object({ read: z.boolean({ message: 'must be true or false' }) })
  .strict()
  .describe('read: true marks the fax read (keeps the first read_at); false marks it unread.');

const download = (kind: 'pdf' | 'tiff') =>
  operation({
    tag: 'Receive Faxes',
    summary:
      kind === 'pdf'
        ? 'Download a received fax as PDF (its T.4/T.6 data wrapped, not re-encoded)'
        : 'Download a received fax as the TIFF received (TIFF Class F)',
    auth: true,
    params: idParam,
    responses: {
      '200': {
        description:
          kind === 'pdf'
            ? 'The PDF (Content-Type application/pdf), one page per fax page at its physical size.'
            : 'The TIFF exactly as received (Content-Type image/tiff).',
        content: {
          [kind === 'pdf' ? 'application/pdf' : 'image/tiff']: {
            schema: z.string().meta({ format: 'binary' }),
          },
        },
      } as unknown as z.ZodType,
      '404': refusal(
        "No such received fax (another account's ids answer the same), or no page arrived, or (PDF) its TIFF could not be wrapped.",
        receivedMessages.notFound,
      ),
      '409': refusal('The fax is still being received.', receivedMessages.stillReceiving),
      '410': refusal(
        'Its images were removed by retention (the record stays).',
        receivedMessages.imageRemoved,
      ),
      ...tokenErrors,
    },
  });

const contracts = {
  list: operation({
    tag: 'Receive Faxes',
    summary: "The account's received faxes, newest first",
    description:
      'Cursor pages as GET /v1/numbers. Filters: number, since/until (when the call was answered), read, status; a cursor is bound to its filters.',
    auth: true,
    querystring: listQuerystring,
    responses: {
      '200': answer('A page of received faxes.', envelope(z.array(receivedFax)).extend({ meta: pageMeta })),
      '422': badCursor,
      ...tokenErrors,
    },
  }),
  get: operation({
    tag: 'Receive Faxes',
    summary: 'A received fax',
    auth: true,
    params: idParam,
    responses: { '200': answer('The received fax.', envelope(receivedFax)), '404': notFound, ...tokenErrors },
  }),
  pdf: download('pdf'),
  tiff: download('tiff'),
  patch: operation({
    tag: 'Receive Faxes',
    summary: 'Mark a received fax read or unread',
    auth: true,
    params: idParam,
    body: readBody,
    responses: {
      '200': answer('Marked.', envelope(receivedFax)),
      '404': notFound,
      ...bodyErrors,
      '422': refusal(
        'read is missing or not a boolean, or another field was given.',
        'read: must be true or false',
      ),
      ...tokenErrors,
    },
  }),
  delete: operation({
    tag: 'Receive Faxes',
    summary: 'Delete a received fax (its images at once; it is no longer listed)',
    auth: true,
    params: idParam,
    responses: {
      '200': answer('Deleted.', envelope(), { status: 1, message: receivedMessages.deleted }),
      '404': notFound,
      '409': refusal('The fax is still being received.', receivedMessages.stillReceiving),
      ...tokenErrors,
    },
  }),
};

function when(raw: unknown, name: string): string | null {
  if (raw === undefined) return null;
  const t = typeof raw === 'string' && /^\d{4}-\d{2}-\d{2}/.test(raw) ? Date.parse(raw) : NaN;
  if (Number.isNaN(t)) throw new ApiError(422, `${name}: must be a date or date-time (ISO 8601), given once`);
  return new Date(t).toISOString();
}

export function registerReceivedFaxRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/received-faxes',
    { schema: contracts.list, preHandler: d.auth },
    async (req) => {
      const accountId = accountOf(req);
      const q = req.query;
      const where = ['deleted_at IS NULL'];
      const values: unknown[] = [];
      const add = (sql: string, v: unknown) => {
        values.push(v);
        where.push(sql.replace('$', `$${values.length}`));
      };
      if (q.number !== undefined) {
        if (typeof q.number !== 'string' || !isE164(q.number))
          throw new ApiError(
            422,
            'number: must be an E.164 number (+, a first digit 1-9, then 1 to 14 more digits)',
          );
        add('to_number = $', q.number);
      }
      const since = when(q.since, 'since');
      const until = when(q.until, 'until');
      if (since) add('created_at >= $::timestamptz', since);
      if (until) add('created_at < $::timestamptz', until);
      if (q.read !== undefined) {
        if (q.read !== 'true' && q.read !== 'false') throw new ApiError(422, 'read: must be true or false');
        where.push(q.read === 'true' ? 'read_at IS NOT NULL' : 'read_at IS NULL');
      }
      if (q.status !== undefined) {
        if (typeof q.status !== 'string' || !(statuses as readonly string[]).includes(q.status))
          throw new ApiError(422, `status: must be one of ${statuses.join(', ')}`);
        add('status = $', q.status);
      }
      const context = `received|${accountId}|${String(q.number ?? '')}|${since ?? ''}|${until ?? ''}|${String(q.read ?? '')}|${String(q.status ?? '')}`;
      const r = await listPage<{ id: string }>(d, accountId, q, context, {
        from: 'received_faxes',
        columns: RECEIVED_COLUMNS,
        where,
        values,
        order: 'desc',
      });
      return { ...ok(receivedMessages.listed, r.rows), meta: r.meta };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/received-faxes/:id',
    { schema: contracts.get, preHandler: d.auth },
    async (req) => {
      const row = await d.tenant.tx(accountOf(req), (c) => getReceived(c, req.params.id));
      if (!row) throw new ApiError(404, receivedMessages.notFound);
      return ok(receivedMessages.found, row);
    },
  );

  for (const kind of ['pdf', 'tiff'] as const) {
    app.get<{ Params: { id: string } }>(
      `/v1/received-faxes/:id/${kind}`,
      { schema: contracts[kind], preHandler: d.auth },
      async (req, reply: FastifyReply) => {
        const got = await d.tenant.tx(accountOf(req), async (c) => {
          const image = await getImage(c, req.params.id, kind);
          if ('image' in image) await markDownloaded(c, req.params.id);
          return image;
        });
        if ('missing' in got) {
          switch (got.missing) {
            case 'receiving':
              throw new ApiError(409, receivedMessages.stillReceiving);
            case 'removed':
              throw new ApiError(410, receivedMessages.imageRemoved);
            case 'none':
              throw new ApiError(404, receivedMessages.noImage);
            case 'no_pdf':
              throw new ApiError(404, receivedMessages.noPdf);
            default:
              throw new ApiError(404, receivedMessages.notFound);
          }
        }
        return reply
          .header('content-type', kind === 'pdf' ? 'application/pdf' : 'image/tiff')
          .header(
            'content-disposition',
            `attachment; filename="fax-${req.params.id}.${kind === 'pdf' ? 'pdf' : 'tif'}"`,
          )
          .header('cache-control', 'private, no-store')
          .send(got.image);
      },
    );
  }

  app.patch<{ Params: { id: string } }>(
    '/v1/received-faxes/:id',
    { schema: contracts.patch, preHandler: d.auth },
    async (req) => {
      const body = parseBody(readBody, req.body);
      const row = await d.tenant.tx(accountOf(req), (c) => markRead(c, req.params.id, body.read));
      if (!row) throw new ApiError(404, receivedMessages.notFound);
      return ok(body.read ? receivedMessages.markedRead : receivedMessages.markedUnread, row);
    },
  );

  app.delete<{ Params: { id: string } }>(
    '/v1/received-faxes/:id',
    { schema: contracts.delete, preHandler: d.auth },
    async (req) => {
      const out = await d.tenant.tx(accountOf(req), async (c) => {
        if (await deleteReceived(c, req.params.id)) return 'deleted' as const;
        const row = await getReceived(c, req.params.id);
        return row?.status === 'receiving' ? ('receiving' as const) : null;
      });
      if (out === 'receiving') throw new ApiError(409, receivedMessages.stillReceiving);
      if (!out) throw new ApiError(404, receivedMessages.notFound);
      return ok(receivedMessages.deleted);
    },
  );
}
