// /v1/smart-templates against the real service: upload (through the PDF sandbox), fields, list, get,
// delete, another account's ids, invalid uploads, and a deleted template: refused for new sends,
// still the cover of a fax accepted with it.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import pg from 'pg';
import { isSealed } from '../src/db/encryption.ts';
import { loadSmartTemplate } from '../src/documents/cover.ts';
import { getRender } from '../src/documents/render/store.ts';
import { encryptedPdf, noPagesPdf } from './fixtures/hostile/build.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';

const letter = readFileSync(new URL('./fixtures/letter-text-2p.pdf', import.meta.url)).toString('base64');
const NOT_FOUND = { status: 0, message: 'Smart Template not found' };

/** A two-page form as a customer might make it: text fields a send fills, and others it leaves. */
async function form(): Promise<Buffer> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  const p1 = doc.addPage([612, 792]);
  doc.addPage([612, 792]);
  p1.drawText('Referral', { x: 72, y: 720, size: 20, font });
  const f = doc.getForm();
  const text = (name: string, y: number) =>
    f.createTextField(name).addToPage(p1, { x: 150, y, width: 300, height: 20 });
  text('To Name', 660);
  text('from_fax', 630);
  text('Subject', 600);
  text('patient_id', 570);
  text('constructor', 540);
  f.createCheckBox('urgent').addToPage(p1, { x: 150, y: 500, width: 12, height: 12 });
  const dd = f.createDropdown('department');
  dd.addOptions(['cardiology', 'oncology']);
  dd.addToPage(p1, { x: 150, y: 460, width: 120, height: 20 });
  return Buffer.from(await doc.save());
}

const FIELDS = [
  { name: 'To Name', type: 'text', fills: 'to_name' },
  { name: 'from_fax', type: 'text', fills: 'from_fax' },
  { name: 'Subject', type: 'text', fills: 'subject' },
  { name: 'patient_id', type: 'text', fills: null },
  { name: 'constructor', type: 'text', fills: null },
  { name: 'urgent', type: 'checkbox', fills: null },
  { name: 'department', type: 'dropdown', fills: null },
];

