// Cover pages (Smart Templates: uploaded PDF forms; all see them, owners and admins upload and delete,
// through uploadSmartTemplate / deleteSmartTemplate as /v1/smart-templates) and Fax Defaults (the sender identity, quality and cover page a send names): every role sees them (a
// sender chooses one on New fax); owners and admins add, edit and delete them, through the functions
// /v1/fax-defaults calls (createFaxDefault, updateFaxDefault, deleteFaxDefault) and its body rules.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  createFaxDefault,
  deleteFaxDefault,
  FAX_DEFAULT_VIEW_COLUMNS,
  faxDefaultCreateBody,
  faxDefaultUpdateBody,
  type FaxDefaultView,
  getFaxDefault,
  updateFaxDefault,
} from '../../accounts/fax-defaults.ts';
import {
  deleteSmartTemplate,
  SMART_TEMPLATE_VIEW_COLUMNS,
  type SmartTemplateView,
} from '../../accounts/smart-templates.ts';
import type { SessionUser } from '../../auth/console-users.ts';
import { ApiError } from '../../domain/envelope.ts';
import { faxQualities } from '../../domain/fax-default.ts';
import { parseBody } from '../../domain/validate.ts';
import { internal } from '../openapi.ts';
import { faxDefaultMessages } from '../routes/fax-defaults.ts';
import { smartTemplateMessages, uploadSmartTemplate } from '../routes/smart-templates.ts';
import type { ConsoleDeps, Form } from './context.ts';
import { field, formError, postForm, select, textarea } from './forms.ts';
import { html, type Html } from './html.ts';
import { csrfField, describedBy, fieldError, may, when } from './layout.ts';

/** The form's fields, as text (what the user typed, shown again when refused). */
const TEXT = [
  'name',
  'fax_as',
  'sender_name',
  'sender_company',
  'sender_phone',
  'sender_email',
  'cover_footer',
  'header_line',
] as const;
type Draft = Record<(typeof TEXT)[number] | 'fax_quality' | 'cover_page' | 'is_default', string>;

function draftOf(f: Form): Draft {
  const d = {} as Draft;
  for (const k of TEXT) d[k] = (f.get(k) ?? '').trim();
  d.fax_quality = f.get('fax_quality') ?? 'standard';
  d.cover_page = f.get('cover_page') ?? 'true';
  d.is_default = f.get('is_default') ?? 'false';
  return d;
}

function draftOfRow(r: FaxDefaultView): Draft {
  return {
    name: r.name,
    fax_as: r.fax_as,
    sender_name: r.sender_name ?? '',
    sender_company: r.sender_company ?? '',
    sender_phone: r.sender_phone ?? '',
    sender_email: r.sender_email ?? '',
    cover_footer: r.cover_footer ?? '',
    header_line: r.header_line ?? '',
    fax_quality: r.fax_quality,
    cover_page: String(r.cover_page),
    is_default: String(r.is_default),
  };
}

/** The API body of a draft: an empty optional field is null (cleared), as the API takes it. */
function bodyOf(d: Draft): Record<string, unknown> {
  const out: Record<string, unknown> = {
    name: d.name,
    fax_as: d.fax_as.replace(/[\s().-]/g, ''),
    fax_quality: d.fax_quality,
    cover_page: d.cover_page === 'true',
    is_default: d.is_default === 'true',
  };
  for (const k of [
    'sender_name',
    'sender_company',
    'sender_phone',
    'sender_email',
    'cover_footer',
    'header_line',
  ])
    out[k] = d[k as keyof Draft] === '' ? null : d[k as keyof Draft];
  return out;
}

const EMPTY: Draft = {
  name: '',
  fax_as: '',
  sender_name: '',
  sender_company: '',
  sender_phone: '',
  sender_email: '',
  cover_footer: '',
  header_line: '',
  fax_quality: 'standard',
  cover_page: 'true',
  is_default: 'false',
};

const yesNo = [
  ['true', 'yes'],
  ['false', 'no'],
] as const;

