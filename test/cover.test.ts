// Cover pages: values and drawing (read back with PDFium's text extraction), Smart Template filling,
// and the whole path through the service: send → cover from the Fax Default or Smart Template →
// rendered TIFF stored in fax_renders with real page sizes.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import {
  buildCover,
  coverValues,
  drawCoverPage,
  fillSmartTemplate,
  formatDate,
  type CoverContext,
} from '../src/documents/cover.ts';
import { PdfSandbox, defaultSandboxLimits } from '../src/documents/check.ts';
import { Pdfium } from '../src/documents/render/engine.ts';
import { getRender } from '../src/documents/render/store.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { libtiff } from './support/render-tiff.ts';

const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));
const NOW = new Date('2026-11-26T14:30:00Z');

const ctx = (o: Partial<CoverContext> = {}): CoverContext => ({
  timeZone: 'America/New_York',
  faxDefault: {
    id: '00000000-0000-4000-8000-000000000001',
    name: 'Front desk',
    fax_as: '+15550100001',
    fax_quality: 'standard',
    cover_page: true,
    sender_name: 'Front Desk',
    sender_company: 'Demo Clinic',
    sender_phone: '+1 555 010 0000',
    sender_email: 'frontdesk@example.org',
    cover_footer: 'CONFIDENTIAL: this fax is meant for the named recipient only.',
  },
  smartTemplate: null,
  faxNumber: '+15551234567',
  callerId: '+15550100001',
  options: { recipient_name: 'Dr. Ada Moreau', subject: 'Lab results', message: 'Please find attached.' },
  ...o,
});

/** A Smart Template as a customer might upload it: a page with named text fields. */
async function smartForm(names: string[]): Promise<Uint8Array> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  const page = doc.addPage([612, 792]);
  const form = doc.getForm();
  names.forEach((n, i) => {
    page.drawText(`${n}:`, { x: 40, y: 740 - i * 40, size: 10, font });
    const f = form.createTextField(n);
    f.addToPage(page, { x: 140, y: 730 - i * 40, width: 420, height: 24 });
  });
  return doc.save();
}

let pdfium: Pdfium;
async function textOf(pdf: Uint8Array): Promise<string[]> {
  pdfium ??= await Pdfium.load();
  const doc = pdfium.open(pdf);
  try {
    return Array.from({ length: doc.pageCount }, (_, i) => doc.text(i));
  } finally {
    doc.close();
  }
}

