// GET /v1/audit-events: the account's audit trail, newest first, in cursor pages; filters by action,
// actor, object and dates; `Accept: text/csv` answers the page as CSV (docs/audit-retention.md).
// Read under the account's row-level security: another account's events are never visible.
import type { FastifyInstance, FastifyReply } from 'fastify';
import { z } from 'zod';
import { ApiError, ok } from '../../domain/envelope.ts';
import { accountOf } from '../auth-hook.ts';
import type { RouteDeps } from '../deps.ts';
import { answer, badCursor, envelope, listQuery, operation, pageMeta, tokenErrors } from '../openapi.ts';
import { listPage, type PageMeta } from '../paginate.ts';

const actorTypes = ['api_key', 'user', 'amqp_sender', 'mail_sender', 'system', 'admin'] as const;

const eventView = z.object({
  id: z.string(),
  created_at: z.string().describe('When it happened (UTC, microseconds).'),
  actor_type: z.enum(actorTypes),
  actor_id: z.string().nullable().describe('The API key id, user id or broker user; null for the system.'),
  action: z.string().describe('e.g. fax.send, fax.image_download, received_fax.download, contact.update.'),
  object_type: z.string().nullable(),
  object_id: z.string().nullable(),
  ip: z.string().nullable(),
  user_agent: z.string().nullable(),
  result: z.enum(['ok', 'refused']),
  status: z.number().int().nullable().describe('The HTTP status of the answer; null outside HTTP.'),
  detail: z.record(z.string(), z.unknown()).nullable(),
});

const COLUMNS = `id, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
  actor_type, actor_id, action, object_type, object_id, ip, user_agent, result, status, detail`;

export type EventRow = z.infer<typeof eventView>;

const contract = operation({
  tag: 'Workspace',
  summary: "The account's audit trail (who accessed which fax content, who changed which setting)",
  description:
    'Newest first, in cursor pages. With `Accept: text/csv` the page is answered as CSV (header row, ' +
    'then one row per event; a cell beginning with =, +, - or @ is prefixed with an apostrophe so a ' +
    "spreadsheet does not run it), and the next page's cursor is in the `X-Next-Cursor` header. Events are " +
    "kept AUDIT_RETENTION_DAYS (default 2192, six years). Only the account's owners may read it: today " +
    'every API key is an owner.',
  auth: true,
  querystring: z.object({
    ...listQuery,
    action: z.string().optional().describe('Only this action (e.g. fax.image_download).'),
    actor: z.string().optional().describe('Only events of this actor id (an API key id, a user id).'),
    actor_type: z.enum(actorTypes).optional().describe('Only events of this kind of actor.'),
    object: z.string().optional().describe('Only events about this object id (a fax id, a contact id).'),
    object_type: z
      .string()
      .optional()
      .describe('Only events about objects of this type (fax, received_fax...).'),
    from: z.string().optional().describe('Only events at or after this time (ISO 8601).'),
    to: z.string().optional().describe('Only events before this time (ISO 8601).'),
  }),
  responses: {
    '200': answer('A page of events.', envelope(z.array(eventView)).extend({ meta: pageMeta })),
    '422': badCursor,
    ...tokenErrors,
  },
});

function when(raw: unknown, name: string): string | null {
  if (raw === undefined) return null;
  const t = typeof raw === 'string' && /^\d{4}-\d{2}-\d{2}/.test(raw) ? Date.parse(raw) : NaN;
  if (Number.isNaN(t)) throw new ApiError(422, `${name}: must be a date or date-time (ISO 8601), given once`);
  return new Date(t).toISOString();
}

function text(raw: unknown, name: string, max: number): string | null {
  if (raw === undefined) return null;
  if (typeof raw !== 'string' || raw.length === 0 || raw.length > max)
    throw new ApiError(422, `${name}: must be given once, 1 to ${max} characters`);
  return raw;
}

const CSV_COLUMNS: (keyof EventRow)[] = [
  'created_at',
  'id',
  'actor_type',
  'actor_id',
  'action',
  'object_type',
  'object_id',
  'result',
  'status',
  'ip',
  'user_agent',
  'detail',
];

/** One CSV cell: quoted, quotes doubled, and a formula-leading value made inert. */
export function csvCell(v: unknown): string {
  let s = v === null || v === undefined ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v);
  if (/^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return `"${s.replace(/"/g, '""')}"`;
}

function toCsv(rows: readonly EventRow[]): string {
  const lines = [CSV_COLUMNS.join(',')];
  for (const r of rows) lines.push(CSV_COLUMNS.map((c) => csvCell(r[c])).join(','));
  return `${lines.join('\r\n')}\r\n`;
}

function wantsCsv(accept: string | undefined): boolean {
  return accept !== undefined && /(^|,)\s*text\/csv\s*(;|,|$)/i.test(accept);
}

/**
 * One page of an account's audit events, newest first, filtered as GET /v1/audit-events is (action,
 * actor, actor_type, object, object_type, from, to; limit and cursor): that route and the console's
 * Audit page. 422 naming a bad filter or cursor.
 */
export async function auditEvents(
  d: Pick<RouteDeps, 'cursors' | 'tenant'>,
  accountId: string,
  q: Record<string, unknown>,
): Promise<{ rows: EventRow[]; meta: PageMeta }> {
  const where: string[] = [];
  const values: unknown[] = [];
  const add = (sql: string, v: unknown) => {
    values.push(v);
    where.push(sql.replace('$', `$${values.length}`));
  };
  const action = text(q.action, 'action', 64);
  const actor = text(q.actor, 'actor', 200);
  const actorType = text(q.actor_type, 'actor_type', 32);
  if (actorType !== null && !(actorTypes as readonly string[]).includes(actorType))
    throw new ApiError(422, `actor_type: must be one of ${actorTypes.join(', ')}`);
  const object = text(q.object, 'object', 200);
  const objectType = text(q.object_type, 'object_type', 64);
  const from = when(q.from, 'from');
  const to = when(q.to, 'to');
  if (action !== null) add('action = $', action);
  if (actor !== null) add('actor_id = $', actor);
  if (actorType !== null) add('actor_type = $', actorType);
  if (object !== null) add('object_id = $', object);
  if (objectType !== null) add('object_type = $', objectType);
  if (from) add('created_at >= $::timestamptz', from);
  if (to) add('created_at < $::timestamptz', to);
  const context = `audit|${accountId}|${JSON.stringify([action, actor, actorType, object, objectType, from, to])}`;
  return listPage<EventRow>(d, accountId, q, context, {
    from: 'audit_events',
    columns: COLUMNS,
    where,
    values,
    order: 'desc',
  });
}

/** Answers a page of events as CSV (the API with `Accept: text/csv`, the console's download). */
export function sendAuditCsv(reply: FastifyReply, r: Awaited<ReturnType<typeof auditEvents>>): FastifyReply {
  if (r.meta.next_cursor) void reply.header('x-next-cursor', r.meta.next_cursor);
  return reply
    .type('text/csv; charset=utf-8')
    .header('content-disposition', 'attachment; filename="audit-events.csv"')
    .header('cache-control', 'private, no-store')
    .send(toCsv(r.rows));
}

export function registerAuditEventRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/audit-events',
    { schema: contract, preHandler: d.auth },
    async (req, reply) => {
      const accountId = accountOf(req);
      const r = await auditEvents(d, accountId, req.query);
      if (wantsCsv(req.headers.accept)) return sendAuditCsv(reply, r);
      return { ...ok('Audit events', r.rows), meta: r.meta };
    },
  );
}