/** The fields of a Fax Default form (ids prefixed by `p`, so two forms never share one). */
function fields(p: string, v: Draft, e: Record<string, string>): Html[] {
  const f = (
    name: keyof Draft,
    label: string,
    o: { type?: 'tel' | 'email'; required?: boolean; hint?: string } = {},
  ) => field({ id: `${p}-${name}`, name, label, value: v[name], error: e[name], ...o });
  return [
    f('name', 'Name', { required: true }),
    f('fax_as', 'Fax as (caller id)', {
      type: 'tel',
      required: true,
      hint: "One of this workspace's numbers, E.164 (+15551234567).",
    }),
    select({
      id: `${p}-fax_quality`,
      name: 'fax_quality',
      label: 'Quality',
      options: faxQualities.map((q) => [q, q] as const),
      value: v.fax_quality,
      error: e.fax_quality,
    }),
    select({
      id: `${p}-cover_page`,
      name: 'cover_page',
      label: 'Cover page',
      options: yesNo,
      value: v.cover_page,
    }),
    select({
      id: `${p}-is_default`,
      name: 'is_default',
      label: 'Default for sends that name none',
      options: yesNo,
      value: v.is_default,
    }),
    f('sender_name', 'Sender name (cover "From")'),
    f('sender_company', 'Sender company'),
    f('sender_phone', 'Sender voice phone', { type: 'tel' }),
    f('sender_email', 'Sender email', { type: 'email' }),
    textarea({
      id: `${p}-cover_footer`,
      name: 'cover_footer',
      label: 'Cover footer (small print)',
      value: v.cover_footer,
      error: e.cover_footer,
      maxlength: 1000,
    }),
    f('header_line', 'Header line on every page', {
      hint: 'Empty: none. Placeholders as in the API (docs/api.md), e.g. {date} {page}.',
    }),
  ];
}

/** An API refusal as field errors: the message's "field:" prefix puts it next to that field. */
function errorsOf(err: unknown): Record<string, string> {
  if (!(err instanceof ApiError) || err.http >= 500) throw err;
  const out: Record<string, string> = {};
  for (const part of err.message.split('; ')) {
    const key = /^([a-z_]+):/.exec(part)?.[1];
    if (key && (TEXT as readonly string[]).concat(['fax_quality']).includes(key)) out[key] = part;
    else out.form = out.form ? `${out.form}; ${part}` : part;
  }
  return out;
}