describe('/v1/smart-templates', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let db: pg.Client;
  let token: string;
  let other: string;
  let seed: Awaited<ReturnType<typeof seedAccount>>;
  let otherSeed: Awaited<ReturnType<typeof seedAccount>>;

  before(async () => {
    s = await startService({ env: { RENDER_PAGE_SECONDS: '1', SMART_TEMPLATES_PER_ACCOUNT: '3' } });
    seed = await seedAccount(s);
    otherSeed = await seedAccount(s);
    token = await tokenFor(s.url, seed.api_key);
    other = await tokenFor(s.url, otherSeed.api_key);
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
  });
  after(async () => {
    await db.end();
    await s.dropAll();
  });

  const upload = async (body: Record<string, unknown>, t = token) =>
    call(s.url, 'POST', '/v1/smart-templates', { token: t, body });

  it('uploads a form, lists its fields, lists, gets and deletes it', async () => {
    const pdf = await form();
    const u = await upload({
      name: 'Referral',
      file_name: 'referral.pdf',
      file_data: pdf.toString('base64'),
    });
    assert.equal(u.http, 200, JSON.stringify(u.body));
    assert.equal(u.body.message, 'Smart Template uploaded successfully');
    const t = u.body.data;
    assert.match(t.id, /^[0-9a-f-]{36}$/);
    assert.equal(t.name, 'Referral');
    assert.equal(t.file_name, 'referral.pdf');
    assert.equal(t.page_count, 2);
    assert.equal(t.byte_size, pdf.length);
    assert.deepEqual(t.fields, FIELDS);
    const stored = await db.query('SELECT account_id, pdf FROM smart_templates WHERE id = $1', [t.id]);
    assert.ok(isSealed(stored.rows[0].pdf), 'the PDF is stored encrypted (docs/encryption.md)');
    const opened = await loadSmartTemplate(db, stored.rows[0].account_id, t.id);
    assert.ok(Buffer.from(opened!.pdf).equals(pdf), 'the PDF is stored as uploaded');

    const fields = await call(s.url, 'GET', `/v1/smart-templates/${t.id}/fields`, { token });
    assert.equal(fields.http, 200);
    assert.equal(fields.body.message, 'Smart Template fields retrieved successfully');
    assert.deepEqual(fields.body.data, FIELDS);
    const g = await call(s.url, 'GET', `/v1/smart-templates/${t.id}`, { token });
    assert.equal(g.http, 200);
    assert.deepEqual(g.body.data, t);

    // The seed's template, then this one, in pages of 1.
    const p1 = await call(s.url, 'GET', '/v1/smart-templates?limit=1', { token });
    assert.equal(p1.http, 200);
    assert.equal(p1.body.message, 'Smart Templates retrieved successfully');
    assert.equal(p1.body.data[0].id, seed.smart_document_id);
    assert.equal(p1.body.meta.has_more, true);
    const p2 = await call(s.url, 'GET', `/v1/smart-templates?limit=1&cursor=${p1.body.meta.next_cursor}`, {
      token,
    });
    assert.deepEqual(p2.body.data, [t]);
    assert.equal(p2.body.meta.has_more, false);

    // A send fills the template: its two pages come first.
    const preview = await call(s.url, 'POST', '/v1/faxes/preview', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'l.pdf', file_data: letter }],
        smart_document_id: t.id,
        subject: 'Lab results',
      },
    });
    assert.equal(preview.http, 200, JSON.stringify(preview.body));
    assert.equal(preview.body.data.page_count, 4);
    assert.equal(preview.body.data.cover.smart_document_id, t.id);

    const del = await call(s.url, 'DELETE', `/v1/smart-templates/${t.id}`, { token });
    assert.equal(del.http, 200);
    assert.deepEqual(del.body, { status: 1, message: 'Smart Template has been deleted successfully.' });
    const gone = await db.query('SELECT count(*)::int AS n FROM smart_templates WHERE id = $1', [t.id]);
    assert.equal(gone.rows[0].n, 0, 'no fax used it: removed with its PDF');
    for (const path of [`/v1/smart-templates/${t.id}`, `/v1/smart-templates/${t.id}/fields`]) {
      const r = await call(s.url, 'GET', path, { token });
      assert.equal(r.http, 404);
      assert.deepEqual(r.body, NOT_FOUND);
    }
    const again = await call(s.url, 'DELETE', `/v1/smart-templates/${t.id}`, { token });
    assert.equal(again.http, 404);
  });

  it('reads the fields of a template stored before they were kept, on first GET', async () => {
    const pdf = await form();
    const r = await db.query<{ id: string }>(
      'INSERT INTO smart_templates (account_id, name, pdf) VALUES ($1, $2, $3) RETURNING id',
      [seed.account_id, 'Old', pdf],
    );
    const id = r.rows[0]!.id;
    const list = await call(s.url, 'GET', '/v1/smart-templates?limit=1000', { token });
    assert.equal(list.body.data.find((x: { id: string }) => x.id === id).fields, null);
    const f = await call(s.url, 'GET', `/v1/smart-templates/${id}/fields`, { token });
    assert.equal(f.http, 200, JSON.stringify(f.body));
    assert.deepEqual(f.body.data, FIELDS);
    const row = await db.query('SELECT page_count, fields FROM smart_templates WHERE id = $1', [id]);
    assert.equal(row.rows[0].page_count, 2);
    assert.deepEqual(row.rows[0].fields, FIELDS, 'kept for the next reads');
    await db.query('DELETE FROM smart_templates WHERE id = $1', [id]);
  });

  it('refuses a template beyond SMART_TEMPLATES_PER_ACCOUNT; deleted ones do not count', async () => {
    const acc = await seedAccount(s); // 1 template
    const t = await tokenFor(s.url, acc.api_key);
    const file_data = (await form()).toString('base64');
    for (const name of ['Two', 'Three']) assert.equal((await upload({ name, file_data }, t)).http, 200);
    const over = await upload({ name: 'Four', file_data }, t);
    assert.equal(over.http, 422);
    assert.equal(
      over.body.message,
      'Smart Template limit reached: an account may have at most 3 Smart Templates; delete one first',
    );
    // At the cap, the PDF is not checked at all: a file the checks would refuse gets the cap's answer.
    const unchecked = await upload({ name: 'Four', file_data: encryptedPdf().toString('base64') }, t);
    assert.equal(unchecked.http, 422);
    assert.equal(unchecked.body.message, over.body.message);
    assert.equal(
      (await call(s.url, 'DELETE', `/v1/smart-templates/${acc.smart_document_id}`, { token: t })).http,
      200,
    );
    assert.equal((await upload({ name: 'Four', file_data }, t)).http, 200, 'room again');
  });

  it("answers another account's ids exactly like missing ones, and deletes nothing of them", async () => {
    const theirs = otherSeed.smart_document_id;
    for (const id of [theirs, '00000000-0000-4000-8000-000000000000', 'nope']) {
      for (const [method, path] of [
        ['GET', `/v1/smart-templates/${id}`],
        ['GET', `/v1/smart-templates/${id}/fields`],
        ['DELETE', `/v1/smart-templates/${id}`],
      ] as const) {
        const r = await call(s.url, method, path, { token });
        assert.equal(r.http, 404, `${method} ${path}`);
        assert.deepEqual(r.body, NOT_FOUND);
      }
    }
    const still = await db.query('SELECT deleted_at FROM smart_templates WHERE id = $1', [theirs]);
    assert.equal(still.rows[0].deleted_at, null);
    const list = await call(s.url, 'GET', '/v1/smart-templates', { token: other });
    assert.deepEqual(
      list.body.data.map((x: { id: string }) => x.id),
      [theirs],
    );
  });

  it('refuses invalid uploads with 422 naming the field; PDFs go through the sandbox checks', async () => {
    const good = (await form()).toString('base64');
    const cases: [Record<string, unknown>, string, string?][] = [
      [{ file_data: good }, 'name: is required'],
      [{ name: ' ', file_data: good }, 'name: must not be empty'],
      [{ name: 'x' }, 'file_data: is required'],
      [{ name: 'x', file_data: 'not base64!' }, 'file_data: is not valid Base64'],
      [{ name: 'x', file_data: Buffer.from('hello world!').toString('base64') }, 'file_data: is not a PDF'],
      [{ name: 'x', file_data: good, pages: 3 }, 'pages: is not a field of a Smart Template upload'],
      // Refused by the sandbox with the code a send's document would get.
      [{ name: 'x', file_data: encryptedPdf().toString('base64') }, 'file_data: ', 'pdf_encrypted'],
      [{ name: 'x', file_data: noPagesPdf().toString('base64') }, 'file_data: ', 'pdf_no_pages'],
    ];
    for (const [body, message, code] of cases) {
      const r = await upload(body);
      assert.equal(r.http, 422, `${JSON.stringify(body).slice(0, 80)} → ${JSON.stringify(r.body)}`);
      assert.ok(r.body.message.startsWith(message), r.body.message);
      if (code) assert.deepEqual(r.body.data, { code });
    }
    const n = await db.query('SELECT count(*)::int AS n FROM smart_templates WHERE account_id = $1', [
      seed.account_id,
    ]);
    assert.equal(n.rows[0].n, 1, 'only the seed template');
  });

  it("a delete racing a send that is recording a fax with the template keeps it as that fax's cover", async () => {
    const u = await upload({ name: 'Raced', file_data: (await form()).toString('base64') });
    assert.equal(u.http, 200);
    const id = u.body.data.id as string;
    // A send in flight: its fax is inserted (the foreign key check locks the template's row), not yet
    // committed, while the customer deletes the template.
    const sending = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await sending.connect();
    try {
      await sending.query('BEGIN');
      const job = await sending.query<{ id: string }>(
        `INSERT INTO fax_jobs (id, account_id, kind, state, fax_number, caller_id, fax_quality, fax_priority, smart_document_id)
         VALUES (gen_random_uuid(), $1, 'send', 'awaiting_approval', '+15551234567', $2, 'standard', 'regular', $3)
         RETURNING id`,
        [seed.account_id, seed.numbers[0], id],
      );
      const del = call(s.url, 'DELETE', `/v1/smart-templates/${id}`, { token });
      // The delete is waiting for the send's lock on the template.
      const pid = (await sending.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      await eventually(async () => {
        const w = await db.query('SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))', [
          pid,
        ]);
        return (w.rowCount ?? 0) > 0;
      });
      await sending.query('COMMIT');
      assert.equal((await del).http, 200);
      const kept = await db.query<{ smart_document_id: string | null }>(
        'SELECT smart_document_id FROM fax_jobs WHERE id = $1',
        [job.rows[0]!.id],
      );
      assert.equal(kept.rows[0]!.smart_document_id, id, 'the fax keeps its Smart Template');
      const row = await db.query<{ deleted_at: Date | null }>(
        'SELECT deleted_at FROM smart_templates WHERE id = $1',
        [id],
      );
      assert.equal(row.rowCount, 1, 'only marked deleted: a fax refers to it');
      assert.notEqual(row.rows[0]!.deleted_at, null);
      assert.equal((await call(s.url, 'GET', `/v1/smart-templates/${id}`, { token })).http, 404);
    } finally {
      await sending.query('ROLLBACK').catch(() => undefined);
      await sending.end();
    }
  });

  it('a deleted template is refused for new sends but stays the cover of a fax accepted with it', async () => {
    const u = await upload({ name: 'Held', file_data: (await form()).toString('base64') });
    assert.equal(u.http, 200);
    const id = u.body.data.id as string;
    const send = (o: Record<string, unknown> = {}) =>
      call(s.url, 'POST', '/v1/faxes/send', {
        token,
        body: {
          fax_number: '+15551234567',
          fax_data: [{ file_name: 'l.pdf', file_data: letter }],
          smart_document_id: id,
          ...o,
        },
      });
    const held = await send({ approval_required: true, subject: 'Kept' });
    assert.equal(held.http, 200, JSON.stringify(held.body));
    const jobId = held.body.data.job_id as string;

    assert.equal((await call(s.url, 'DELETE', `/v1/smart-templates/${id}`, { token })).http, 200);
    const list = await call(s.url, 'GET', '/v1/smart-templates', { token });
    assert.ok(
      list.body.data.every((x: { id: string }) => x.id !== id),
      'not listed',
    );
    assert.equal((await call(s.url, 'GET', `/v1/smart-templates/${id}`, { token })).http, 404);
    const refused = await send();
    assert.equal(refused.http, 422);
    assert.equal(
      refused.body.message,
      'smart_document_id: no Smart Template with this id exists in your account',
    );
    const preview = await call(s.url, 'POST', '/v1/faxes/preview', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'l.pdf', file_data: letter }],
        smart_document_id: id,
      },
    });
    assert.equal(preview.http, 422);

    assert.equal(
      (await call(s.url, 'POST', '/v1/faxes/approve', { token, body: { job_id: jobId } })).http,
      200,
    );
    // The cover's values are sealed in fax_renders: read as the service reads them.
    const render = await eventually(async () => {
      const r = await getRender(db, jobId);
      return r ? { cover: r.cover, page_count: r.pageCount } : null;
    }, 60_000);
    assert.equal(render.page_count, 4, 'the two template pages, then the two-page letter');
    assert.equal(render.cover?.subject, 'Kept');
    const job = await call(s.url, 'GET', `/v1/faxes/${jobId}`, { token });
    assert.equal(job.body.data.smart_document_id, id);
    assert.equal(job.body.data.failure, null);
  });
});
