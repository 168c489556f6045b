// The audit trail at the HTTP edge (docs/audit-retention.md). A route is audited when its options
// carry `config.audit` ({ action, object, id? }); the routes of the customer API get theirs from
// `auditedRoutes` below (one table, so what is audited is read in one place), a route registered
// elsewhere (the console's) may set `config: { audit: {...} }` itself. One onSend hook writes the event:
// after the handler has answered (so the result and status are known) and before the answer leaves,
// awaited, so a client never holds an answer whose event was not written.
//
// The event is its own transaction, not the action's: many actions commit in several transactions or
// none (a refusal), and a refusal must be recorded too. If the write fails, an answer that changed
// something is still sent (its effect is committed; hiding it would make the client retry a send) and
// the failure is logged at error level; an answer that only reads content (failClosed) is replaced by
// 503, so no content leaves unrecorded.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Readable } from 'node:stream';
import { type AuditEvent, recordAuditAs } from '../audit/record.ts';
import type { TenantDb } from '../db/tenant-db.ts';
import { messages } from '../domain/envelope.ts';

export interface RouteAudit {
  /** Dotted action name, e.g. `fax.send`. */
  action: string;
  /** The object's type (`fax`, `received_fax`, `contact`...); null for none (a preview). */
  object: string | null;
  /** Where the object's id is: a path parameter, a body field or a field of the answer's data. */
  id?: { param?: string; body?: string; answer?: string[] };
  /** The route reads content: a failed audit write refuses the answer (503) instead of sending it. */
  failClosed?: boolean;
  /** Query parameters worth keeping in the event's detail (e.g. the image format). */
  query?: string[];
}

const param = (p: string) => ({ param: p });

/** The audited routes of the customer API, by `METHOD path` as registered. */
export const auditedRoutes: Record<string, RouteAudit> = {
  'POST /v1/faxes/send': { action: 'fax.send', object: 'fax', id: { answer: ['job_id', 'broadcast_id'] } },
  'POST /v1/faxes/forward': { action: 'fax.forward', object: 'fax', id: { answer: ['job_id'] } },
  'POST /v1/faxes/cancel-schedule': { action: 'fax.cancel', object: 'fax', id: { body: 'job_id' } },
  'POST /v1/faxes/approve': { action: 'fax.approve', object: 'fax', id: { body: 'job_id' } },
  'POST /v1/faxes/reject': { action: 'fax.reject', object: 'fax', id: { body: 'job_id' } },
  'POST /v1/broadcasts/cancel': {
    action: 'broadcast.cancel',
    object: 'broadcast',
    id: { body: 'broadcast_id' },
  },
  'POST /v1/faxes/preview': { action: 'fax.preview', object: null, failClosed: true },
  'GET /v1/faxes/:job_id/report': {
    action: 'fax.report_download',
    object: 'fax',
    id: param('job_id'),
    failClosed: true,
  },
  'GET /v1/faxes/:job_id/image': {
    action: 'fax.image_download',
    object: 'fax',
    id: param('job_id'),
    failClosed: true,
    query: ['format'],
  },
  'DELETE /v1/faxes/:job_id/content': { action: 'fax.content_delete', object: 'fax', id: param('job_id') },
  'GET /v1/received-faxes/:id': {
    action: 'received_fax.view',
    object: 'received_fax',
    id: param('id'),
    failClosed: true,
  },
  'GET /v1/received-faxes/:id/pdf': {
    action: 'received_fax.download',
    object: 'received_fax',
    id: param('id'),
    failClosed: true,
  },
  'GET /v1/received-faxes/:id/tiff': {
    action: 'received_fax.download',
    object: 'received_fax',
    id: param('id'),
    failClosed: true,
  },
  'PATCH /v1/received-faxes/:id': { action: 'received_fax.update', object: 'received_fax', id: param('id') },
  'DELETE /v1/received-faxes/:id': { action: 'received_fax.delete', object: 'received_fax', id: param('id') },
  'POST /v1/contacts': { action: 'contact.create', object: 'contact', id: { answer: ['id'] } },
  'PATCH /v1/contacts/:id': { action: 'contact.update', object: 'contact', id: param('id') },
  'POST /v1/contacts/delete': { action: 'contact.delete', object: 'contact', id: { body: 'id' } },
  'POST /v1/fax-defaults': { action: 'fax_default.create', object: 'fax_default', id: { answer: ['id'] } },
  'PATCH /v1/fax-defaults/:id': { action: 'fax_default.update', object: 'fax_default', id: param('id') },
  'DELETE /v1/fax-defaults/:id': { action: 'fax_default.delete', object: 'fax_default', id: param('id') },
  'POST /v1/api-keys': { action: 'api_key.create', object: 'api_key', id: { answer: ['id'] } },
  'DELETE /v1/api-keys/:id': { action: 'api_key.revoke', object: 'api_key', id: param('id') },
  'POST /v1/webhooks': { action: 'webhook.create', object: 'webhook', id: { answer: ['id'] } },
  'DELETE /v1/webhooks/:id': { action: 'webhook.delete', object: 'webhook', id: param('id') },
  'POST /v1/smart-templates': {
    action: 'smart_template.create',
    object: 'smart_template',
    id: { answer: ['id'] },
  },
  'DELETE /v1/smart-templates/:id': {
    action: 'smart_template.delete',
    object: 'smart_template',
    id: param('id'),
  },
  'PATCH /v1/numbers/:id': { action: 'number.update', object: 'number', id: param('id') },
  'DELETE /v1/esign_templates/:templateId/field_rule/:templateFieldRuleId': {
    action: 'esign_rule.delete',
    object: 'esign_rule',
    id: param('templateFieldRuleId'),
  },
  'PATCH /v1/workspace': { action: 'workspace.update', object: 'workspace' },
  'GET /v1/audit-events': { action: 'audit_event.list', object: null },
};

