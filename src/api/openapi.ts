// OpenAPI 3.1 for the customer API, generated from the same zod schemas that validate requests
// (z.toJSONSchema), served at /openapi.json, with a small self-contained browsable page at /docs
// (no CDN: it renders /openapi.json with a few lines of script).
import { simulatedTestNumbersMarkdown } from '../transmission/simulated.ts';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { jobStates } from '../domain/states.ts';
import { MAX_LIMIT } from './cursor.ts';
import { messages } from './envelope.ts';
import { dataErrorMessages } from '../intake/data-errors.ts';
import {
  approveBody,
  authBody,
  cancelScheduleBody,
  contactDeleteBody,
  forwardFaxBody,
  rejectBody,
  sendFaxBody,
} from './schemas.ts';

const json = (s: z.ZodType) => {
  const out = z.toJSONSchema(s, { io: 'input', target: 'draft-2020-12', unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  delete out.$schema;
  return out;
};

const envelope = (data?: z.ZodType) =>
  z.object({
    status: z.number().int().describe('1 = success, 0 = not accepted, 401 = expired/invalid token'),
    message: z.string(),
    ...(data ? { data } : {}),
  });
const errorEnvelope = z.object({
  status: z.number().int(),
  message: z.string().describe('What went wrong; validation errors name the field and the reason.'),
  data: z.unknown().optional(),
});
const pageMeta = z.object({
  next_cursor: z.string().nullable(),
  previous_cursor: z.string().nullable(),
  has_more: z.boolean(),
  limit: z.number().int(),
});
const jobIdData = z.object({ job_id: z.string() });
const faxJob = z.object({
  job_id: z.string(),
  kind: z.enum(['send', 'forward']),
  state: z.enum(jobStates),
  source_job_id: z.string().nullable(),
  fax_number: z.string(),
  caller_id: z.string().describe('Resolved: the request, else the Fax Default.'),
  fax_quality: z.enum(['low', 'standard', 'hd']).describe('Resolved: the request, else the Fax Default.'),
  fax_priority: z.enum(['high', 'regular']),
  template_id: z.string().nullable().describe('The Fax Default used.'),
  smart_document_id: z.string().nullable(),
  scheduled_date: z.string().nullable().describe('Due time of a scheduled fax.'),
  options: z.record(z.string(), z.unknown()),
  page_count: z.number().int().nullable(),
  pages_sent: z.number().int(),
  attempts: z.number().int(),
  next_attempt_at: z.string().nullable(),
  failure: z.object({ code: z.string(), reason: z.string().nullable() }).nullable(),
  created_at: z.string(),
  updated_at: z.string(),
  completed_at: z.string().nullable(),
});

interface Resp {
  description: string;
  example?: unknown;
  schema?: z.ZodType;
  headers?: Record<string, string>;
}

interface Op {
  method: 'get' | 'post' | 'delete';
  path: string;
  tag: string;
  summary: string;
  description?: string;
  auth: boolean;
  body?: z.ZodType;
  idempotent?: boolean;
  params?: string[];
  query?: { name: string; description: string; schema: Record<string, unknown> }[];
  responses: Record<string, Resp>;
}

const err = (description: string, message: string, status = 0, data?: unknown): Resp => ({
  description,
  schema: errorEnvelope,
  example: data === undefined ? { status, message } : { status, message, data },
});

const common = {
  '400': err(
    'Body is not JSON, not a JSON object, or nested deeper than MAX_JSON_DEPTH.',
    'Request body is not valid JSON',
  ),
  '413': err(
    'Body larger than MAX_REQUEST_BYTES (64 KiB on routes without documents), or a document over MAX_DOCUMENT_BYTES.',
    'Request body is too large',
  ),
  '415': err('Content-Type is not application/json.', 'Content-Type must be application/json'),
  '422': err(
    'A field is missing or invalid, or holds text PostgreSQL cannot store (U+0000, an unpaired surrogate): the message names it and says why.',
    'fax_number: must be an E.164 number: +, a first digit 1-9, then 1 to 14 more digits',
  ),
};
const protectedErrors: Record<string, Resp> = {
  '401': err(
    'Missing, malformed, unknown, expired or revoked access token; `data` says which.',
    messages.unauthorized,
    401,
    'Access token has expired.',
  ),
  '429': {
    ...err(
      'Per-account rate limit; wait `Retry-After` seconds (also in `data.retry_after`).',
      'Too many requests: this account may make 50 requests per second (bursts of 100); retry after 1 s',
      0,
      { retry_after: 1 },
    ),
    headers: { 'Retry-After': 'Seconds to wait.' },
  },
};
const unavailable = err(
  'PostgreSQL or RabbitMQ unreachable: nothing was accepted; retry (with the same Idempotency-Key).',
  messages.brokerDown,
);
const listQuery = [
  {
    name: 'limit',
    description: `Page size, default 50. Above ${MAX_LIMIT} it is clamped to ${MAX_LIMIT} (meta.limit tells); below 1 or not a whole number → 422.`,
    schema: { type: 'integer', minimum: 1, default: 50 },
  },
  {
    name: 'cursor',
    description:
      'meta.next_cursor or meta.previous_cursor of a previous page, unchanged. Altered or foreign → 422.',
    schema: { type: 'string' },
  },
];
const badCursor = err(
  'limit is not a whole number ≥ 1, or the cursor was altered, forged or belongs to another list.',
  'cursor: is not a cursor this list issued; pass next_cursor or previous_cursor unchanged',
);

export const operations: Op[] = [
  {
    method: 'post',
    path: '/v1/auth',
    tag: 'Authentication',
    summary: 'Exchange an API key for an access token (86,400 s)',
    auth: false,
    body: authBody,
    responses: {
      '200': {
        description: 'Token issued.',
        schema: envelope(
          z.object({
            access_token: z.string(),
            token_type: z.literal('Bearer'),
            expires_in: z.literal(86400),
          }),
        ),
        example: {
          status: 1,
          message: messages.tokenGenerated,
          data: { access_token: 'fxl_at_…', token_type: 'Bearer', expires_in: 86400 },
        },
      },
      '401': err('Unknown or revoked API key.', messages.keyInvalid),
      '429': {
        ...err(
          'Too many failed attempts from this address or with this key; wait `Retry-After` seconds (also in `data.retry_after`).',
          'Too many failed authentication attempts from this address; retry after 15 s',
          0,
          { retry_after: 15 },
        ),
        headers: { 'Retry-After': 'Seconds to wait.' },
      },
      ...common,
    },
  },
  {
    method: 'post',
    path: '/v1/faxes/send',
    tag: 'Send Faxes',
    summary: 'Send a fax (now, at scheduled_date, or after approval)',
    description:
      'approval_required: true holds the fax in awaiting_approval until POST /v1/faxes/approve or /reject. ' +
      'caller_id and fax_quality default from the chosen Fax Default (template_id), else the account default.\n\n' +
      'Test numbers: with the simulated line (BACKEND=simulated, the default) these destinations behave like the ' +
      'real world, deterministically; any other number is delivered.\n\n' +
      simulatedTestNumbersMarkdown(),
    auth: true,
    body: sendFaxBody,
    idempotent: true,
    responses: {
      '200': {
        description: 'Accepted: committed and its command confirmed by RabbitMQ.',
        schema: envelope(jobIdData),
        example: { status: 1, message: messages.processed, data: { job_id: '…' } },
      },
      ...common,
      '422': err(
        'Invalid field; template_id / smart_document_id not of this account; Base64 that does not decode; not a PDF; file_url not http(s); scheduled_date out of range; Idempotency-Key reused with another body.',
        'template_id: no Fax Default with this id exists in your account',
      ),
      '409': err(
        "The database refused the request as inconsistent with the account's stored data (e.g. its Fax Default was deleted meanwhile); nothing was accepted.",
        dataErrorMessages.integrity('23503'),
      ),
      '413': err(
        'A document is larger than MAX_DOCUMENT_BYTES, or the request larger than MAX_REQUEST_BYTES.',
        'fax_data[0].file_data: document is larger than 20971520 bytes',
      ),
      ...protectedErrors,
      '503': unavailable,
    },
  },
  {
    method: 'post',
    path: '/v1/faxes/forward',
    tag: 'Send Faxes',
    summary: "Forward an existing fax's documents to another number (new job)",
    auth: true,
    body: forwardFaxBody,
    idempotent: true,
    responses: {
      '200': {
        description: 'New job accepted.',
        schema: envelope(jobIdData),
        example: { status: 1, message: messages.processed, data: { job_id: '…' } },
      },
      '404': err('No such job in this account.', messages.faxNotFoundForward),
      '409': err(
        'The source fax awaits approval or was rejected.',
        'Fax cannot be forwarded: its sending was not approved (current state: awaiting_approval)',
      ),
      ...common,
      ...protectedErrors,
      '503': unavailable,
    },
  },
  {
    method: 'post',
    path: '/v1/faxes/cancel-schedule',
    tag: 'Manage Faxes',
    summary: 'Cancel a scheduled fax before it is due (also while it awaits approval)',
    auth: true,
    body: cancelScheduleBody,
    responses: {
      '200': {
        description: 'Cancelled; it will never be sent.',
        schema: envelope(),
        example: { status: 1, message: messages.cancelled },
      },
      '404': err('No such job in this account.', messages.faxNotFound),
      '409': err(
        'No longer scheduled; the message gives its state.',
        'Fax cannot be cancelled: it is no longer scheduled (current state: delivered)',
        0,
        { job_id: '…', state: 'delivered' },
      ),
      ...common,
      ...protectedErrors,
    },
  },
  {
    method: 'post',
    path: '/v1/faxes/approve',
    tag: 'Manage Faxes',
    summary: 'Approve a fax awaiting approval (any token of the account)',
    auth: true,
    body: approveBody,
    responses: {
      '200': {
        description: 'Approved: accepted now, or scheduled when scheduled_date is ahead.',
        schema: envelope(z.object({ job_id: z.string(), state: z.string() })),
        example: { status: 1, message: messages.faxApproved, data: { job_id: '…', state: 'accepted' } },
      },
      '404': err('No such job in this account.', messages.faxNotFound),
      '409': err('Not awaiting approval.', 'Fax is not awaiting approval (current state: rejected)'),
      ...common,
      ...protectedErrors,
    },
  },
  {
    method: 'post',
    path: '/v1/faxes/reject',
    tag: 'Manage Faxes',
    summary: 'Reject a fax awaiting approval: it ends rejected and is never sent',
    auth: true,
    body: rejectBody,
    responses: {
      '200': {
        description: 'Rejected.',
        schema: envelope(z.object({ job_id: z.string(), state: z.string() })),
        example: { status: 1, message: messages.faxRejected, data: { job_id: '…', state: 'rejected' } },
      },
      '404': err('No such job in this account.', messages.faxNotFound),
      '409': err('Not awaiting approval.', 'Fax is not awaiting approval (current state: accepted)'),
      ...common,
      ...protectedErrors,
    },
  },
  {
    method: 'get',
    path: '/v1/faxes',
    tag: 'Manage Faxes',
    summary: 'List faxes, newest first (filter by state, e.g. scheduled or awaiting_approval)',
    auth: true,
    query: [
      ...listQuery,
      {
        name: 'state',
        description: 'Only faxes in this state.',
        schema: { type: 'string', enum: [...jobStates] },
      },
    ],
    responses: {
      '200': {
        description: 'A page of faxes.',
        schema: envelope(z.array(faxJob)).extend({ meta: pageMeta }),
      },
      '422': badCursor,
      ...protectedErrors,
    },
  },
  {
    method: 'get',
    path: '/v1/faxes/{job_id}',
    tag: 'Manage Faxes',
    summary: 'A fax with its state history',
    auth: true,
    params: ['job_id'],
    responses: {
      '200': {
        description: 'The fax.',
        schema: envelope(
          faxJob.extend({
            history: z.array(
              z.object({
                from: z.string().nullable(),
                to: z.string(),
                attempt: z.number(),
                at: z.string(),
                detail: z.unknown(),
              }),
            ),
          }),
        ),
      },
      '404': err('No such job in this account.', messages.faxNotFound),
      ...protectedErrors,
    },
  },
  {
    method: 'post',
    path: '/v1/contacts/delete',
    tag: 'Contacts',
    summary: 'Delete a contact permanently',
    auth: true,
    body: contactDeleteBody,
    responses: {
      '200': {
        description: 'Deleted.',
        schema: envelope(),
        example: { status: 1, message: messages.contactDeleted },
      },
      '422': err(
        'id missing (`The id field is required.`), or no such contact in this account.',
        messages.contactNotFound,
      ),
      '400': common['400'],
      '413': common['413'],
      '415': common['415'],
      ...protectedErrors,
    },
  },
  {
    method: 'delete',
    path: '/v1/esign_templates/{templateId}/field_rule/{templateFieldRuleId}',
    tag: 'Templates',
    summary: 'Delete a template field rule',
    auth: true,
    params: ['templateId', 'templateFieldRuleId'],
    responses: {
      '200': {
        description: 'Deleted.',
        schema: envelope(),
        example: { status: 1, message: messages.ruleDeleted },
      },
      '404': err(
        'No such rule of this template in this account (also the second delete).',
        messages.ruleNotFound,
      ),
      ...protectedErrors,
    },
  },
  {
    method: 'get',
    path: '/v1/esign_templates/{templateId}/fields/{fieldTemplateId}',
    tag: 'Templates',
    summary: 'A template field',
    auth: true,
    params: ['templateId', 'fieldTemplateId'],
    responses: {
      '200': {
        description: 'The field.',
        schema: envelope(
          z.object({
            id: z.string(),
            template_id: z.string(),
            name: z.string(),
            field_type: z.string(),
            required: z.boolean(),
            page: z.number(),
            x: z.number(),
            y: z.number(),
            width: z.number(),
            height: z.number(),
            created_at: z.string(),
          }),
        ),
      },
      '404': err('No such field of this template in this account.', messages.fieldNotFound),
      ...protectedErrors,
    },
  },
  {
    method: 'get',
    path: '/v1/esign_templates/{templateId}/field_rule',
    tag: 'Templates',
    summary: 'The field rules of a template',
    auth: true,
    params: ['templateId'],
    responses: {
      '200': {
        description: 'The rules (possibly none).',
        schema: envelope(
          z.array(
            z.object({
              id: z.string(),
              template_id: z.string(),
              field_id: z.string().nullable(),
              condition: z.unknown(),
              action: z.string(),
              created_at: z.string(),
            }),
          ),
        ),
      },
      '404': err('No such template in this account.', messages.templateNotFound),
      ...protectedErrors,
    },
  },
  {
    method: 'get',
    path: '/v1/esign_documents/{documentId}/theme',
    tag: 'Documents',
    summary: 'The theme of an e-sign document',
    auth: true,
    params: ['documentId'],
    responses: {
      '200': {
        description: 'The theme.',
        schema: envelope(
          z.object({
            document_id: z.string(),
            primary_color: z.string(),
            background_color: z.string(),
            font_family: z.string(),
            logo_url: z.string().nullable(),
            updated_at: z.string(),
          }),
        ),
      },
      '404': err(
        `No such document in this account (\`${messages.documentNotFound}\`), or it has no theme (\`${messages.themeNotFound}\`).`,
        messages.documentNotFound,
      ),
      ...protectedErrors,
    },
  },
  {
    method: 'get',
    path: '/v1/numbers',
    tag: 'Numbers',
    summary: "The account's fax numbers, oldest first",
    auth: true,
    query: listQuery,
    responses: {
      '200': {
        description: 'A page of numbers.',
        schema: envelope(
          z.array(
            z.object({
              id: z.string(),
              number: z.string(),
              label: z.string().nullable(),
              capabilities: z.array(z.string()),
              created_at: z.string(),
            }),
          ),
        ).extend({ meta: pageMeta }),
      },
      '422': badCursor,
      ...protectedErrors,
    },
  },
];

/** Every answer of any route, besides those listed per operation. */
const anyRoute: Record<string, Resp> = {
  '404': err('Unknown path.', 'No such endpoint: GET /v1/nope'),
  '405': err(
    'Known path, other method (Allow header lists the methods).',
    'Method GET is not allowed on /v1/faxes/send; use POST',
  ),
  '500': err('Unexpected error.', 'Internal error; the request may be retried'),
};

export function buildOpenApi(): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of operations) {
    const parameters: unknown[] = [];
    for (const p of op.params ?? [])
      parameters.push({ name: p, in: 'path', required: true, schema: { type: 'string' } });
    for (const q of op.query ?? [])
      parameters.push({
        name: q.name,
        in: 'query',
        required: false,
        description: q.description,
        schema: q.schema,
      });
    if (op.idempotent)
      parameters.push({
        name: 'Idempotency-Key',
        in: 'header',
        required: false,
        description:
          'Optional, 1-255 visible ASCII characters. A retry with the same key and body returns the first answer and creates no second job; the same key with a different body → 422. Remembered IDEMPOTENCY_TTL_HOURS.',
        schema: { type: 'string', maxLength: 255 },
      });
    const responses: Record<string, unknown> = {};
    for (const [code, r] of Object.entries({ ...anyRoute, ...op.responses })) {
      responses[code] = {
        description: r.description,
        ...(r.headers
          ? {
              headers: Object.fromEntries(
                Object.entries(r.headers).map(([h, d]) => [
                  h,
                  { description: d, schema: { type: 'integer' } },
                ]),
              ),
            }
          : {}),
        content: {
          'application/json': {
            schema: json(r.schema ?? errorEnvelope),
            ...(r.example !== undefined ? { example: r.example } : {}),
          },
        },
      };
    }
    paths[op.path] ??= {};
    paths[op.path]![op.method] = {
      tags: [op.tag],
      summary: op.summary,
      ...(op.description ? { description: op.description } : {}),
      operationId: `${op.method}${op.path.replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`,
      security: op.auth ? [{ bearer: [] }] : [],
      ...(parameters.length ? { parameters } : {}),
      ...(op.body
        ? { requestBody: { required: true, content: { 'application/json': { schema: json(op.body) } } } }
        : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'faxline customer API',
      version: '1.0.0',
      description:
        'Every body is the envelope {status, message, data?}. Protected endpoints take `Authorization: Bearer <token>` from POST /v1/auth.',
    },
    servers: [{ url: '/' }],
    tags: [
      'Authentication',
      'Send Faxes',
      'Manage Faxes',
      'Contacts',
      'Templates',
      'Documents',
      'Numbers',
    ].map((name) => ({ name })),
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    paths,
  };
}

const page = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>faxline customer API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:980px;padding:1rem 1.5rem;color:#1b1b1b}
h1{font-size:1.5rem}h2{margin-top:2rem;border-bottom:1px solid #ddd}
details{border:1px solid #ddd;border-radius:6px;margin:.5rem 0;padding:.4rem .8rem}
summary{cursor:pointer}code,pre{font:13px ui-monospace,monospace}
pre{background:#f6f8fa;padding:.6rem;overflow:auto;border-radius:4px}
.m{display:inline-block;min-width:4.2rem;font-weight:700;text-transform:uppercase}
.get{color:#0a6}.post{color:#06c}.delete{color:#c30}.c{font-weight:700;margin-right:.5rem}
</style></head><body>
<h1>faxline customer API</h1><p>Machine-readable: <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1).</p>
<div id="out">Loading…</div>
<script>
const esc=s=>String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
fetch('/openapi.json').then(r=>r.json()).then(doc=>{
  const byTag={};
  for(const [p,ms] of Object.entries(doc.paths))for(const [m,op] of Object.entries(ms))(byTag[op.tags[0]]??=[]).push([m,p,op]);
  let h='';
  for(const t of doc.tags){const ops=byTag[t.name];if(!ops)continue;h+='<h2>'+esc(t.name)+'</h2>';
    for(const [m,p,op] of ops){
      h+='<details><summary><span class="m '+m+'">'+m+'</span><code>'+esc(p)+'</code> — '+esc(op.summary)+(op.security.length?' 🔒':'')+'</summary>';
      if(op.description)h+='<p>'+esc(op.description)+'</p>';
      for(const x of op.parameters??[])h+='<p><code>'+esc(x.name)+'</code> ('+x.in+') '+esc(x.description??'')+'</p>';
      if(op.requestBody)h+='<p>Request body</p><pre>'+esc(JSON.stringify(op.requestBody.content['application/json'].schema,null,2))+'</pre>';
      for(const [c,r] of Object.entries(op.responses)){const ct=r.content['application/json'];
        h+='<p><span class="c">'+c+'</span>'+esc(r.description)+'</p>'+(ct.example!==undefined?'<pre>'+esc(JSON.stringify(ct.example,null,2))+'</pre>':'');}
      h+='</details>';}}
  document.getElementById('out').innerHTML=h;
});
</script></body></html>`;

export function registerDocsRoutes(app: FastifyInstance): void {
  const doc = buildOpenApi();
  app.get('/openapi.json', async () => doc);
  app.get('/docs', async (_req, reply) => reply.type('text/html; charset=utf-8').send(page));
}
