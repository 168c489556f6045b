// The customer API's HTTP contract as zod, and its OpenAPI 3.1 document. Each route declares its
// schemas (body, params, querystring, headers, responses per status) in its Fastify route options
// with the helpers below; /openapi.json is generated from the registered routes by @fastify/swagger
// with fastify-type-provider-zod's transform, so a route cannot be missing from it. /docs is a
// small self-contained browsable page (no CDN) that renders /openapi.json.
//
// The route schemas document; they do not validate. Requests are checked in the handlers (parseBody
// and the routes' own checks), which answer with the spec's exact messages and statuses; see
// `documentOnly` below.
import swagger, { type SwaggerOptions } from '@fastify/swagger';
import type { FastifyInstance, FastifySchema } from 'fastify';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { jobStates } from '../domain/states.ts';
import { MAX_LIMIT } from '../domain/page-size.ts';
import { messages } from '../domain/envelope.ts';

/** The spec's tags ("The API is grouped into these tags"), in its order. */
export const tags = [
  'Authentication',
  'Fax',
  'Send Faxes',
  'Receive Faxes',
  'Manage Faxes',
  'Workspace',
  'Numbers',
  'Contacts',
  'Documents',
  'Templates',
] as const;
export type Tag = (typeof tags)[number];

/** A success envelope: { status, message, data? }. */
export const envelope = (data?: z.ZodType) =>
  z.object({
    status: z.number().int().describe('1 = success, 0 = not accepted, 401 = expired/invalid token'),
    message: z.string(),
    ...(data ? { data } : {}),
  });

/** A refusal: { status: 0 (401 for a token refused), message, data? }. */
export const errorEnvelope = z.object({
  status: z.number().int(),
  message: z.string().describe('What went wrong; validation errors name the field and the reason.'),
  data: z.unknown().optional(),
});

/** Cursor pagination metadata of the customer API's lists. */
export const pageMeta = z.object({
  next_cursor: z.string().nullable(),
  previous_cursor: z.string().nullable(),
  has_more: z.boolean(),
  limit: z.number().int(),
});

/**
 * One answer of a route: its schema with the description of the status, an example body, and
 * response headers (name → description; all integers here).
 */
export function answer(
  description: string,
  schema: z.ZodType,
  example?: unknown,
  headers?: Record<string, string>,
): z.ZodType {
  return schema.meta({
    description,
    ...(example !== undefined ? { examples: [example] } : {}),
    ...(headers
      ? {
          headers: Object.fromEntries(
            Object.entries(headers).map(([h, d]) => [h, { type: 'integer', description: d }]),
          ),
        }
      : {}),
  });
}

/** A refusal in the envelope, with an example message. */
export const refusal = (description: string, message: string, status = 0, data?: unknown): z.ZodType =>
  answer(description, errorEnvelope, data === undefined ? { status, message } : { status, message, data });

/** Refusals of routes that take a JSON body. */
export const bodyErrors = {
  '400': refusal(
    'Body is not JSON, not a JSON object, or nested deeper than MAX_JSON_DEPTH.',
    'Request body is not valid JSON',
  ),
  '413': refusal(
    'Body larger than MAX_REQUEST_BYTES (64 KiB on routes without documents), or a document over MAX_DOCUMENT_BYTES.',
    'Request body is too large',
  ),
  '415': refusal('Content-Type is not application/json.', 'Content-Type must be application/json'),
  '422': refusal(
    'A field is missing or invalid, or holds text PostgreSQL cannot store (U+0000, an unpaired surrogate): the message names it and says why.',
    'fax_number: must be an E.164 number: +, a first digit 1-9, then 1 to 14 more digits',
  ),
};

/** Refusals of every route behind the token check (auth and the per-account rate limit). */
export const tokenErrors = {
  '401': refusal(
    'Missing, malformed, unknown, expired or revoked access token; `data` says which.',
    messages.unauthorized,
    401,
    'Access token has expired.',
  ),
  '429': answer(
    'Per-account rate limit; wait `Retry-After` seconds (also in `data.retry_after`).',
    errorEnvelope,
    {
      status: 0,
      message:
        'Too many requests: this account may make 50 requests per second (bursts of 100); retry after 1 s',
      data: { retry_after: 1 },
    },
    { 'Retry-After': 'Seconds to wait.' },
  ),
};

export const unavailable = refusal(
  'PostgreSQL or RabbitMQ unreachable: nothing was accepted; retry (with the same Idempotency-Key).',
  messages.brokerDown,
);

/** `limit` and `cursor` of the customer API's lists (GET /v1/faxes, GET /v1/numbers). */
export const listQuery = {
  limit: z
    .number()
    .int()
    .min(1)
    .default(50)
    .describe(
      `Page size, default 50. Above ${MAX_LIMIT} it is clamped to ${MAX_LIMIT} (meta.limit tells); below 1 or not a whole number → 422.`,
    ),
  cursor: z
    .string()
    .optional()
    .describe(
      'meta.next_cursor or meta.previous_cursor of a previous page, unchanged. Altered or foreign → 422.',
    ),
};

export const badCursor = refusal(
  'limit is not a whole number ≥ 1, or the cursor was altered, forged or belongs to another list.',
  'cursor: is not a cursor this list issued; pass next_cursor or previous_cursor unchanged',
);

/** The Idempotency-Key header of the routes that create jobs. */
export const idempotencyHeader = z.object({
  'Idempotency-Key': z
    .string()
    .max(255)
    .optional()
    .describe(
      'Optional, 1-255 visible ASCII characters. A retry with the same key and body returns the first answer and creates no second job; the same key with a different body → 422. Remembered IDEMPOTENCY_TTL_HOURS.',
    ),
});