describe('cover values and drawing', () => {
  // Smart Templates are filled in the PDF sandbox (its processes start on the first fill).
  const sandbox = new PdfSandbox({ ...defaultSandboxLimits, concurrency: 1 });
  const o = { filler: sandbox };
  after(() => sandbox.close());

  it("prints the date in the account's time zone, and falls back to UTC for an unknown zone", () => {
    assert.equal(formatDate(NOW, 'America/New_York').text, 'November 26, 2026, 9:30 AM (America/New_York)');
    assert.equal(formatDate(NOW, 'Asia/Tokyo').text, 'November 26, 2026, 11:30 PM (Asia/Tokyo)');
    assert.deepEqual(formatDate(NOW, 'Mars/Olympus'), {
      text: 'November 26, 2026, 2:30 PM (UTC)',
      zone: 'UTC',
    });
  });

  it('takes the sender from the Fax Default and the rest from the request', () => {
    const v = coverValues(ctx({ options: { sender_name: '  ', subject: 'Hi' } }), NOW, 3);
    assert.equal(v.from_name, 'Front Desk', 'a blank sender_name does not hide the default');
    assert.equal(v.to_name, null);
    assert.equal(v.subject, 'Hi');
    assert.equal(v.total_pages, 3);
    assert.equal(v.from_fax, '+15550100001');
    assert.equal(coverValues(ctx({ options: { sender_name: 'Dr. Who' } }), NOW, 1).from_name, 'Dr. Who');
  });

  it('draws every value on the page, with the page count including the cover', async () => {
    const cover = await buildCover(ctx(), 3, NOW, o);
    assert.ok(cover);
    assert.equal(cover.source, 'fax_default');
    assert.equal(cover.values.total_pages, 4);
    // The drawn cover goes to the render process as values (no PDF made per fax); as a PDF it is this.
    assert.equal(cover.pdf, null);
    const [text] = await textOf(await drawCoverPage(cover.values));
    for (const s of [
      'FAX',
      'November 26, 2026, 9:30 AM (America/New_York)',
      'Dr. Ada Moreau',
      '+15551234567',
      'Front Desk, Demo Clinic',
      '+15550100001',
      '+1 555 010 0000',
      'frontdesk@example.org',
      '4 (including this cover page)',
      'Lab results',
      'Please find attached.',
      'CONFIDENTIAL: this fax is meant for the named recipient only.',
    ])
      assert.ok(text!.includes(s), `cover shows "${s}"; got: ${text}`);
  });

  it('has no cover when the Fax Default says so, or when there is no Fax Default', async () => {
    const fd = ctx().faxDefault!;
    assert.equal(await buildCover(ctx({ faxDefault: { ...fd, cover_page: false } }), 1, NOW, o), null);
    assert.equal(await buildCover(ctx({ faxDefault: null }), 1, NOW, o), null);
  });

  it('survives text the standard fonts cannot draw and messages longer than a page', async () => {
    const long = Array.from({ length: 400 }, (_, i) => `line ${i} of a very long message`).join('\n');
    const pdf = await drawCoverPage(
      coverValues(ctx({ options: { recipient_name: 'Łukasz 東京 Zoë', message: long } }), NOW, 2),
    );
    const [text] = await textOf(pdf);
    assert.match(text!, /\?ukasz \?\? Zoë/);
    assert.match(text!, /message shortened to fit the cover page/);
    assert.equal((await PDFDocument.load(pdf)).getPageCount(), 1);
  });

  it('fills a Smart Template’s fields by name and flattens it', async () => {
    const tpl = await smartForm([
      'To',
      'Fax Number',
      'from',
      'Subject',
      'Message',
      'Pages',
      'Date',
      'Unrelated',
    ]);
    const v = coverValues(ctx(), NOW, 5);
    const filled = await fillSmartTemplate(tpl, v);
    assert.deepEqual(filled.filled.sort(), [
      'Date',
      'Fax Number',
      'Message',
      'Pages',
      'Subject',
      'To',
      'from',
    ]);
    assert.equal(filled.pages, 1);
    const doc = await PDFDocument.load(filled.pdf);
    assert.equal(doc.getForm().getFields().length, 0, 'flattened: no fields left');
    const [text] = await textOf(filled.pdf);
    for (const s of [
      'Dr. Ada Moreau',
      '+15551234567',
      'Front Desk',
      'Lab results',
      'Please find attached.',
      '5',
    ])
      assert.ok(text!.includes(s), `template shows "${s}"`);
    assert.ok(text!.includes('November 26, 2026'));

    const built = await buildCover(ctx({ smartTemplate: { id: 'x', pdf: tpl } }), 2, NOW, o);
    assert.equal(built?.source, 'smart_template');
    assert.equal(built?.pages, 1);
    assert.equal(built?.values.total_pages, 3);
    assert.ok(built.pdf, 'a Smart Template cover is its filled PDF');
    const [shown] = await textOf(built.pdf);
    assert.ok(shown!.includes('Dr. Ada Moreau'), `the sandbox filled the template: ${shown}`);
    assert.match(shown!, /\b3\b/, 'the total pages include the template page');
    assert.equal((await PDFDocument.load(built.pdf)).getForm().getFields().length, 0, 'flattened');
  });

  it('fails a Smart Template that is not a readable PDF, permanently', async () => {
    await assert.rejects(
      buildCover(
        ctx({ smartTemplate: { id: 'x', name: 'Old form', pdf: Buffer.from('%PDF-1.7 nothing') } }),
        1,
        NOW,
        o,
      ),
      (e: unknown) =>
        (e as { code?: string }).code === 'smart_template_broken' &&
        /^Smart Template "Old form": the PDF cannot be read/.test((e as Error).message),
    );
  });
});

