// The Inbox: received faxes, unread first; a fax shown in the page (its pages rendered as images
// from the received PDF in the preview render processes), mark read/unread, download the PDF, delete.
// Reads and changes go through src/receive/store.ts, as GET/PATCH/DELETE /v1/received-faxes do.
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../../domain/envelope.ts';
import { bilevelToPng } from '../../documents/render/png.ts';
import { X_DPI, Y_DPI } from '../../documents/render/raster.ts';
import {
  deleteReceived,
  getImage,
  getReceived,
  markRead,
  RECEIVED_COLUMNS,
  receivedMessages,
  type ReceivedFaxRow,
} from '../../receive/store.ts';
import { internal } from '../openapi.ts';
import { html } from './html.ts';
import { csrfField, may, when } from './layout.ts';
import type { ConsoleDeps } from './context.ts';

const INBOX_PAGE = 100;
/** Pages of one received fax shown in its page (each is one image request). */
const SHOWN_PAGES = 20;

export function registerInboxPages(app: FastifyInstance, cd: ConsoleDeps): void {
  const { d } = cd;

  app.get('/console/inbox', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req);
    const rows = (
      await d.tenant.tx(u.accountId, (c) =>
        c.query<ReceivedFaxRow>(
          `SELECT ${RECEIVED_COLUMNS} FROM received_faxes WHERE deleted_at IS NULL
            ORDER BY (read_at IS NULL) DESC, created_at DESC, id DESC LIMIT ${INBOX_PAGE}`,
        ),
      )
    ).rows;
    const body =
      rows.length === 0
        ? html`<p>No received faxes.</p>`
        : html`<table>
            <caption class="hint">
              Unread first (in bold), then newest first.
            </caption>
            <thead>
              <tr>
                <th scope="col">Fax</th>
                <th scope="col">From</th>
                <th scope="col">Sender id (CSID)</th>
                <th scope="col">To</th>
                <th scope="col">Pages</th>
                <th scope="col">Status</th>
                <th scope="col">Received</th>
              </tr>
            </thead>
            <tbody>
              ${rows.map(
                (r) =>
                  html`<tr${r.read ? '' : html` class="unread"`}><td><a href="/console/inbox/${r.id}">${r.read ? '' : 'Unread: '}${r.id.slice(0, 8)}</a></td><td>${r.from ?? 'unknown'}</td><td>${r.remote_csid ?? ''}</td><td>${r.to}</td><td>${r.pages}</td><td>${r.status}</td><td>${when(r.received_at ?? r.created_at)}</td></tr>`,
              )}
            </tbody>
          </table>`;
    return cd.render(req, reply, 'Inbox', body, { current: '/console/inbox' });
  });

  app.get<{ Params: { id: string } }>('/console/inbox/:id', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req);
    const write = may(u.role, 'write');
    // Opening a fax marks it read for those who may change the inbox (a viewer only looks).
    const row = await d.tenant.tx(u.accountId, async (c) => {
      const r = await getReceived(c, req.params.id);
      return r && write && !r.read && r.status !== 'receiving' ? await markRead(c, r.id, true) : r;
    });
    if (!row) throw new ApiError(404, receivedMessages.notFound);
    await cd.record(u, 'received_fax.view', {
      req,
      requestId: req.id,
      object: { type: 'received_fax', id: row.id },
    });
    const shown = row.images_deleted_at || row.pdf_bytes === null ? 0 : Math.min(row.pages, SHOWN_PAGES);
    const body = html`<dl>
        <dt>From</dt>
        <dd>${row.from ?? 'unknown'}</dd>
        <dt>Sender id (CSID)</dt>
        <dd id="csid">${row.remote_csid ?? ''}</dd>
        <dt>To</dt>
        <dd>${row.to}</dd>
        <dt>Status</dt>
        <dd>${row.status}${row.result_text ? ` (${row.result_text})` : ''}</dd>
        <dt>Pages</dt>
        <dd>${row.pages}</dd>
        <dt>Received</dt>
        <dd>${when(row.received_at ?? row.created_at)}</dd>
      </dl>
      <p>
        ${row.pdf_bytes !== null ? html`<a href="/console/inbox/${row.id}/pdf">Download PDF</a>` : row.images_deleted_at ? 'The images were deleted.' : ''}
      </p>
      ${
        write
          ? html`<form class="inline" method="post" action="/console/inbox/${row.id}/read">
                ${csrfField(u)}<input
                  type="hidden"
                  name="read"
                  value="${row.read ? 'false' : 'true'}"
                /><button class="secondary" type="submit">${row.read ? 'Mark unread' : 'Mark read'}</button>
              </form>
              <form class="inline" method="post" action="/console/inbox/${row.id}/delete">
                ${csrfField(u)}<button class="danger" type="submit">Delete</button>
              </form>`
          : ''
      }
      <div class="pages">
        ${Array.from({ length: shown }, (_, i) => i + 1).map(
          (n) =>
            html`<figure>
              <img src="/console/inbox/${row.id}/page/${n}" alt="Page ${n} of ${row.pages}" loading="lazy" />
              <figcaption>Page ${n}</figcaption>
            </figure>`,
        )}
      </div>`;
    return cd.render(req, reply, `Fax from ${row.from ?? 'unknown'}`, body, { current: '/console/inbox' });
  });

  app.get<{ Params: { id: string; n: string } }>(
    '/console/inbox/:id/page/:n',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req);
      const n = /^[1-9]\d{0,3}$/.test(req.params.n) ? Number(req.params.n) : 0;
      const got = await d.tenant.tx(u.accountId, (c) => getImage(c, req.params.id, 'pdf'));
      if (n === 0 || 'missing' in got) throw new ApiError(404, receivedMessages.noImage);
      const img = await d.previews.renderPool.run(
        { kind: 'page-image', pdf: got.image, page: n - 1, quality: 'standard' },
        { accountId: u.accountId, signal: AbortSignal.timeout(60_000) },
      );
      if (img.kind !== 'page-image') throw new Error('unexpected render result');
      return reply
        .type('image/png')
        .header('cache-control', 'private, no-store')
        .send(bilevelToPng(img.rows, img.width, img.height, X_DPI, Y_DPI.standard));
    },
  );

  app.get<{ Params: { id: string } }>('/console/inbox/:id/pdf', { schema: internal }, async (req, reply) => {
    const u = cd.userOf(req);
    const got = await d.tenant.tx(u.accountId, (c) => getImage(c, req.params.id, 'pdf'));
    if ('missing' in got) throw new ApiError(404, receivedMessages.noImage);
    await cd.record(u, 'received_fax.download', {
      req,
      requestId: req.id,
      object: { type: 'received_fax', id: req.params.id },
    });
    return reply
      .type('application/pdf')
      .header('content-disposition', `attachment; filename="fax-${req.params.id}.pdf"`)
      .header('cache-control', 'private, no-store')
      .send(got.image);
  });

  app.post<{ Params: { id: string } }>(
    '/console/inbox/:id/read',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'write');
      const read = cd.form(req).get('read') !== 'false';
      const row = await d.tenant.tx(u.accountId, (c) => markRead(c, req.params.id, read));
      if (!row) throw new ApiError(404, receivedMessages.notFound);
      await cd.record(u, 'received_fax.update', {
        req,
        requestId: req.id,
        object: { type: 'received_fax', id: row.id },
      });
      return reply.redirect(read ? `/console/inbox/${row.id}` : '/console/inbox', 303);
    },
  );

  app.post<{ Params: { id: string } }>(
    '/console/inbox/:id/delete',
    { schema: internal },
    async (req, reply) => {
      const u = cd.userOf(req, 'write');
      const done = await d.tenant.tx(u.accountId, (c) => deleteReceived(c, req.params.id));
      if (!done) throw new ApiError(404, receivedMessages.notFound);
      await cd.record(u, 'received_fax.delete', {
        req,
        requestId: req.id,
        object: { type: 'received_fax', id: req.params.id },
      });
      return reply.redirect('/console/inbox', 303);
    },
  );
}
