// New fax (with Preview), the Outbox (live status), a fax's page (history, attempts,
// Cancel / Resend / Forward). Sending goes through parseBody(sendFaxBody) and acceptSend /
// acceptBroadcast, previews through previewFax, exactly as the API's routes do.
import type { FastifyInstance } from 'fastify';
import type { SessionUser } from '../../auth/console-users.ts';
import { ApiError } from '../../domain/envelope.ts';
import { E164_PATTERN } from '../../domain/e164.ts';
import { isId } from '../../domain/ids.ts';
import { forwardFaxBody, sendFaxBody, type SendFaxBody } from '../../domain/schemas.ts';
import { terminalStates } from '../../domain/states.ts';
import { parseBody } from '../../domain/validate.ts';
import { acceptBroadcast } from '../../intake/broadcast.ts';
import { acceptForward, acceptSend } from '../../intake/send.ts';
import { getHistory, getJob, type JobRow } from '../../jobs/repo.ts';
import { getAttempts } from '../../lines/repo.ts';
import { internal } from '../openapi.ts';
import { cancelFax, listFilters } from '../routes/faxes.ts';
import { previewFax } from '../routes/preview.ts';
import { proofDownloads } from '../routes/proof.ts';
import { html, type Html } from './html.ts';
import { csrfField, describedBy, fieldError, may, when } from './layout.ts';
import type { ConsoleDeps, Form } from './context.ts';

/** Pages rendered by one "Preview" (each one render; the page count covers them all). */
const PREVIEW_PAGES = 6;
const OUTBOX_PAGE = 50;

type FieldErrors = Partial<
  Record<'to' | 'document' | 'fax_default' | 'subject' | 'message' | 'schedule' | 'form', string>
>;

/** The form field an API message names (its prefix: "fax_number: …", "fax_data[0].file_data: …"). */
export function fieldOfMessage(message: string): keyof FieldErrors {
  const key = /^([a-z_]+)/.exec(message)?.[1] ?? '';
  if (key === 'fax_number' || key === 'recipients') return 'to';
  if (key === 'fax_data') return 'document';
  if (key === 'template_id' || key === 'smart_document_id' || key === 'caller_id') return 'fax_default';
  if (key === 'subject') return 'subject';
  if (key === 'message') return 'message';
  if (key === 'scheduled_date') return 'schedule';
  return 'form';
}

interface Choices {
  defaults: { id: string; name: string; cover_page: boolean; is_default: boolean }[];
  contacts: { name: string; fax_number: string }[];
}

interface Draft {
  to: string;
  faxDefault: string;
  subject: string;
  message: string;
  schedule: string;
  docs: { name: string; data: string }[];
}

function draftOf(f: Form): Draft {
  const uploads = f
    .files('document')
    .map((u) => ({ name: u.fileName || 'document', data: u.data.toString('base64') }));
  const names = f.all('carried_name');
  const carried = f.all('carried_data').map((data, i) => ({ name: names[i] ?? 'document', data }));
  return {
    to: f.get('to') ?? '',
    faxDefault: f.get('fax_default') ?? '',
    subject: f.get('subject') ?? '',
    message: f.get('message') ?? '',
    schedule: f.get('schedule') ?? '',
    docs: uploads.length > 0 ? uploads : carried,
  };
}

/** "To": numbers and contact names separated by commas or new lines; a contact is found by its name. */
async function recipientsOf(cd: ConsoleDeps, u: SessionUser, to: string): Promise<string[]> {
  const items = to
    .split(/[,;\n]/)
    .map((x) => x.trim())
    .filter(Boolean);
  if (items.length === 0) throw new ApiError(422, 'fax_number: give a fax number or a contact');
  const out: string[] = [];
  for (const item of items) {
    const inside = /<(\+\d+)>\s*$/.exec(item)?.[1];
    const compact = (inside ?? item).replace(/[\s().-]/g, '');
    if (/^\+\d/.test(compact)) {
      if (!E164_PATTERN.test(compact))
        throw new ApiError(
          422,
          `fax_number: "${item}" is not an E.164 number: +, a first digit 1-9, then 1 to 14 more digits`,
        );
      out.push(compact);
      continue;
    }
    const r = await cd.d.tenant.tx(u.accountId, (c) =>
      c.query<{ fax_number: string }>(
        'SELECT fax_number FROM contacts WHERE lower(name) = lower($1) LIMIT 2',
        [item],
      ),
    );
    if (r.rowCount !== 1)
      throw new ApiError(
        422,
        r.rowCount === 0
          ? `fax_number: "${item}" is neither a fax number (+…) nor the name of a contact`
          : `fax_number: several contacts are named "${item}"; give the number`,
      );
    out.push(r.rows[0]!.fax_number);
  }
  return out;
}