describe('covers through the service', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let db: pg.Client;
  before(async () => {
    s = await startService();
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
  });
  after(async () => {
    await db.end();
    await s.dropAll();
  });

  async function send(token: string, body: Record<string, unknown>): Promise<any> {
    const r = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a4-text-5p.pdf', file_data: fixture('a4-text-5p.pdf').toString('base64') }],
        ...body,
      },
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const id = r.body.data.job_id as string;
    return eventually(async () => {
      const j = await call(s.url, 'GET', `/v1/faxes/${id}`, { token });
      return ['delivered', 'failed'].includes(j.body.data?.state) ? j.body.data : null;
    }, 60_000);
  }

  it('adds the Fax Default cover, renders at the job quality and stores the TIFF with real page sizes', async () => {
    const seed = await seedAccount(s, { cover: true });
    await db.query(`UPDATE accounts SET time_zone = 'Europe/Paris' WHERE id = $1`, [seed.account_id]);
    const token = await tokenFor(s.url, seed.api_key);
    const job = await send(token, {
      recipient_name: 'Dr. Ada Moreau',
      subject: 'Referral',
      fax_quality: 'low',
    });
    assert.equal(job.state, 'delivered', JSON.stringify(job.failure));
    assert.equal(job.page_count, 6, 'five pages and the cover');
    const r = await getRender(db, job.job_id);
    assert.ok(r);
    assert.equal(r.quality, 'low');
    assert.equal(r.pageCount, 6);
    assert.equal(r.cover?.to_name, 'Dr. Ada Moreau');
    assert.equal(r.cover?.from_name, 'Front Desk');
    assert.equal(r.cover?.time_zone, 'Europe/Paris');
    assert.equal(r.cover?.total_pages, 6);
    const info = libtiff('tiffinfo', r.tiff);
    assert.equal(info.match(/Compression Scheme: CCITT Group 4/g)?.length, 6);
    assert.equal(info.match(/Resolution: 204, 98 pixels\/inch/g)?.length, 6);
    const dump = libtiff('tiffdump', r.tiff);
    const counts = [...dump.matchAll(/StripByteCounts \(279\) LONG \(4\) 1<(\d+)>/g)].map((m) =>
      Number(m[1]),
    );
    assert.deepEqual(counts, r.pageBytes);
    assert.ok(r.pageBytes[0]! < r.pageBytes[1]!, 'the sparse cover is smaller than a text page');
  });

  it('sends no cover when the Fax Default has cover_page = false', async () => {
    const seed = await seedAccount(s, { cover: true });
    await db.query('UPDATE fax_defaults SET cover_page = false WHERE account_id = $1', [seed.account_id]);
    const token = await tokenFor(s.url, seed.api_key);
    const job = await send(token, { subject: 'no cover' });
    assert.equal(job.state, 'delivered');
    assert.equal(job.page_count, 5);
    assert.equal((await getRender(db, job.job_id))?.cover, null);
  });

  it('uses a Smart Template as the cover, and fails clearly when the template has no PDF', async () => {
    const seed = await seedAccount(s, { cover: true });
    const token = await tokenFor(s.url, seed.api_key);
    // The demo seed's referral form works as it comes.
    const seeded = await send(token, {
      smart_document_id: seed.smart_document_id,
      recipient_name: 'Dr. Moreau',
    });
    assert.equal(seeded.state, 'delivered', JSON.stringify(seeded.failure));
    assert.equal(seeded.page_count, 6);
    assert.equal((await getRender(db, seeded.job_id))?.cover?.to_name, 'Dr. Moreau');

    await db.query('UPDATE smart_templates SET pdf = NULL WHERE id = $1', [seed.smart_document_id]);
    const empty = await send(token, { smart_document_id: seed.smart_document_id });
    assert.equal(empty.state, 'failed');
    assert.equal(empty.failure.code, 'smart_template_empty');

    await db.query('UPDATE smart_templates SET pdf = $1 WHERE id = $2', [
      Buffer.from(await smartForm(['recipient', 'subject', 'total pages'])),
      seed.smart_document_id,
    ]);
    const job = await send(token, {
      smart_document_id: seed.smart_document_id,
      recipient_name: 'Riverside Pharmacy',
      subject: 'Refill',
    });
    assert.equal(job.state, 'delivered', JSON.stringify(job.failure));
    assert.equal(job.page_count, 6);
    const r = await getRender(db, job.job_id);
    assert.equal(r?.cover?.to_name, 'Riverside Pharmacy');
    assert.equal(r?.cover?.total_pages, 6);
  });
});
