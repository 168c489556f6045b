// The HTTP intake. Every answer, including framework errors, is the customer API's envelope.
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyRequest,
} from 'fastify';
import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import { pipeline, Transform } from 'node:stream';
import { FailureLimiter } from '../auth/failures.ts';
import { DEFAULT_MAX_TOKENS_PER_KEY } from '../auth/service.ts';
import type { Config } from '../config.ts';
import { isDbUnavailable } from '../db/errors.ts';
import { auditHook, auditOf } from './audit.ts';
import { isTokenCheck, requireToken } from './auth-hook.ts';
import type { ApiDeps, HttpEdge, RouteDeps } from './deps.ts';
import { ApiError, messages, type Envelope } from '../domain/envelope.ts';
import { DEFAULT_MAX_RECIPIENTS } from '../intake/broadcast.ts';
import {
  type JsonLimits,
  type JsonShapeProblem,
  JsonShapeScanner,
  jsonShapeMessages,
} from '../domain/json-shape.ts';
import { maxJsonValues } from '../domain/schemas.ts';
import { documentOnly, registerDocsRoutes } from './openapi.ts';
import { registerAuditEventRoutes } from './routes/audit-events.ts';
import { registerConsole } from './console/plugin.ts';
import { registerAuthRoutes } from './routes/auth.ts';
import { registerFaxContentRoutes } from './routes/fax-content.ts';
import { registerContactRoutes } from './routes/contacts.ts';
import { registerEsignRoutes } from './routes/esign.ts';
import { registerFaxDefaultRoutes } from './routes/fax-defaults.ts';
import { registerFaxRoutes } from './routes/faxes.ts';
import { registerBroadcastRoutes } from './routes/broadcasts.ts';
import { registerNumberRoutes } from './routes/numbers.ts';
import { registerMailRoutes } from './routes/mail.ts';
import { registerReceivedFaxRoutes } from './routes/received-faxes.ts';
import { registerApiKeyRoutes } from './routes/api-keys.ts';
import { registerOpsRoutes } from './routes/ops.ts';
import { registerWorkspaceRoutes } from './routes/workspace.ts';
import { registerPreviewRoutes } from './routes/preview.ts';
import { registerProofRoutes } from './routes/proof.ts';
import { registerSmartTemplateRoutes } from './routes/smart-templates.ts';

export const defaultHttpEdge: HttpEdge = {
  requestTimeoutSeconds: 60,
  headersTimeoutSeconds: 10,
  trustProxy: '',
  maxJsonDepth: 32,
  authFailuresPerAddress: 20,
  authFailuresPerKey: 5,
  authFailureWindowSeconds: 300,
  maxTokensPerKey: DEFAULT_MAX_TOKENS_PER_KEY,
};

export function httpEdge(cfg: Config): HttpEdge {
  return {
    requestTimeoutSeconds: cfg.HTTP_REQUEST_TIMEOUT_SECONDS,
    headersTimeoutSeconds: cfg.HTTP_HEADERS_TIMEOUT_SECONDS,
    trustProxy: cfg.HTTP_TRUST_PROXY,
    maxJsonDepth: cfg.MAX_JSON_DEPTH,
    authFailuresPerAddress: cfg.AUTH_FAILURES_PER_ADDRESS,
    authFailuresPerKey: cfg.AUTH_FAILURES_PER_KEY,
    authFailureWindowSeconds: cfg.AUTH_FAILURE_WINDOW_SECONDS,
    maxTokensPerKey: cfg.AUTH_MAX_TOKENS_PER_KEY,
  };
}

/**
 * Routes that carry documents (Base64 PDFs) accept bodies up to MAX_REQUEST_BYTES; every other route,
 * /v1/auth included, at most SMALL_BODY_BYTES, refused with 413 from its Content-Length or as it
 * streams.
 */
const DOCUMENT_ROUTES = new Set(['/v1/faxes/send', '/v1/faxes/preview']);
export const SMALL_BODY_BYTES = 64 * 1024;

