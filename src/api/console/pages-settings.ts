// Webhooks and Mail senders (owners and admins). Webhooks go through createWebhook / deleteEndpoint,
// as /v1/webhooks does; mail senders through addMailSender / removeMailSender, as /v1/mail-senders.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { type SenderRow, SENDER_COLUMNS } from '../../accounts/mail.ts';
import type { SessionUser } from '../../auth/console-users.ts';
import { ApiError } from '../../domain/envelope.ts';
import { isId } from '../../domain/ids.ts';
import { eventTypes } from '../../events/types.ts';
import { deleteEndpoint, listEndpoints } from '../../webhooks/repo.ts';
import { internal } from '../openapi.ts';
import { addMailSender, removeMailSender } from '../routes/mail.ts';
import { createWebhook, webhookNotFound } from '../routes/webhooks.ts';
import type { ConsoleDeps } from './context.ts';
import { field, formError, postForm } from './forms.ts';
import { html, type Html } from './html.ts';
import { when } from './layout.ts';

/** The webhook settings when the service did not pass its own (WEBHOOK_ALLOW empty, the default cap). */
export const defaultWebhookSettings = { allow: [] as string[], maxEndpoints: 20 };

/** The field an API message names ("url: …", "event_types[0]: …", "address: …", "caller_id: …"). */
function keyOf(message: string): string {
  return /^([a-z_]+)/.exec(message)?.[1] ?? '';
}

