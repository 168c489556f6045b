// Contacts, Numbers, Users (invite, role, disable) and API keys. Contacts, numbers and keys go
// through src/accounts/ (as their API routes do); users through src/auth/console-users.ts.
import type { FastifyInstance } from 'fastify';
import { apiKeyCreateBody, createKey, listKeys, revokeKeyOf } from '../../accounts/api-keys.ts';
import { contactCreateBody, createContact, deleteContact } from '../../accounts/contacts.ts';
import { NUMBER_COLUMNS, numberUpdateBody, type NumberRow, updateNumber } from '../../accounts/numbers.ts';
import {
  ConsoleUserError,
  consoleRoles,
  createInvite,
  createUser,
  findUser,
  isConsoleRole,
  type ConsoleRole,
  type SessionUser,
  setDisabled,
  setRole,
} from '../../auth/console-users.ts';
import { ApiError } from '../../domain/envelope.ts';
import { isId } from '../../domain/ids.ts';
import { parseBody } from '../../domain/validate.ts';
import { internal } from '../openapi.ts';
import { html, type Html } from './html.ts';
import { csrfField, may, when } from './layout.ts';
import { field, formError, postForm, select } from './forms.ts';
import type { ConsoleDeps } from './context.ts';

/** The roles a user may give: an admin never makes or changes an owner. */
function grantable(role: ConsoleRole): readonly ConsoleRole[] {
  return role === 'owner' ? consoleRoles : consoleRoles.filter((r) => r !== 'owner');
}