/** A framework-level client error (timeout, bad request line, huge headers) in the envelope, raw. */
function clientErrorReply(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [http, reason, message] =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'Request Timeout', 'Request was not received in time']
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'Request headers are too large']
        : [400, 'Bad Request', 'Malformed HTTP request'];
  // A reply is possible only while nothing of one has been written on this connection.
  const res = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (socket.writable && !res?.headersSent) {
    const body = JSON.stringify({ status: 0, message });
    socket.write(
      `HTTP/1.1 ${http} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,100}$/;

/** Content types Fastify's JSON parser takes (application/json with any parameters). */
const JSON_TYPE = /^\s*application\/json\s*(;|$)/i;

/**
 * Passes a JSON body through while its shape is within `limits`; past them, drops the rest and ends
 * with the refusal (400 too deep, 413 too many values) in the API's envelope.
 */
function shapeGuard(limits: JsonLimits): Transform {
  const scanner = new JsonShapeScanner(limits);
  let problem: JsonShapeProblem | null = null;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      if (problem === null) problem = scanner.feed(chunk);
      if (problem === null) cb(null, chunk);
      else cb();
    },
    flush(cb) {
      if (problem === 'depth') cb(new ApiError(400, jsonShapeMessages.depth(limits.maxDepth)));
      else if (problem === 'values') cb(new ApiError(413, jsonShapeMessages.values(limits.maxValues)));
      else cb();
    },
  });
}

function envelopeFor(err: unknown): { http: number; body: Envelope; headers: Record<string, string> } {
  if (err instanceof ApiError) return { http: err.http, body: err.toEnvelope(), headers: err.headers };
  const e = err as { code?: string; statusCode?: number; message?: string };
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return {
        http: 415,
        body: { status: 0, message: 'Content-Type must be application/json' },
        headers: {},
      };
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { http: 413, body: { status: 0, message: 'Request body is too large' }, headers: {} };
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return { http: 400, body: { status: 0, message: 'Request body is not valid JSON' }, headers: {} };
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return {
        http: 400,
        body: { status: 0, message: 'Request body is empty; a JSON object is required' },
        headers: {},
      };
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return {
        http: 400,
        body: { status: 0, message: 'Content-Length does not match the body' },
        headers: {},
      };
  }
  if (isDbUnavailable(err))
    return { http: 503, body: { status: 0, message: messages.dbDown }, headers: { 'retry-after': '5' } };
  if (e.statusCode === 400 && err instanceof SyntaxError)
    return { http: 400, body: { status: 0, message: 'Request body is not valid JSON' }, headers: {} };
  if (e.statusCode && e.statusCode >= 400 && e.statusCode < 500)
    return { http: e.statusCode, body: { status: 0, message: e.message ?? 'Bad request' }, headers: {} };
  return {
    http: 500,
    body: { status: 0, message: 'Internal error; the request may be retried' },
    headers: {},
  };
}

export function buildServer(d: ApiDeps): FastifyInstance {
  const edge: HttpEdge = { ...defaultHttpEdge, ...d.edge };
  const requestTimeoutMs = edge.requestTimeoutSeconds * 1000;
  const app = Fastify({
    loggerInstance: d.log.child({ component: 'http' }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: d.maxRequestBytes,
    genReqId: (req) => {
      const h = req.headers['x-request-id'];
      return typeof h === 'string' && REQUEST_ID.test(h) ? h : randomUUID();
    },
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    // A whole request (headers and body) must arrive within the request timeout, its headers within
    // the headers timeout: a body trickled a byte at a time no longer holds a connection (Node checks
    // every connectionsCheckingInterval, so the cut comes at most a quarter of the timeout late).
    requestTimeout: requestTimeoutMs,
    http: {
      headersTimeout: Math.min(edge.headersTimeoutSeconds, edge.requestTimeoutSeconds) * 1000,
      connectionsCheckingInterval: Math.max(100, Math.min(5000, requestTimeoutMs / 4)),
    },
    clientErrorHandler: clientErrorReply,
    ...(edge.trustProxy !== '' ? { trustProxy: edge.trustProxy } : {}),
  });

  // Route contracts: documented in /openapi.json, checked by the handlers (see documentOnly).
  documentOnly(app);

  // JSON bodies: nesting deeper than the limit, or more values than the largest legitimate body holds
  // (a send to BROADCAST_MAX_RECIPIENTS recipients with all their fields), are refused from a scan of
  // the bytes as they arrive, before anything is parsed: such a body is cheap to send and costs
  // recursion or millions of allocations everywhere after (JSON.parse, the unstorable-text walk, zod,
  // the Idempotency-Key fingerprint) on the loop every account shares. Past the limit the rest of the
  // body is read and dropped, not kept, so that the client gets its answer once it has sent it.
  const limits = {
    maxDepth: edge.maxJsonDepth,
    maxValues: maxJsonValues(d.maxBroadcastRecipients ?? DEFAULT_MAX_RECIPIENTS),
  };
  app.addHook('preParsing', async (req, _reply, payload) =>
    // pipeline, not pipe: a client that aborts mid-body destroys the guard too, so the request ends
    // with the error instead of waiting on a stream that will never end.
    JSON_TYPE.test(req.headers['content-type'] ?? '')
      ? pipeline(payload, shapeGuard(limits), () => undefined)
      : payload,
  );

  app.addHook('onRequest', async (req, reply) => {
    void reply.header('x-request-id', req.id);
  });
  // An answer sent before the body was read (401 from the token check, 413, 429) closes the
  // connection, as Fastify does after a body it could not parse: the rest is never read.
  app.addHook('onSend', async (req, reply) => {
    if (!req.raw.complete) void reply.header('connection', 'close');
  });
  // The audit trail: audited routes write their event before their answer leaves (src/api/audit.ts).
  app.addHook('onSend', auditHook(d));
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? 'unmatched';
    d.metrics.httpRequests.inc({ route, method: req.method, status: String(reply.statusCode) });
    d.metrics.httpDuration.observe({ route, method: req.method }, reply.elapsedTime / 1000);
    req.log.info(
      {
        method: req.method,
        route,
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime),
      },
      'request',
    );
  });

  app.setErrorHandler((err, req, reply) => {
    const { http, body, headers } = envelopeFor(err);
    if (http >= 500 && http !== 503) req.log.error({ err }, 'request failed');
    else if (http === 503) req.log.warn({ reason: body.message }, 'request refused: dependency unavailable');
    void reply.code(http).headers(headers).send(body);
  });

  const routes = new Map<string, Set<string>>();
  app.addHook('onRoute', (r) => {
    // The token check runs in onRequest, before the body is read or parsed, on every route that
    // asks for it (as preHandler or onRequest): a request with no or a bad token costs no parsing.
    const pre = r.preHandler === undefined ? [] : [r.preHandler].flat();
    const checks = pre.filter(isTokenCheck);
    if (checks.length > 0) {
      r.preHandler = pre.filter((h) => !isTokenCheck(h));
      r.onRequest = [...(r.onRequest === undefined ? [] : [r.onRequest].flat()), ...checks];
    }
    if (r.bodyLimit === undefined && !DOCUMENT_ROUTES.has(r.url)) r.bodyLimit = SMALL_BODY_BYTES;
    const methods = Array.isArray(r.method) ? r.method : [r.method];
    const audit = auditOf(methods[0] ?? '', r.url, r.config?.audit);
    if (audit) r.config = { ...r.config, audit };
    const set = routes.get(r.url) ?? new Set<string>();
    for (const m of methods) set.add(m);
    routes.set(r.url, set);
  });

  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split('?')[0] ?? '';
    const allowed = matchMethods(routes, path);
    if (allowed.length > 0) {
      void reply
        .code(405)
        .header('allow', allowed.join(', '))
        .send({
          status: 0,
          message: `Method ${req.method} is not allowed on ${path}; use ${allowed.join(' or ')}`,
        });
      return;
    }
    void reply.code(404).send({ status: 0, message: `No such endpoint: ${req.method} ${path}` });
  });

  const rd: RouteDeps = { ...d, auth: requireToken(d) };
  // The routes are registered in a plugin, so after @fastify/swagger has loaded and sees each one.
  void app.register(async (api) => registerRoutes(api, d, rd, edge));
  return app;
}

function registerRoutes(app: FastifyInstance, d: ApiDeps, rd: RouteDeps, edge: HttpEdge): void {
  registerOpsRoutes(app, d);
  registerAuthRoutes(app, {
    ...d,
    authLimits: {
      perAddress: new FailureLimiter({
        limit: edge.authFailuresPerAddress,
        windowSeconds: edge.authFailureWindowSeconds,
        clock: d.clock,
      }),
      perKey: new FailureLimiter({
        limit: edge.authFailuresPerKey,
        windowSeconds: edge.authFailureWindowSeconds,
        clock: d.clock,
      }),
      maxTokensPerKey: edge.maxTokensPerKey,
    },
  });
  registerFaxRoutes(app, rd);
  registerBroadcastRoutes(app, rd);
  registerProofRoutes(app, rd);
  registerFaxContentRoutes(app, rd);
  registerAuditEventRoutes(app, rd);
  registerContactRoutes(app, rd);
  registerEsignRoutes(app, rd);
  registerNumberRoutes(app, rd);
  registerMailRoutes(app, rd);
  registerReceivedFaxRoutes(app, rd);
  registerWorkspaceRoutes(app, rd);
  registerApiKeyRoutes(app, rd);
  registerFaxDefaultRoutes(app, rd);
  registerSmartTemplateRoutes(app, rd);
  registerDocsRoutes(app);
  registerPreviewRoutes(app, d);
  // The web console: its own form parsers, error pages and headers, encapsulated in a child plugin.
  void app.register(async (c) => registerConsole(c, d));
}

/** Methods registered for a concrete path, matching :params segment by segment. */
function matchMethods(routes: Map<string, Set<string>>, path: string): string[] {
  const segs = path.split('/');
  const out = new Set<string>();
  for (const [pattern, methods] of routes) {
    const ps = pattern.split('/');
    if (ps.length !== segs.length) continue;
    if (ps.every((p, i) => p.startsWith(':') || p === segs[i]))
      for (const m of methods) if (m !== 'HEAD') out.add(m);
  }
  return [...out].sort();
}

export type { FastifyRequest };