export function registerSettingsPages(app: FastifyInstance, cd: ConsoleDeps): void {
  const { d } = cd;
  const hooks = cd.s.webhooks ?? defaultWebhookSettings;

  /** A refused form shown again with the API's message next to its field (others above the form). */
  async function refused(
    req: FastifyRequest,
    reply: FastifyReply,
    err: unknown,
    show: (errors: Record<string, string>) => Promise<Html>,
    title: string,
    current: string,
    fields: readonly string[],
  ): Promise<FastifyReply> {
    if (!(err instanceof ApiError) || err.http >= 500) throw err;
    const key = keyOf(err.message);
    const errors = fields.includes(key) ? { [key]: err.message } : { form: err.message };
    return cd.render(req, reply, title, await show(errors), { status: err.http, current });
  }

  // ---- Webhooks
  const webhooksPage = async (
    u: SessionUser,
    notice: Html | null,
    errors: Record<string, string> = {},
    draft: { url: string; types: string[] } = { url: '', types: [] },
  ) => {
    const rows = await d.tenant.tx(u.accountId, (c) => listEndpoints(c, u.accountId));
    return html`${notice ?? ''}
      ${
        rows.length === 0
          ? html`<p>No webhooks yet. A webhook receives the fax events (docs/events-webhooks.md).</p>`
          : html`<table>
              <thead>
                <tr>
                  <th scope="col">URL</th>
                  <th scope="col">Events</th>
                  <th scope="col">Created</th>
                  <th scope="col">Paused until</th>
                  <th scope="col">Delete</th>
                </tr>
              </thead>
              <tbody>
                ${rows.map(
                  (w) =>
                    html`<tr>
                      <td class="webhook-url">${w.url}</td>
                      <td>${w.event_types ? w.event_types.join(', ') : 'all'}</td>
                      <td>${when(w.created_at)}</td>
                      <td>${when(w.paused_until)}</td>
                      <td>
                        ${postForm(u, `/console/webhooks/${w.id}/delete`, 'Delete', [], {
                          inline: true,
                          button: 'danger',
                          label: `Delete the webhook ${w.url}`,
                        })}
                      </td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }
      <h2>Add a webhook</h2>
      ${formError(errors.form)}
      ${postForm(u, '/console/webhooks', 'Add webhook', [
        field({
          id: 'w-url',
          name: 'url',
          label: 'URL',
          type: 'url',
          required: true,
          placeholder: 'https://example.com/faxline-events',
          value: draft.url,
          error: errors.url,
        }),
        html`<fieldset>
          <legend>Events (none ticked: all)</legend>
          ${eventTypes.map(
            (t) =>
              html`<label class="check"
                ><input
                  type="checkbox"
                  name="event_types"
                  value="${t}"
                  ${draft.types.includes(t) ? html` checked` : ''}
                />
                ${t}</label
              >`,
          )}
          ${errors.event_types ? html`<p class="error">${errors.event_types}</p>` : ''}
        </fieldset>`,
      ])}`;
  };

  app.get('/console/webhooks', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    return cd.render(req, reply, 'Webhooks', await webhooksPage(u, null), { current: '/console/webhooks' });
  });

  app.post('/console/webhooks', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    const f = cd.form(req);
    const draft = { url: f.get('url') ?? '', types: f.all('event_types') };
    try {
      const e = await createWebhook(
        { tenant: d.tenant, webhookAllow: hooks.allow, maxEndpoints: hooks.maxEndpoints },
        u.accountId,
        { url: draft.url, ...(draft.types.length > 0 ? { event_types: draft.types } : {}) },
      );
      await cd.record(u, 'webhook.create', { req, requestId: req.id, object: { type: 'webhook', id: e.id } });
      const notice = html`<div class="notice" role="status">
        <p>Webhook added. Its signing secret is shown only now; copy it:</p>
        <p class="secret" id="webhook-secret">${e.secret}</p>
      </div>`;
      return cd.render(req, reply, 'Webhooks', await webhooksPage(u, notice), {
        current: '/console/webhooks',
      });
    } catch (err) {
      return refused(
        req,
        reply,
        err,
        (errors) => webhooksPage(u, null, errors, draft),
        'Webhooks',
        '/console/webhooks',
        ['url', 'event_types'],
      );
    }
  });

  app.post<{ Params: { id: string } }>(
    '/console/webhooks/:id/delete',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'manage');
      const id = req.params.id;
      const gone = isId(id) && (await d.tenant.tx(u.accountId, (c) => deleteEndpoint(c, id, u.accountId)));
      if (!gone) throw new ApiError(404, webhookNotFound);
      await cd.record(u, 'webhook.delete', { req, requestId: req.id, object: { type: 'webhook', id } });
      return reply.redirect('/console/webhooks', 303);
    },
  );

  // ---- Mail senders
  const sendersPage = async (
    u: SessionUser,
    errors: Record<string, string> = {},
    draft = { address: '', caller_id: '' },
  ) => {
    const rows = (
      await d.tenant.tx(u.accountId, (c) =>
        c.query<SenderRow>(`SELECT ${SENDER_COLUMNS} FROM mail_senders ORDER BY created_at, id LIMIT 1000`),
      )
    ).rows;
    return html`<p class="hint">
        Mail to &lt;number&gt;@ the installation's mail domain from these senders becomes a fax of this
        workspace (docs/mail.md); mail from anyone else is dropped.
      </p>
      ${
        rows.length === 0
          ? html`<p>No mail senders yet.</p>`
          : html`<table>
              <thead>
                <tr>
                  <th scope="col">Sender</th>
                  <th scope="col">Caller id</th>
                  <th scope="col">Added</th>
                  <th scope="col">Remove</th>
                </tr>
              </thead>
              <tbody>
                ${rows.map(
                  (r) =>
                    html`<tr>
                      <td class="sender-address">${r.address}</td>
                      <td>${r.caller_id ?? ''}</td>
                      <td>${when(r.created_at)}</td>
                      <td>
                        ${postForm(u, `/console/mail-senders/${r.id}/delete`, 'Remove', [], {
                          inline: true,
                          button: 'danger',
                          label: `Remove ${r.address}`,
                        })}
                      </td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }
      <h2>Allow a sender</h2>
      ${formError(errors.form)}
      ${postForm(u, '/console/mail-senders', 'Allow sender', [
        field({
          id: 'm-address',
          name: 'address',
          label: 'Address or *@domain',
          required: true,
          placeholder: 'doctor@clinic.example',
          value: draft.address,
          error: errors.address,
        }),
        field({
          id: 'm-caller',
          name: 'caller_id',
          label: 'Caller id (optional)',
          type: 'tel',
          placeholder: '+15551234567',
          value: draft.caller_id,
          error: errors.caller_id,
          hint: "One of this workspace's numbers; empty: the usual caller id.",
        }),
      ])}`;
  };

  app.get('/console/mail-senders', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    return cd.render(req, reply, 'Mail senders', await sendersPage(u), { current: '/console/mail-senders' });
  });

  app.post('/console/mail-senders', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    const f = cd.form(req);
    const draft = { address: (f.get('address') ?? '').trim(), caller_id: (f.get('caller_id') ?? '').trim() };
    try {
      const row = await addMailSender(d, u.accountId, {
        address: draft.address,
        ...(draft.caller_id ? { caller_id: draft.caller_id } : {}),
      });
      await cd.record(u, 'mail_sender.create', {
        req,
        requestId: req.id,
        object: { type: 'mail_sender', id: row.id },
      });
    } catch (err) {
      return refused(
        req,
        reply,
        err,
        (errors) => sendersPage(u, errors, draft),
        'Mail senders',
        '/console/mail-senders',
        ['address', 'caller_id'],
      );
    }
    return reply.redirect('/console/mail-senders', 303);
  });

  app.post<{ Params: { id: string } }>(
    '/console/mail-senders/:id/delete',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'manage');
      await removeMailSender(d, u.accountId, req.params.id);
      await cd.record(u, 'mail_sender.delete', {
        req,
        requestId: req.id,
        object: { type: 'mail_sender', id: req.params.id },
      });
      return reply.redirect('/console/mail-senders', 303);
    },
  );
}