/** The audit of a route being registered: its own `config.audit`, else the table's. */
export function auditOf(method: string, url: string, own: RouteAudit | undefined): RouteAudit | undefined {
  return own ?? auditedRoutes[`${method} ${url}`];
}

function field(o: unknown, name: string): string | null {
  if (o === null || typeof o !== 'object') return null;
  const v = (o as Record<string, unknown>)[name];
  return typeof v === 'string' && v.length > 0 ? v : null;
}

function objectId(a: RouteAudit, req: FastifyRequest, payload: unknown): string | null {
  if (a.id?.param) return field(req.params, a.id.param);
  if (a.id?.body) return field(req.body, a.id.body);
  if (a.id?.answer && typeof payload === 'string' && payload.startsWith('{')) {
    try {
      const data = (JSON.parse(payload) as { data?: unknown }).data;
      for (const name of a.id.answer) {
        const v = field(data, name);
        if (v) return v;
      }
    } catch {
      return null;
    }
  }
  return null;
}

/** The event of a request to an audited route (null: no account known, nothing to attribute it to). */
export function eventOf(
  a: RouteAudit,
  req: FastifyRequest,
  status: number,
  payload: unknown,
): AuditEvent | null {
  if (!req.accountId || !req.actor) return null;
  const detail: Record<string, unknown> = {};
  for (const q of a.query ?? []) {
    const v = field(req.query, q);
    if (v !== null) detail[q] = v.slice(0, 32);
  }
  if (status >= 400 && typeof payload === 'string') {
    // The refusal's message (the envelope's), cut short: it names fields, never their values' content.
    try {
      const m = (JSON.parse(payload) as { message?: unknown }).message;
      if (typeof m === 'string') detail.message = m.slice(0, 200);
    } catch {
      // not the envelope: nothing to keep
    }
  }
  return {
    accountId: req.accountId,
    actor: req.actor,
    action: a.action,
    object: a.object === null ? null : { type: a.object, id: objectId(a, req, payload) },
    ip: req.ip,
    userAgent: typeof req.headers['user-agent'] === 'string' ? req.headers['user-agent'] : null,
    result: status < 400 ? 'ok' : 'refused',
    status,
    detail: Object.keys(detail).length > 0 ? detail : null,
  };
}

/** The onSend hook that writes each audited request's event (see the top of this file). */
export function auditHook(d: { tenant: TenantDb }) {
  return async (req: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> => {
    const a = req.routeOptions.config.audit;
    if (!a) return payload;
    const e = eventOf(a, req, reply.statusCode, payload);
    if (!e) return payload;
    try {
      await recordAuditAs(d.tenant.pool, e);
      return payload;
    } catch (err) {
      req.log.error({ err, action: e.action }, 'audit event not written');
      if (!a.failClosed || reply.statusCode >= 400) return payload;
      if (payload instanceof Readable) payload.destroy();
      reply.removeHeader('content-length');
      reply.removeHeader('content-disposition');
      void reply.code(503).header('retry-after', '5').type('application/json; charset=utf-8');
      return JSON.stringify({ status: 0, message: messages.dbDown });
    }
  };
}