/** The send body the API would receive for this draft (then checked by the same schema). */
async function bodyOf(cd: ConsoleDeps, u: SessionUser, draft: Draft): Promise<SendFaxBody> {
  const numbers = await recipientsOf(cd, u, draft.to);
  if (draft.docs.length === 0) throw new ApiError(422, 'fax_data: choose at least one document');
  const raw: Record<string, unknown> = {
    fax_data: draft.docs.map((x) => ({ file_name: x.name, file_data: x.data })),
  };
  if (numbers.length === 1) raw.fax_number = numbers[0];
  else raw.recipients = numbers.map((n) => ({ fax_number: n }));
  if (draft.faxDefault !== '') raw.template_id = draft.faxDefault;
  if (draft.subject !== '') raw.subject = draft.subject;
  if (draft.message !== '') raw.message = draft.message;
  if (draft.schedule !== '') {
    // datetime-local has no offset: the form says the time is UTC.
    raw.scheduled_date = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$/.test(draft.schedule)
      ? `${draft.schedule}Z`
      : draft.schedule;
  }
  return parseBody(sendFaxBody, raw);
}

async function choicesOf(cd: ConsoleDeps, u: SessionUser): Promise<Choices> {
  return cd.d.tenant.tx(u.accountId, async (c) => ({
    defaults: (
      await c.query<Choices['defaults'][number]>(
        'SELECT id, name, cover_page, is_default FROM fax_defaults ORDER BY is_default DESC, name LIMIT 200',
      )
    ).rows,
    contacts: (
      await c.query<Choices['contacts'][number]>(
        'SELECT name, fax_number FROM contacts ORDER BY name LIMIT 500',
      )
    ).rows,
  }));
}

function sendForm(
  u: SessionUser,
  ch: Choices,
  draft: Draft,
  errors: FieldErrors,
  preview: Html | null,
): Html {
  const e = errors;
  return html`${e.form ? html`<p class="alert" role="alert">${e.form}</p>` : ''}
    <form method="post" action="/console/send" enctype="multipart/form-data">
      ${csrfField(u)}
      <label for="to">To</label>
      <input
        id="to"
        name="to"
        type="text"
        list="contact-list"
        autocomplete="off"
        value="${draft.to}"
        aria-describedby="to-hint${e.to ? ' to-error' : ''}"
        ${e.to ? html` aria-invalid="true"` : ''}
      />
      <p class="hint" id="to-hint">
        A fax number such as +15551234567, or a contact's name; several separated by commas make a broadcast.
      </p>
      ${fieldError('to', e.to)}
      <datalist id="contact-list">
        ${ch.contacts.map((c) => html`<option value="${c.name}">${c.fax_number}</option>`)}
      </datalist>
      <div class="drop" data-drop>
        <label for="document">Document</label>
        <input
          id="document"
          name="document"
          type="file"
          multiple
          accept=".pdf,.tif,.tiff,.jpg,.jpeg,.png,application/pdf,image/tiff,image/jpeg,image/png"
          aria-describedby="document-hint${e.document ? ' document-error' : ''}"
          ${e.document ? html` aria-invalid="true"` : ''}
        />
        <p class="hint" id="document-hint">
          PDF, TIFF, JPEG or PNG; one or more; you can also drop files
          here.${
            draft.docs.length > 0
              ? html` Kept from the preview: ${draft.docs.map((x) => x.name).join(', ')} (choose files to
                replace them).`
              : ''
          }
        </p>
        ${fieldError('document', e.document)}
      </div>
      ${draft.docs.map((x) => html`<input type="hidden" name="carried_name" value="${x.name}" /><input type="hidden" name="carried_data" value="${x.data}" />`)}
      <label for="fax_default">Cover page and Fax Default</label>
      <select id="fax_default" name="fax_default" ${describedBy('fax_default', e.fax_default)}>
        <option value="">The account's default</option>
        ${ch.defaults.map(
          (fd) =>
            html`<option value="${fd.id}" ${draft.faxDefault === fd.id ? html` selected` : ''}>
              ${fd.name}${fd.cover_page ? ' (with cover page)' : ' (no cover page)'}${fd.is_default ? ' — default' : ''}
            </option>`,
        )}
      </select>
      ${fieldError('fax_default', e.fax_default)}
      <label for="subject">Subject</label>
      <input
        id="subject"
        name="subject"
        type="text"
        maxlength="200"
        value="${draft.subject}"
        ${describedBy('subject', e.subject)}
      />
      ${fieldError('subject', e.subject)}
      <label for="message">Message</label>
      <textarea id="message" name="message" maxlength="5000" ${describedBy('message', e.message)}>
${draft.message}</textarea>
      ${fieldError('message', e.message)}
      <label for="schedule">Send later (UTC, optional)</label>
      <input
        id="schedule"
        name="schedule"
        type="datetime-local"
        value="${draft.schedule}"
        ${describedBy('schedule', e.schedule)}
      />
      ${fieldError('schedule', e.schedule)}
      <div>
        <button type="submit" name="action" value="preview" class="secondary">Preview</button>
        <button type="submit" name="action" value="send">Send</button>
      </div>
    </form>
    ${preview ?? ''}`;
}