export function registerDefaultsPages(app: FastifyInstance, cd: ConsoleDeps): void {
  const { d } = cd;
  const current = '/console/fax-defaults';

  const listPage = async (u: SessionUser, errors: Record<string, string> = {}, draft = EMPTY) => {
    const rows = (
      await d.tenant.tx(u.accountId, (c) =>
        c.query<FaxDefaultView>(
          `SELECT ${FAX_DEFAULT_VIEW_COLUMNS} FROM fax_defaults WHERE account_id = $1 ORDER BY created_at, id`,
          [u.accountId],
        ),
      )
    ).rows;
    const manage = may(u.role, 'manage');
    return html`<p class="hint">
        A Fax Default is the sender identity, quality and cover page a fax is sent with; New fax offers them.
      </p>
      ${
        rows.length === 0
          ? html`<p>No Fax Defaults yet.</p>`
          : html`<table>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Fax as</th>
                  <th scope="col">Quality</th>
                  <th scope="col">Cover page</th>
                  <th scope="col">Sender</th>
                  <th scope="col">Default</th>
                  ${manage ? html`<th scope="col">Change</th>` : ''}
                </tr>
              </thead>
              <tbody>
                ${rows.map(
                  (r) =>
                    html`<tr>
                      <td class="default-name">${r.name}</td>
                      <td>${r.fax_as}</td>
                      <td>${r.fax_quality}</td>
                      <td>${r.cover_page ? 'yes' : 'no'}</td>
                      <td>${[r.sender_name, r.sender_company].filter(Boolean).join(', ')}</td>
                      <td>${r.is_default ? 'default' : ''}</td>
                      ${
                        manage
                          ? html`<td>
                              <a href="/console/fax-defaults/${r.id}" aria-label="Edit ${r.name}">Edit</a>
                              ${postForm(u, `/console/fax-defaults/${r.id}/delete`, 'Delete', [], {
                                inline: true,
                                button: 'danger',
                                label: `Delete ${r.name}`,
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
        manage
          ? html`<h2>Add a Fax Default</h2>
              ${formError(errors.form)}
              ${postForm(u, '/console/fax-defaults', 'Add Fax Default', fields('n', draft, errors))}`
          : ''
      }`;
  };

  const editPage = (u: SessionUser, id: string, draft: Draft, errors: Record<string, string> = {}) =>
    html`${formError(errors.form)}
      ${postForm(u, `/console/fax-defaults/${id}`, 'Save', fields('e', draft, errors))}
      <p><a href="/console/fax-defaults">Back to Fax Defaults</a></p>`;

  const refused = async (
    req: FastifyRequest,
    reply: FastifyReply,
    err: unknown,
    body: (e: Record<string, string>) => Promise<Html> | Html,
    title: string,
  ) => {
    const errors = errorsOf(err);
    return cd.render(req, reply, title, await body(errors), { status: (err as ApiError).http, current });
  };

  app.get(current, { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req);
    return cd.render(req, reply, 'Fax Defaults', await listPage(u), { current });
  });

  app.post(current, { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    const draft = draftOf(cd.form(req));
    try {
      const body = parseBody(faxDefaultCreateBody, bodyOf(draft));
      const row = await d.tenant.tx(u.accountId, (c) =>
        createFaxDefault(c, u.accountId, body, d.accountLimits.fax_defaults, d.defaultCallerId),
      );
      await cd.record(u, 'fax_default.create', {
        req,
        requestId: req.id,
        object: { type: 'fax_default', id: row.id },
      });
    } catch (err) {
      return refused(req, reply, err, (e) => listPage(u, e, draft), 'Fax Defaults');
    }
    return reply.redirect(current, 303);
  });

  app.get<{ Params: { id: string } }>(
    '/console/fax-defaults/:id',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'manage');
      const row = await d.tenant.tx(u.accountId, (c) => getFaxDefault(c, u.accountId, req.params.id));
      if (!row) throw new ApiError(404, faxDefaultMessages.notFound);
      return cd.render(req, reply, `Fax Default ${row.name}`, editPage(u, row.id, draftOfRow(row)), {
        current,
      });
    },
  );

  app.post<{ Params: { id: string } }>(
    '/console/fax-defaults/:id',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'manage');
      const id = req.params.id;
      const draft = draftOf(cd.form(req));
      try {
        const patch = parseBody(faxDefaultUpdateBody, bodyOf(draft));
        const row = await d.tenant.tx(u.accountId, (c) =>
          updateFaxDefault(c, u.accountId, id, patch, d.defaultCallerId),
        );
        if (!row) throw new ApiError(404, faxDefaultMessages.notFound);
        await cd.record(u, 'fax_default.update', {
          req,
          requestId: req.id,
          object: { type: 'fax_default', id },
        });
      } catch (err) {
        if (err instanceof ApiError && err.http === 404) throw err;
        return refused(req, reply, err, (e) => editPage(u, id, draft, e), 'Edit Fax Default');
      }
      return reply.redirect(current, 303);
    },
  );

  app.post<{ Params: { id: string } }>(
    '/console/fax-defaults/:id/delete',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'manage');
      const id = req.params.id;
      const gone = await d.tenant.tx(u.accountId, (c) => deleteFaxDefault(c, u.accountId, id));
      if (!gone) throw new ApiError(404, faxDefaultMessages.notFound);
      await cd.record(u, 'fax_default.delete', {
        req,
        requestId: req.id,
        object: { type: 'fax_default', id },
      });
      return reply.redirect(current, 303);
    },
  );
  // ---- Cover pages (Smart Templates)
  const coversPage = async (u: SessionUser, errors: Record<string, string> = {}, name = '') => {
    const rows = (
      await d.tenant.tx(u.accountId, (c) =>
        c.query<SmartTemplateView>(
          `SELECT ${SMART_TEMPLATE_VIEW_COLUMNS} FROM smart_templates
            WHERE account_id = $1 AND deleted_at IS NULL ORDER BY created_at, id`,
          [u.accountId],
        ),
      )
    ).rows;
    const manage = may(u.role, 'manage');
    return html`<p class="hint">
        A cover page is a PDF form: the fields named like to_name, from_fax or subject are filled at each send
        (docs/api.md). New fax offers them through the Fax Defaults.
      </p>
      ${
        rows.length === 0
          ? html`<p>No cover pages yet.</p>`
          : html`<table>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">File</th>
                  <th scope="col">Pages</th>
                  <th scope="col">Fields filled at send</th>
                  <th scope="col">Uploaded</th>
                  ${manage ? html`<th scope="col">Delete</th>` : ''}
                </tr>
              </thead>
              <tbody>
                ${rows.map(
                  (r) =>
                    html`<tr>
                      <td class="cover-name">${r.name}</td>
                      <td>${r.file_name ?? ''}</td>
                      <td>${r.page_count ?? ''}</td>
                      <td>
                        ${(r.fields ?? [])
                          .filter((f) => f.fills)
                          .map((f) => `${f.name} (${f.fills})`)
                          .join(', ')}
                      </td>
                      <td>${when(r.created_at)}</td>
                      ${
                        manage
                          ? html`<td>
                              ${postForm(u, `/console/cover-pages/${r.id}/delete`, 'Delete', [], {
                                inline: true,
                                button: 'danger',
                                label: `Delete ${r.name}`,
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
        manage
          ? html`<h2>Upload a cover page</h2>
              ${formError(errors.form)}
              <form method="post" action="/console/cover-pages" enctype="multipart/form-data">
                ${csrfField(u)}
                ${field({ id: 'cp-name', name: 'name', label: 'Name', required: true, value: name, error: errors.name })}
                <label for="cp-file">PDF form</label
                ><input
                  id="cp-file"
                  name="file"
                  type="file"
                  accept=".pdf,application/pdf"
                  required
                  ${describedBy('cp-file', errors.file)}
                />${fieldError('cp-file', errors.file)}
                <button type="submit">Upload</button>
              </form>`
          : ''
      }`;
  };

  app.get('/console/cover-pages', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req);
    return cd.render(req, reply, 'Cover pages', await coversPage(u), { current: '/console/cover-pages' });
  });

  app.post('/console/cover-pages', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'manage');
    const f = cd.form(req);
    const name = (f.get('name') ?? '').trim();
    const file = f.files('file')[0];
    try {
      if (!file) throw new ApiError(422, 'file: choose a PDF form to upload');
      const row = await uploadSmartTemplate(d, u.accountId, {
        name,
        ...(file.fileName ? { file_name: file.fileName.slice(0, 255) } : {}),
        file_data: file.data.toString('base64'),
      });
      await cd.record(u, 'smart_template.create', {
        req,
        requestId: req.id,
        object: { type: 'smart_template', id: row.id },
      });
    } catch (err) {
      if (!(err instanceof ApiError) || err.http >= 500) throw err;
      const key = /^([a-z_]+)/.exec(err.message)?.[1];
      const errors =
        key === 'name'
          ? { name: err.message }
          : key === 'file' || key === 'file_data' || key === 'file_name'
            ? { file: err.message }
            : { form: err.message };
      return cd.render(req, reply, 'Cover pages', await coversPage(u, errors, name), {
        status: err.http,
        current: '/console/cover-pages',
      });
    }
    return reply.redirect('/console/cover-pages', 303);
  });

  app.post<{ Params: { id: string } }>(
    '/console/cover-pages/:id/delete',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'manage');
      const id = req.params.id;
      const gone = await d.tenant.tx(u.accountId, (c) => deleteSmartTemplate(c, u.accountId, id));
      if (!gone) throw new ApiError(404, smartTemplateMessages.notFound);
      await cd.record(u, 'smart_template.delete', {
        req,
        requestId: req.id,
        object: { type: 'smart_template', id },
      });
      return reply.redirect('/console/cover-pages', 303);
    },
  );
}