/** Answers any route can give, besides its own. */
const anyRoute = {
  '404': refusal('Unknown path.', 'No such endpoint: GET /v1/nope'),
  '405': refusal(
    'Known path, other method (Allow header lists the methods).',
    'Method GET is not allowed on /v1/faxes/send; use POST',
  ),
  '500': refusal('Unexpected error.', 'Internal error; the request may be retried'),
};

/** The state of a fax job, as every job answer shows it. */
export const faxJob = z.object({
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
  options: z
    .object({
      subject: z.string().optional(),
      message: z.string().optional(),
      sender_name: z.string().optional(),
      recipient_name: z.string().optional(),
      approval_required: z.boolean().optional(),
      source: z.literal('email').optional().describe('"email": the fax was made from a mail (docs/mail.md).'),
      message_id: z.string().optional().describe('The Message-ID of that mail.'),
    })
    .describe(
      'The cover-page texts and the approval flag given at send; source and message_id of a fax made from a mail.',
    ),
  page_count: z.number().int().nullable(),
  pages_sent: z.number().int(),
  attempts: z.number().int(),
  next_attempt_at: z.string().nullable(),
  failure: z.object({ code: z.string(), reason: z.string().nullable() }).nullable(),
  created_at: z.string(),
  updated_at: z.string(),
  completed_at: z.string().nullable(),
  client_reference: z.string().nullable().describe('Your reference given at send, or null.'),
  max_dials: z
    .number()
    .int()
    .nullable()
    .describe("The send's max_dials; null = the installation's MAX_DIALS."),
  give_up_after: z
    .number()
    .int()
    .nullable()
    .describe("The send's give_up_after (seconds); null = the installation's KILL_TIME_SECONDS."),
  broadcast_id: z
    .string()
    .nullable()
    .describe('The broadcast this fax is one recipient of (GET /v1/broadcasts/{broadcast_id}), or null.'),
});
export type FaxJobView = z.output<typeof faxJob>;

interface Operation {
  tag: Tag;
  summary: string;
  description?: string;
  /** Behind the token check (Authorization: Bearer). */
  auth: boolean;
  body?: z.ZodType;
  params?: z.ZodType;
  querystring?: z.ZodType;
  headers?: z.ZodType;
  /** Answers by HTTP status; 404, 405 and 500 are added (any route can answer them). */
  responses: Record<string, z.ZodType>;
}

/** The route schema of a customer API operation. */
export function operation(o: Operation): FastifySchema {
  return {
    tags: [o.tag],
    summary: o.summary,
    ...(o.description !== undefined ? { description: o.description } : {}),
    security: o.auth ? [{ bearer: [] }] : [],
    ...(o.body ? { body: o.body } : {}),
    ...(o.params ? { params: o.params } : {}),
    ...(o.querystring ? { querystring: o.querystring } : {}),
    ...(o.headers ? { headers: o.headers } : {}),
    response: { ...anyRoute, ...o.responses },
  };
}

/** Routes outside the customer API (probes, metrics, the documents themselves): not in /openapi.json. */
export const internal: FastifySchema = { hide: true };

/** operationId from the method and path: POST /v1/faxes/send → postV1FaxesSend. */
const operationId = (method: string, url: string) =>
  `${method.toLowerCase()}${url.replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`;

const openApiOptions: SwaggerOptions = {
  openapi: {
    openapi: '3.1.0',
    info: {
      title: 'faxline customer API',
      version: '1.0.0',
      description:
        'Every body is the envelope {status, message, data?}. Protected endpoints take `Authorization: Bearer <token>` from POST /v1/auth.',
    },
    servers: [{ url: '/' }],
    tags: tags.map((name) => ({ name })),
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
  },
  transform: (input) => {
    const out = jsonSchemaTransform(input);
    const schema = out.schema as Record<string, unknown> | undefined;
    if (schema && schema.hide !== true && schema.operationId === undefined) {
      const method = [input.route.method].flat()[0] ?? 'get';
      schema.operationId = operationId(method, input.url);
    }
    return out;
  },
};

/**
 * Sets the server up for route contracts: @fastify/swagger collects every route registered after
 * this (it must come before any route), and the route schemas only document.
 */
export function documentOnly(app: FastifyInstance): void {
  // Validation stays in the handlers, whose answers (status, message naming the field) are the
  // spec's; a schema here never refuses a request nor changes what the handler sees.
  app.setValidatorCompiler(() => () => true);
  // Bodies are serialized as without schemas (JSON.stringify): nothing the handler returns is dropped.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  void app.register(swagger, openApiOptions);
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
.get{color:#0a6}.post{color:#06c}.patch{color:#a60}.delete{color:#c30}.c{font-weight:700;margin-right:.5rem}
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
      for(const [c,r] of Object.entries(op.responses)){const ct=r.content?.['application/json']??{};
        h+='<p><span class="c">'+c+'</span>'+esc(r.description)+'</p>'+(ct.example!==undefined?'<pre>'+esc(JSON.stringify(ct.example,null,2))+'</pre>':'');}
      h+='</details>';}}
  document.getElementById('out').innerHTML=h;
});
</script></body></html>`;

/** /openapi.json (generated from the routes when first asked, then cached) and the /docs page. */
export function registerDocsRoutes(app: FastifyInstance): void {
  app.get('/openapi.json', { schema: internal }, async () => app.swagger());
  app.get('/docs', { schema: internal }, async (_req, reply) =>
    reply.type('text/html; charset=utf-8').send(page),
  );
}