function stateCell(j: { id: string; state: string }): Html {
  return html`<span data-live-job="${j.id}" data-state="${j.state}">${j.state}</span>`;
}

export function registerFaxPages(app: FastifyInstance, cd: ConsoleDeps): void {
  const { d } = cd;
  const empty: Draft = { to: '', faxDefault: '', subject: '', message: '', schedule: '', docs: [] };

  app.get<{ Querystring: { to?: string } }>('/console/send', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req, 'send');
    const draft = { ...empty, to: typeof req.query.to === 'string' ? req.query.to : '' };
    return cd.render(req, reply, 'New fax', sendForm(u, await choicesOf(cd, u), draft, {}, null), {
      current: '/console/send',
    });
  });

  app.post('/console/send', { schema: internal, bodyLimit: d.maxRequestBytes }, async (req, reply) => {
    const u = cd.userOf(req, 'send');
    const f = cd.form(req);
    const draft = draftOf(f);
    const ch = await choicesOf(cd, u);
    const again = (errors: FieldErrors, preview: Html | null, status: number) =>
      cd.render(req, reply, 'New fax', sendForm(u, ch, draft, errors, preview), {
        status,
        current: '/console/send',
      });
    try {
      const body = await bodyOf(cd, u, draft);
      if (f.get('action') === 'preview') {
        const first = await previewFax(d, u.accountId, body, 1);
        const pages = [first.page];
        for (let n = 2; n <= Math.min(first.page_count, PREVIEW_PAGES); n++)
          pages.push((await previewFax(d, u.accountId, body, n)).page);
        const preview = html`<section aria-labelledby="preview-title">
          <h2 id="preview-title">Preview</h2>
          <p id="page-count">
            ${first.page_count}
            page(s)${first.cover ? ` including ${first.cover.pages} cover page(s)` : ''}${
              first.page_count > PREVIEW_PAGES ? `; the first ${PREVIEW_PAGES} are shown` : ''
            }.
          </p>
          <div class="pages">
            ${pages.map(
              (p) =>
                html`<figure>
                  <img
                    src="data:image/png;base64,${p.png_base64}"
                    width="${p.png_width}"
                    height="${p.png_height}"
                    alt="Page ${p.number} of ${first.page_count}"
                  />
                  <figcaption>Page ${p.number}</figcaption>
                </figure>`,
            )}
          </div>
        </section>`;
        return again({}, preview, 200);
      }
      // The user is recorded first, under the request id the job will carry (docs/console.md).
      await cd.record(u, 'fax.send', { req, requestId: req.id });
      if (body.recipients !== undefined) {
        const r = await acceptBroadcast(
          d,
          u.accountId,
          { ...body, recipients: body.recipients },
          req.id,
          undefined,
        );
        return reply.redirect(`/console/outbox?sent=${r.job_ids.length}`, 303);
      }
      const jobId = await acceptSend(d, u.accountId, body, req.id);
      return reply.redirect(`/console/outbox/${jobId}`, 303);
    } catch (err) {
      if (err instanceof ApiError && (err.http === 422 || err.http === 413 || err.http === 400))
        return again({ [fieldOfMessage(err.message)]: err.message }, null, err.http);
      throw err;
    }
  });

  app.get<{ Querystring: Record<string, unknown> }>(
    '/console/outbox',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req);
      const q: Record<string, unknown> = {};
      // Empty form fields are no filter; a date from the form (no offset) is UTC.
      for (const k of ['state', 'fax_number', 'client_reference', 'created_from', 'created_to']) {
        const v = req.query[k];
        if (typeof v === 'string' && v !== '')
          q[k] = k.startsWith('created_') && /^\d{4}-\d{2}-\d{2}$/.test(v) ? `${v}T00:00:00Z` : v;
      }
      let rows: (JobRow & { sent_by: string | null })[] = [];
      let problem: string | null = null;
      try {
        const f = listFilters(q);
        rows = (
          await d.tenant.tx(u.accountId, (c) =>
            c.query<JobRow & { sent_by: string | null }>(
              `SELECT j.*, (SELECT a.email FROM console_actions a WHERE a.request_id = j.request_id AND a.action = 'fax.send' LIMIT 1) AS sent_by
               FROM fax_jobs j ${f.where.length ? `WHERE ${f.where.map((w) => w.replace(/^(\w+)/, 'j.$1')).join(' AND ')}` : ''}
              ORDER BY j.created_at DESC, j.id DESC LIMIT ${OUTBOX_PAGE}`,
              f.values,
            ),
          )
        ).rows;
      } catch (err) {
        if (!(err instanceof ApiError)) throw err;
        problem = err.message;
      }
      const val = (k: string) => (typeof req.query[k] === 'string' ? (req.query[k] as string) : '');
      const sent = val('sent');
      const body = html`${sent ? html`<p class="notice" role="status">Sent to ${sent} recipients.</p>` : ''}
        <form method="get" action="/console/outbox" class="filters" role="search" aria-label="Filter faxes">
          <div>
            <label for="f-state">State</label
            ><select id="f-state" name="state">
              <option value="">Any</option>
              ${[
                'accepted',
                'scheduled',
                'awaiting_approval',
                'preparing',
                'queued',
                'dialling',
                'sending',
                'retry_waiting',
                'delivered',
                'failed',
                'cancelled',
                'rejected',
              ].map((s) => html`<option${val('state') === s ? html` selected` : ''}>${s}</option>`)}
            </select>
          </div>
          <div>
            <label for="f-number">Number</label
            ><input id="f-number" name="fax_number" type="tel" value="${val('fax_number')}" />
          </div>
          <div>
            <label for="f-from">From date</label
            ><input
              id="f-from"
              name="created_from"
              type="text"
              placeholder="2026-11-01"
              value="${val('created_from')}"
            />
          </div>
          <div>
            <label for="f-to">Before date</label
            ><input
              id="f-to"
              name="created_to"
              type="text"
              placeholder="2026-12-01"
              value="${val('created_to')}"
            />
          </div>
          <div>
            <label for="f-ref">Reference</label
            ><input id="f-ref" name="client_reference" type="text" value="${val('client_reference')}" />
          </div>
          <div><button type="submit" class="secondary">Filter</button></div>
        </form>
        ${problem ? html`<p class="alert" role="alert">${problem}</p>` : ''}
        ${
          rows.length === 0
            ? html`<p>No faxes${Object.keys(q).length ? ' match these filters' : ' yet'}.</p>`
            : html`<table>
                  <caption class="hint">
                    Newest first; states update by themselves.
                  </caption>
                  <thead>
                    <tr>
                      <th scope="col">Fax</th>
                      <th scope="col">To</th>
                      <th scope="col">State</th>
                      <th scope="col">Pages</th>
                      <th scope="col">Reference</th>
                      <th scope="col">Sent by</th>
                      <th scope="col">Created</th>
                    </tr>
                  </thead>
                  <tbody>
                    ${rows.map(
                      (j) =>
                        html`<tr>
                          <td><a href="/console/outbox/${j.id}">${j.id.slice(0, 8)}</a></td>
                          <td>${j.fax_number}</td>
                          <td>${stateCell(j)}</td>
                          <td>${j.page_count ?? ''}</td>
                          <td>${j.client_reference ?? ''}</td>
                          <td>${j.sent_by ?? 'API'}</td>
                          <td>${when(j.created_at)}</td>
                        </tr>`,
                    )}
                  </tbody>
                </table>
                ${
                  rows.length === OUTBOX_PAGE
                    ? html`<p>
                        <a
                          href="/console/outbox?created_to=${encodeURIComponent(rows[rows.length - 1]!.created_at.toISOString())}"
                          >Older faxes</a
                        >
                      </p>`
                    : ''
                }`
        }`;
      return cd.render(req, reply, 'Outbox', body, { current: '/console/outbox' });
    },
  );

  // The live status of the listed faxes (console.js polls it): { states: { id: state } }.
  app.get<{ Querystring: { id?: string | string[] } }>(
    '/console/outbox/status',
    { schema: internal },
    async (req, reply) => {
      const u = req.consoleUser;
      if (!u) return reply.code(401).send({ status: 0, message: 'Not signed in' });
      const ids = [req.query.id ?? []].flat().filter(isId).slice(0, 100);
      const r = await d.tenant.tx(u.accountId, (c) =>
        c.query<{ id: string; state: string }>('SELECT id, state FROM fax_jobs WHERE id = ANY($1::uuid[])', [
          ids,
        ]),
      );
      return reply
        .header('cache-control', 'no-store')
        .send({ states: Object.fromEntries(r.rows.map((x) => [x.id, x.state])) });
    },
  );

  // The transmission report and the sent image: the API's downloads (same checks, 404/409/410 and
  // limit of open downloads), recorded as fax.report_download / fax.image_download once the fax is
  // known to be this account's and its content there, before anything is sent.
  const proof = proofDownloads(d);
  app.get<{ Params: { id: string } }>(
    '/console/outbox/:id/report',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req);
      return proof.report(u.accountId, req.params.id, reply, () =>
        cd.record(u, 'fax.report_download', { req, requestId: req.id, jobId: req.params.id }),
      );
    },
  );
  app.get<{ Params: { id: string }; Querystring: { format?: string } }>(
    '/console/outbox/:id/image',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req);
      const format = req.query.format ?? 'pdf';
      if (format !== 'tiff' && format !== 'pdf') throw new ApiError(422, 'format: must be tiff or pdf');
      return proof.image(u.accountId, format, req.params.id, reply, () =>
        cd.record(u, 'fax.image_download', { req, requestId: req.id, jobId: req.params.id }),
      );
    },
  );

  app.get<{ Params: { id: string } }>('/console/outbox/:id', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req);
    const id = req.params.id;
    const found = isId(id)
      ? await d.tenant.tx(u.accountId, async (c) => {
          const job = await getJob(c, id);
          if (!job) return null;
          const history = await getHistory(c, job.id);
          const attempts = await getAttempts(c, job.id);
          const actions = (
            await c.query<{ email: string; action: string; at: Date }>(
              'SELECT email, action, at FROM console_actions WHERE job_id = $1 OR (request_id = $2 AND action = $3) ORDER BY at, id',
              [job.id, job.request_id, 'fax.send'],
            )
          ).rows;
          return { job, history, attempts, actions };
        })
      : null;
    if (!found) throw new ApiError(404, 'No such fax in this workspace.');
    const { job, history, attempts, actions } = found;
    const final = terminalStates.has(job.state);
    const canAct = may(u.role, 'send');
    const submitted = actions.find((a) => a.action === 'fax.send');
    const body = html`<dl>
        <dt>To</dt>
        <dd>${job.fax_number}${job.options.recipient_name ? ` (${job.options.recipient_name})` : ''}</dd>
        <dt>State</dt>
        <dd>
          ${stateCell(job)}${job.failure_code ? html` — ${job.failure_code}: ${job.failure_reason ?? ''}` : ''}
        </dd>
        <dt>Pages</dt>
        <dd>${job.pages_sent ?? 0} of ${job.page_count ?? '?'} sent</dd>
        <dt>Subject</dt>
        <dd>${job.options.subject ?? ''}</dd>
        <dt>Sent by</dt>
        <dd>${submitted ? submitted.email : job.kind === 'forward' ? 'forward' : 'API'}</dd>
        <dt>Created</dt>
        <dd>${when(job.created_at)}</dd>
        ${
          job.scheduled_at
            ? html`<dt>Scheduled for</dt>
                <dd>${when(job.scheduled_at)}</dd>`
            : ''
        }
      </dl>
      ${
        final
          ? html`<p>
              <a href="/console/outbox/${job.id}/report">Transmission report (PDF)</a> ·
              <a href="/console/outbox/${job.id}/image?format=pdf">Sent image (PDF)</a> ·
              <a href="/console/outbox/${job.id}/image?format=tiff">Sent image (TIFF)</a>
            </p>`
          : ''
      }
      ${
        canAct
          ? html`<div>
              ${
                job.state === 'scheduled' || job.state === 'awaiting_approval'
                  ? html`<form class="inline" method="post" action="/console/outbox/${job.id}/cancel">
                      ${csrfField(u)}<button class="danger" type="submit">Cancel</button>
                    </form> `
                  : ''
              }
              ${final ? html`<form class="inline" method="post" action="/console/outbox/${job.id}/forward">${csrfField(u)}<input type="hidden" name="fax_number" value="${job.fax_number}" /><button class="secondary" type="submit">Resend</button></form>` : ''}
              ${
                final
                  ? html`<form method="post" action="/console/outbox/${job.id}/forward">
                      ${csrfField(u)}<label for="fwd">Forward to</label
                      ><input
                        id="fwd"
                        name="fax_number"
                        type="tel"
                        placeholder="+15551234567"
                        required
                      /><button type="submit" class="secondary">Forward</button>
                    </form>`
                  : ''
              }
            </div>`
          : ''
      }
      <h2>History</h2>
      <table>
        <thead>
          <tr>
            <th scope="col">When</th>
            <th scope="col">From</th>
            <th scope="col">To</th>
            <th scope="col">Attempt</th>
          </tr>
        </thead>
        <tbody>
          ${history.map(
            (h) =>
              html`<tr>
                <td>${when(h.at)}</td>
                <td>${h.from_state ?? ''}</td>
                <td>${h.to_state}</td>
                <td>${h.attempt}</td>
              </tr>`,
          )}
        </tbody>
      </table>
      <h2>Attempts</h2>
      ${
        attempts.length === 0
          ? html`<p>No call yet.</p>`
          : html`<table>
              <thead>
                <tr>
                  <th scope="col">#</th>
                  <th scope="col">Started</th>
                  <th scope="col">Outcome</th>
                  <th scope="col">Pages</th>
                  <th scope="col">Detail</th>
                </tr>
              </thead>
              <tbody>
                ${attempts.map(
                  (a) =>
                    html`<tr>
                      <td>${a.attempt}</td>
                      <td>${when(a.started_at)}</td>
                      <td>${a.outcome ?? 'in progress'}</td>
                      <td>${a.pages_sent ?? ''}</td>
                      <td>${a.failure_message ?? ''}</td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }
      <h2>Console actions</h2>
      ${
        actions.length === 0
          ? html`<p>None.</p>`
          : html`<ul>
              ${actions.map((a) => html`<li>${when(a.at)}: ${a.email} — ${a.action}</li>`)}
            </ul>`
      }`;
    return cd.render(req, reply, `Fax to ${job.fax_number}`, body, { current: '/console/outbox' });
  });

  app.post<{ Params: { id: string } }>(
    '/console/outbox/:id/cancel',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'send');
      await cancelFax(d, u.accountId, req.params.id, req.id);
      await cd.record(u, 'fax.cancel', { req, jobId: req.params.id, requestId: req.id });
      return reply.redirect(`/console/outbox/${req.params.id}`, 303);
    },
  );

  app.post<{ Params: { id: string } }>(
    '/console/outbox/:id/forward',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'send');
      const number = (cd.form(req).get('fax_number') ?? '').replace(/[\s().-]/g, '');
      const body = parseBody(forwardFaxBody, { job_id: req.params.id, fax_number: number });
      await cd.record(u, 'fax.send', { req, requestId: req.id });
      const jobId = await acceptForward(d, u.accountId, body, req.id);
      return reply.redirect(`/console/outbox/${jobId}`, 303);
    },
  );
}