export function registerTeamPages(app: FastifyInstance, cd: ConsoleDeps): void {
  const { d } = cd;

  // ---- Contacts
  const contactsPage = async (
    u: SessionUser,
    notice: Html | null,
    errors: { name?: string; fax_number?: string; form?: string },
    draft = { name: '', fax_number: '', company: '' },
  ) => {
    const rows = (
      await d.tenant.tx(u.accountId, (c) =>
        c.query<{ id: string; name: string; fax_number: string; company: string | null }>(
          'SELECT id, name, fax_number, company FROM contacts ORDER BY name, id LIMIT 1000',
        ),
      )
    ).rows;
    const write = may(u.role, 'write');
    return html`${notice ?? ''}
    ${
      rows.length === 0
        ? html`<p>No contacts yet.</p>`
        : html`<table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Fax number</th>
                <th scope="col">Company</th>
                ${write ? html`<th scope="col">Actions</th>` : ''}
              </tr>
            </thead>
            <tbody>
              ${rows.map(
                (c) =>
                  html`<tr>
                    <td class="contact-name">${c.name}</td>
                    <td>${c.fax_number}</td>
                    <td>${c.company ?? ''}</td>
                    ${
                      write
                        ? html`<td>
                            ${may(u.role, 'send') ? html`<a href="/console/send?to=${encodeURIComponent(c.name)}">Send a fax</a> ` : ''}
                            ${postForm(u, `/console/contacts/${c.id}/delete`, 'Delete', [], {
                              inline: true,
                              button: 'secondary',
                              label: `Delete ${c.name}`,
                            })}
                          </td>`
                        : ''
                    }
                  </tr>`,
              )}
            </tbody>
          </table>`
    }
    ${
      write
        ? html`<h2>Add a contact</h2>
            ${formError(errors.form)}
            ${postForm(u, '/console/contacts', 'Add contact', [
              field({
                id: 'c-name',
                name: 'name',
                label: 'Name',
                required: true,
                value: draft.name,
                error: errors.name,
              }),
              field({
                id: 'c-number',
                name: 'fax_number',
                label: 'Fax number',
                type: 'tel',
                required: true,
                placeholder: '+15551234567',
                value: draft.fax_number,
                error: errors.fax_number,
              }),
              field({ id: 'c-company', name: 'company', label: 'Company', value: draft.company }),
            ])}`
        : ''
    }`;
  };

  app.get('/console/contacts', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req);
    return cd.render(req, reply, 'Contacts', await contactsPage(u, null, {}), {
      current: '/console/contacts',
    });
  });

  app.post('/console/contacts', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'write');
    const f = cd.form(req);
    const draft = {
      name: f.get('name') ?? '',
      fax_number: (f.get('fax_number') ?? '').replace(/[\s().-]/g, ''),
      company: f.get('company') ?? '',
    };
    try {
      const body = parseBody(contactCreateBody, {
        name: draft.name,
        fax_number: draft.fax_number,
        ...(draft.company ? { company: draft.company } : {}),
      });
      const row = await d.tenant.tx(u.accountId, (c) =>
        createContact(c, u.accountId, body, d.accountLimits.contacts, (id) => d.contactIds.encode(id)),
      );
      // The contact's id as the API names it (encrypted), as POST /v1/contacts records it.
      await cd.record(u, 'contact.create', {
        req,
        requestId: req.id,
        object: { type: 'contact', id: d.contactIds.encode(row.id) },
      });
    } catch (err) {
      if (!(err instanceof ApiError) || err.http >= 500) throw err;
      const key = /^([a-z_]+):/.exec(err.message)?.[1];
      const errors =
        key === 'name'
          ? { name: err.message }
          : key === 'fax_number'
            ? { fax_number: err.message }
            : { form: err.message };
      return cd.render(req, reply, 'Contacts', await contactsPage(u, null, errors, draft), {
        status: 422,
        current: '/console/contacts',
      });
    }
    return reply.redirect('/console/contacts', 303);
  });

  app.post<{ Params: { id: string } }>(
    '/console/contacts/:id/delete',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'write');
      const id = req.params.id;
      const gone = isId(id) && (await d.tenant.tx(u.accountId, (c) => deleteContact(c, id)));
      if (!gone) throw new ApiError(404, 'No such contact in this workspace.');
      await cd.record(u, 'contact.delete', {
        req,
        requestId: req.id,
        object: { type: 'contact', id: d.contactIds.encode(id) },
      });
      return reply.redirect('/console/contacts', 303);
    },
  );

  // ---- Numbers
  app.get('/console/numbers', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req);
    const rows = (
      await d.tenant.tx(u.accountId, (c) =>
        c.query<NumberRow>(`SELECT ${NUMBER_COLUMNS} FROM numbers ORDER BY number`),
      )
    ).rows;
    const manage = may(u.role, 'manage');
    const body =
      rows.length === 0
        ? html`<p>
            This workspace has no fax numbers; the operator assigns them (npm run admin -- add-number).
          </p>`
        : html`<table>
            <thead>
              <tr>
                <th scope="col">Number</th>
                <th scope="col">Label</th>
                <th scope="col">Receiving</th>
                ${manage ? html`<th scope="col">Change</th>` : ''}
              </tr>
            </thead>
            <tbody>
              ${rows.map(
                (n) =>
                  html`<tr>
                    <td>${n.number}</td>
                    <td>${n.label ?? ''}</td>
                    <td>${n.receive ? 'on' : 'off'}</td>
                    ${
                      manage
                        ? html`<td>
                            <form method="post" action="/console/numbers/${n.id}">
                              ${csrfField(u)} <label for="l-${n.id}">Label for ${n.number}</label
                              ><input id="l-${n.id}" name="label" type="text" value="${n.label ?? ''}" />
                              <label for="r-${n.id}">Receiving for ${n.number}</label
                              ><select id="r-${n.id}" name="receive">
                                <option value="true" ${n.receive ? html` selected` : ''}>on</option>
                                <option value="false" ${n.receive ? '' : html` selected`}>off</option>
                              </select>
                              <button type="submit" class="secondary">Save</button>
                            </form>
                          </td>`
                        : ''
                    }
                  </tr>`,
              )}
            </tbody>
          </table>`;
    return cd.render(req, reply, 'Numbers', body, { current: '/console/numbers' });
  });

  app.post<{ Params: { id: string } }>('/console/numbers/:id', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    const f = cd.form(req);
    const label = f.get('label') ?? '';
    const patch = parseBody(numberUpdateBody, {
      label: label === '' ? null : label,
      receive: f.get('receive') === 'true',
    });
    const row = await d.tenant.tx(u.accountId, (c) => updateNumber(c, req.params.id, patch));
    if (!row) throw new ApiError(404, 'No such number in this workspace.');
    await cd.record(u, 'number.update', { req, requestId: req.id });
    return reply.redirect('/console/numbers', 303);
  });

  // ---- Users
  const usersPage = async (
    u: SessionUser,
    notice: Html | null,
    error?: string,
    draft = { email: '', role: 'sender' },
  ) => {
    const rows = (
      await d.tenant.tx(u.accountId, (c) =>
        c.query<{ id: string; email: string; role: ConsoleRole; disabled_at: Date | null; created_at: Date }>(
          'SELECT id, email, role, disabled_at, created_at FROM console_users ORDER BY created_at, id',
        ),
      )
    ).rows;
    const roles = grantable(u.role);
    return html`${notice ?? ''}
      <table>
        <thead>
          <tr>
            <th scope="col">Email</th>
            <th scope="col">Role</th>
            <th scope="col">Status</th>
            <th scope="col">Change</th>
          </tr>
        </thead>
        <tbody>
          ${rows.map((r) => {
            const editable = r.id !== u.userId && (u.role === 'owner' || r.role !== 'owner');
            return html`<tr>
              <td>${r.email}</td>
              <td>${r.role}</td>
              <td>${r.disabled_at ? `disabled ${when(r.disabled_at)}` : 'active'}</td>
              <td>
                ${
                  editable
                    ? html`<form class="inline" method="post" action="/console/users/${r.id}">
                          ${csrfField(u)}<label for="role-${r.id}">Role of ${r.email}</label
                          ><select id="role-${r.id}" name="role">
                            ${roles.map((x) => html`<option${x === r.role ? html` selected` : ''}>${x}</option>`)}</select
                          ><button class="secondary" type="submit">Change role</button>
                        </form>
                        <form class="inline" method="post" action="/console/users/${r.id}">
                          ${csrfField(u)}<input
                            type="hidden"
                            name="disabled"
                            value="${r.disabled_at ? 'false' : 'true'}"
                          /><button class="${r.disabled_at ? 'secondary' : 'danger'}" type="submit">
                            ${r.disabled_at ? 'Enable' : 'Disable'} ${r.email}
                          </button>
                        </form>`
                    : r.id === u.userId
                      ? 'you'
                      : ''
                }
              </td>
            </tr>`;
          })}
        </tbody>
      </table>
      <h2>Invite a user</h2>
      ${postForm(u, '/console/users', 'Invite', [
        field({
          id: 'i-email',
          name: 'email',
          label: 'Email',
          type: 'email',
          required: true,
          value: draft.email,
          error,
        }),
        select({
          id: 'i-role',
          name: 'role',
          label: 'Role',
          options: roles.map((x) => [x, x] as const),
          value: draft.role,
        }),
        html`<p class="hint">
          owner: everything; admin: everything but owners; sender: send, outbox, inbox, contacts; viewer: read
          only.
        </p>`,
      ])}`;
  };

  app.get('/console/users', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    return cd.render(req, reply, 'Users', await usersPage(u, null), { current: '/console/users' });
  });

  app.post('/console/users', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    const f = cd.form(req);
    const draft = { email: f.get('email') ?? '', role: f.get('role') ?? '' };
    const role = draft.role;
    if (!isConsoleRole(role) || !grantable(u.role).includes(role))
      return cd.render(
        req,
        reply,
        'Users',
        await usersPage(u, null, `Role: you may give ${grantable(u.role).join(', ')}`, draft),
        { status: 422, current: '/console/users' },
      );
    let link: string;
    let email: string;
    try {
      const now = d.clock.now();
      const created = await createUser(cd.auth, {
        accountId: u.accountId,
        email: draft.email,
        role,
        createdBy: u.userId,
      });
      email = created.email;
      const t = await createInvite(cd.auth, {
        userId: created.id,
        accountId: u.accountId,
        now,
        ttlSeconds: cd.s.inviteSeconds,
      });
      link = `${req.protocol}://${req.headers.host ?? 'localhost'}/console/invite/${t}`;
    } catch (err) {
      if (!(err instanceof ConsoleUserError)) throw err;
      return cd.render(req, reply, 'Users', await usersPage(u, null, err.message, draft), {
        status: 422,
        current: '/console/users',
      });
    }
    await cd.s
      .mailInvite(email, link, u.email, u.accountId)
      .catch((err: unknown) => req.log.warn({ err }, 'invitation mail not sent'));
    await cd.record(u, 'user.invite', { req, requestId: req.id });
    const notice = html`<div class="notice" role="status">
      <p>
        Invited ${email} as ${role}. Give them this one-time link (shown only now; valid
        ${Math.round(cd.s.inviteSeconds / 3600)} hours):
      </p>
      <p class="secret" id="invite-link">${link}</p>
    </div>`;
    return cd.render(req, reply, 'Users', await usersPage(u, notice), { current: '/console/users' });
  });

  app.post<{ Params: { id: string } }>('/console/users/:id', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    const target = await findUser(cd.auth, u.accountId, req.params.id);
    if (!target) throw new ApiError(404, 'No such user in this workspace.');
    if (target.id === u.userId)
      throw new ApiError(409, 'You cannot change your own role or disable yourself.');
    if (target.role === 'owner' && u.role !== 'owner')
      throw new ApiError(403, 'Only an owner may change an owner.');
    const f = cd.form(req);
    const role = f.get('role');
    const disabled = f.get('disabled');
    if (role !== undefined) {
      if (!isConsoleRole(role) || !grantable(u.role).includes(role))
        throw new ApiError(422, `Role: you may give ${grantable(u.role).join(', ')}`);
      await setRole(cd.auth, u.accountId, target.id, role);
      await cd.record(u, `user.role:${target.email}:${role}`, { req, requestId: req.id });
    } else if (disabled === 'true' || disabled === 'false') {
      await setDisabled(cd.auth, u.accountId, target.id, disabled === 'true', d.clock.now());
      await cd.record(u, `user.${disabled === 'true' ? 'disable' : 'enable'}:${target.email}`, {
        req,
        requestId: req.id,
      });
    } else throw new ApiError(422, 'Nothing to change.');
    return reply.redirect('/console/users', 303);
  });

  // ---- API keys
  const keysPage = async (u: SessionUser, notice: Html | null, error?: string) => {
    const keys = await d.tenant.tx(u.accountId, (c) => listKeys(c, u.accountId));
    return html`${notice ?? ''}${formError(error)}
      <table>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Key starts</th>
            <th scope="col">Created</th>
            <th scope="col">Last used</th>
            <th scope="col">Revoke</th>
          </tr>
        </thead>
        <tbody>
          ${keys.map(
            (k) =>
              html`<tr>
                <td>${k.name ?? ''}</td>
                <td>${k.key_prefix}…</td>
                <td>${when(k.created_at)}</td>
                <td>${when(k.last_used_at)}</td>
                <td>
                  ${postForm(u, `/console/api-keys/${k.id}/revoke`, 'Revoke', [], {
                    inline: true,
                    button: 'danger',
                    label: `Revoke ${k.name ?? k.key_prefix}`,
                  })}
                </td>
              </tr>`,
          )}
        </tbody>
      </table>
      <h2>Create an API key</h2>
      ${postForm(u, '/console/api-keys', 'Create key', field({ id: 'k-name', name: 'name', label: 'Name', maxlength: 100 }))}`;
  };

  app.get('/console/api-keys', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    return cd.render(req, reply, 'API keys', await keysPage(u, null), { current: '/console/api-keys' });
  });

  app.post('/console/api-keys', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    const name = cd.form(req).get('name') ?? '';
    try {
      const body = parseBody(apiKeyCreateBody, name === '' ? {} : { name });
      const key = await d.tenant.tx(u.accountId, (c) =>
        createKey(c, u.accountId, body.name ?? null, d.accountLimits.api_keys),
      );
      await cd.record(u, 'api_key.create', { req, requestId: req.id });
      const notice = html`<div class="notice" role="status">
        <p>Key created. Its secret is shown only now; copy it:</p>
        <p class="secret" id="api-key-secret">${key.api_key}</p>
      </div>`;
      return cd.render(req, reply, 'API keys', await keysPage(u, notice), { current: '/console/api-keys' });
    } catch (err) {
      if (!(err instanceof ApiError) || err.http >= 500) throw err;
      return cd.render(req, reply, 'API keys', await keysPage(u, null, err.message), {
        status: err.http,
        current: '/console/api-keys',
      });
    }
  });

  app.post<{ Params: { id: string } }>(
    '/console/api-keys/:id/revoke',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'manage');
      await d.tenant.tx(u.accountId, (c) => revokeKeyOf(c, u.accountId, req.params.id));
      await cd.record(u, 'api_key.revoke', { req, requestId: req.id });
      return reply.redirect('/console/api-keys', 303);
    },
  );
}
