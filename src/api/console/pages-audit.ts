// The Audit page (owners only, as GET /v1/audit-events): the account's audit trail newest first,
// filtered by action, actor, object and dates, in cursor pages, with the page as CSV. The query is
// auditEvents, the API route's own; viewing it is recorded as audit_event.list, as there.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { listKeys } from '../../accounts/api-keys.ts';
import { auditEvents, type EventRow, sendAuditCsv } from '../routes/audit-events.ts';
import { internal } from '../openapi.ts';
import type { ConsoleDeps } from './context.ts';
import { field, formError, select } from './forms.ts';
import { ApiError } from '../../domain/envelope.ts';
import { html } from './html.ts';
import { when } from './layout.ts';

const FILTERS = ['action', 'actor', 'object', 'from', 'to'] as const;
const PAGE = 50;

/** The filters (and cursor, page size) of the request, without the empty ones (the API refuses an empty filter). */
function queryOf(req: FastifyRequest): Record<string, string> {
  const raw = req.query as Record<string, unknown>;
  const out: Record<string, string> = {};
  for (const k of [...FILTERS, 'cursor', 'limit'] as const) {
    const v = raw[k];
    if (typeof v === 'string' && v.trim() !== '') out[k] = v.trim();
  }
  return out;
}

export function registerAuditPages(app: FastifyInstance, cd: ConsoleDeps): void {
  const { d } = cd;

  /** Who the actors are, by id: the account's users (email) and API keys (name). */
  const actorsOf = async (accountId: string) => {
    const { users, keys } = await d.tenant.tx(accountId, async (c) => ({
      users: (
        await c.query<{ id: string; email: string }>('SELECT id, email FROM console_users ORDER BY email, id')
      ).rows,
      keys: await listKeys(c, accountId),
    }));
    const names = new Map<string, string>();
    for (const u of users) names.set(u.id, u.email);
    for (const k of keys) names.set(k.id, `API key ${k.name ?? `${k.key_prefix}…`}`);
    return names;
  };

  app.get('/console/audit', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'audit');
    const q = queryOf(req);
    // A filter the API refuses (a date it cannot read, a stale cursor): the form again, the message
    // next to its field, no events.
    let r: Awaited<ReturnType<typeof auditEvents>>;
    const errors: Record<string, string> = {};
    try {
      r = await auditEvents(d, u.accountId, { limit: String(PAGE), ...q });
    } catch (err) {
      if (!(err instanceof ApiError) || err.http >= 500) throw err;
      const key = /^([a-z_]+):/.exec(err.message)?.[1] ?? 'form';
      errors[(FILTERS as readonly string[]).includes(key) ? key : 'form'] = err.message;
      r = { rows: [], meta: { next_cursor: null, previous_cursor: null, has_more: false, limit: PAGE } };
    }
    await cd.record(u, 'audit_event.list', { req, requestId: req.id });
    const names = await actorsOf(u.accountId);
    const actor = (e: EventRow) =>
      e.actor_id ? (names.get(e.actor_id) ?? `${e.actor_type} ${e.actor_id}`) : e.actor_type;
    const filters = new URLSearchParams(Object.entries(q).filter(([k]) => k !== 'cursor'));
    const older = r.meta.next_cursor
      ? `/console/audit?${new URLSearchParams([...filters, ['cursor', r.meta.next_cursor]])}`
      : null;
    const csv = `/console/audit.csv?${new URLSearchParams(Object.entries(q))}`;
    const body = html`${formError(errors.form)}
      <form class="filters" method="get" action="/console/audit" role="search" aria-label="Filter events">
        ${field({ id: 'a-action', name: 'action', error: errors.action, label: 'Action', value: q.action, placeholder: 'fax.image_download' })}
        ${select({
          id: 'a-actor',
          name: 'actor',
          label: 'Actor',
          options: [['', 'anyone'] as const, ...[...names].map(([id, n]) => [id, n] as const)],
          value: q.actor ?? '',
        })}
        ${field({ id: 'a-object', name: 'object', error: errors.object, label: 'Object id (a fax, contact…)', value: q.object })}
        ${field({ id: 'a-from', name: 'from', error: errors.from, label: 'From (UTC)', type: 'date', value: q.from })}
        ${field({ id: 'a-to', name: 'to', error: errors.to, label: 'Before (UTC)', type: 'date', value: q.to })}
        <button type="submit" class="secondary">Filter</button>
      </form>
      <p><a href="${csv}" download>Download this page as CSV</a></p>
      ${
        r.rows.length === 0
          ? html`<p>No events.</p>`
          : html`<table>
              <caption class="hint">
                Newest first.
              </caption>
              <thead>
                <tr>
                  <th scope="col">When</th>
                  <th scope="col">Actor</th>
                  <th scope="col">Action</th>
                  <th scope="col">Object</th>
                  <th scope="col">Result</th>
                  <th scope="col">Address</th>
                </tr>
              </thead>
              <tbody>
                ${r.rows.map(
                  (e) =>
                    html`<tr>
                      <td>${when(e.created_at)}</td>
                      <td>${actor(e)}</td>
                      <td>${e.action}</td>
                      <td>${e.object_type ? `${e.object_type} ${e.object_id ?? ''}` : ''}</td>
                      <td>${e.result}${e.status ? ` (${e.status})` : ''}</td>
                      <td>${e.ip ?? ''}</td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }
      ${older ? html`<p><a href="${older}">Older events</a></p>` : ''}`;
    return cd.render(req, reply, 'Audit', body, {
      current: '/console/audit',
      status: Object.keys(errors).length > 0 ? 422 : 200,
    });
  });

  app.get('/console/audit.csv', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'audit');
    const r = await auditEvents(d, u.accountId, { limit: String(PAGE), ...queryOf(req) });
    await cd.record(u, 'audit_event.list', { req, requestId: req.id });
    return sendAuditCsv(reply, r);
  });
}
