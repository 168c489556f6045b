// Cover pages. The Fax Default (the job's, or the account's default one) supplies the sender and
// says whether there is a cover at all; the send request supplies recipient name, subject and
// message. A Smart Template replaces the drawn cover: its form fields are filled from the same
// values and flattened. pdf-lib does the drawing (here: our own one-page layout) and the filling (in
// the PDF sandbox process only: a template is a customer's PDF, see buildCover).
import { PDFDocument, PDFTextField, StandardFonts, rgb } from 'pdf-lib';
import { open } from '../db/encryption.ts';
import type { Queryable } from '../db/pool.ts';
import { openJobOptions, templateContext } from '../db/sealed-columns.ts';
import { zonedFormat } from '../domain/date-format.ts';
import { isId } from '../domain/ids.ts';
import { drawable, layoutCover, LETTER, type CoverFonts, type CoverValues } from './cover-layout.ts';
import { DocumentError, readableReason } from './errors.ts';

export type { CoverValues };

export interface FaxDefaultCover {
  id: string;
  name: string;
  fax_as: string;
  fax_quality: 'low' | 'standard' | 'hd';
  cover_page: boolean;
  sender_name: string | null;
  sender_company: string | null;
  sender_phone: string | null;
  sender_email: string | null;
  cover_footer: string | null;
  /** The header line's template (migration 019); absent in values frozen before it. */
  header_line?: string | null;
}

/** Everything a job's cover depends on, loaded once per preparation. */
export interface CoverContext {
  timeZone: string;
  faxDefault: FaxDefaultCover | null;
  /** The Smart Template's PDF (and its name, for messages) when the job names one. */
  smartTemplate: { id: string; name?: string; pdf: Uint8Array } | null;
  faxNumber: string;
  callerId: string;
  options: { subject?: string; message?: string; sender_name?: string; recipient_name?: string };
}

export type CoverSource = 'fax_default' | 'smart_template';

export interface BuiltCover {
  source: CoverSource;
  /**
   * A Smart Template's filled PDF; null for the drawn cover, which the render processes set straight
   * onto the fax page from `values` (render/cover-raster.ts; drawCoverPage gives it as a PDF).
   */
  pdf: Uint8Array | null;
  pages: number;
  values: CoverValues;
}

// ---------------------------------------------------------------------------------------------
// Pure parts: values and layout.

/** "November 26, 2026, 9:30 AM (Europe/Paris)"; an unknown zone falls back to UTC. */
export function formatDate(now: Date, timeZone: string): { text: string; zone: string } {
  const { format, zone } = zonedFormat('en-US', { dateStyle: 'long', timeStyle: 'short' }, timeZone);
  return { text: `${format.format(now).replace(' at ', ', ')} (${zone})`, zone };
}

const clean = (s: string | null | undefined): string | null => {
  const t = s?.trim();
  return t ? t : null;
};

export function coverValues(ctx: CoverContext, now: Date, totalPages: number): CoverValues {
  const fd = ctx.faxDefault;
  const date = formatDate(now, ctx.timeZone);
  return {
    date: date.text,
    time_zone: date.zone,
    to_name: clean(ctx.options.recipient_name),
    to_fax: ctx.faxNumber,
    from_name: clean(ctx.options.sender_name) ?? clean(fd?.sender_name),
    from_company: clean(fd?.sender_company),
    from_fax: ctx.callerId,
    from_phone: clean(fd?.sender_phone),
    from_email: clean(fd?.sender_email),
    subject: clean(ctx.options.subject),
    message: clean(ctx.options.message),
    footer: clean(fd?.cover_footer),
    total_pages: totalPages,
  };
}

/** Which cover a job gets: a Smart Template, a drawn cover, or none. */
export function coverSource(ctx: CoverContext): CoverSource | null {
  if (ctx.smartTemplate) return 'smart_template';
  if (ctx.faxDefault?.cover_page) return 'fax_default';
  return null;
}

/** The drawn cover (layoutCover) as a one-page PDF. */
export async function drawCoverPage(v: CoverValues): Promise<Uint8Array> {
  const doc = await PDFDocument.create();
  doc.setTitle('Fax cover page');
  doc.setProducer('faxline');
  const fonts: CoverFonts = {
    regular: await doc.embedFont(StandardFonts.Helvetica),
    bold: await doc.embedFont(StandardFonts.HelveticaBold),
  };
  const page = doc.addPage(LETTER);
  for (const op of layoutCover(v, fonts)) {
    if (op.kind === 'text')
      page.drawText(op.text, { x: op.x, y: op.y, size: op.size, font: fonts[op.font], color: rgb(0, 0, 0) });
    else page.drawLine({ start: { x: op.x1, y: op.y }, end: { x: op.x2, y: op.y }, thickness: op.thickness });
  }
  return doc.save();
}

/** Normalised form-field names (lowercase letters and digits) → cover value. */
const FIELD_NAMES: Record<string, keyof CoverValues> = {};
for (const [key, names] of Object.entries({
  date: ['date', 'todaysdate', 'faxdate', 'sentdate'],
  to_name: ['to', 'toname', 'recipient', 'recipientname', 'attention', 'attn'],
  to_fax: ['tofax', 'tofaxnumber', 'faxnumber', 'recipientfax', 'recipientfaxnumber'],
  from_name: ['from', 'fromname', 'sender', 'sendername'],
  from_company: ['fromcompany', 'company', 'sendercompany'],
  from_fax: ['fromfax', 'fromfaxnumber', 'callerid', 'senderfax', 'senderfaxnumber'],
  from_phone: ['fromphone', 'phone', 'fromvoicenumber', 'senderphone'],
  from_email: ['fromemail', 'email', 'senderemail', 'frommailaddress'],
  subject: ['subject', 're', 'regarding'],
  message: ['message', 'comments', 'notes', 'body'],
  footer: ['footer', 'disclaimer'],
  total_pages: ['pages', 'pagecount', 'totalpages', 'numberofpages'],
} satisfies Partial<Record<keyof CoverValues, string[]>>))
  for (const n of names) FIELD_NAMES[n] = key as keyof CoverValues;

export const normaliseFieldName = (name: string): string => {
  const last = name.split('.').pop() ?? name; // fully qualified names: parent.child
  return last.toLowerCase().replace(/[^a-z0-9]/g, '');
};

/** The cover value a Smart Template's text field of this name is filled with, or null. */
export const coverValueOfField = (name: string): keyof CoverValues | null => {
  const n = normaliseFieldName(name);
  // Own names only: a field called "constructor" is not Object.prototype's.
  return Object.hasOwn(FIELD_NAMES, n) ? FIELD_NAMES[n]! : null;
};

/** A filled and flattened Smart Template: its PDF, its pages and the fields that were filled. */
export interface FilledTemplate {
  pdf: Uint8Array;
  pages: number;
  filled: string[];
}

/**
 * Fills a Smart Template's text fields whose names match a cover value (see docs/documents-rendering.md for the names)
 * and flattens the form so the values become page content. Returns the filled PDF and its pages.
 * `v` may be a function of the template's page count (the cover's total pages include them). pdf-lib
 * parses the whole file synchronously: the service calls this only in the PDF sandbox process
 * (sandbox/form.ts), never on the API's or the send worker's event loop. `name` names the template
 * in failure messages.
 */
export async function fillSmartTemplate(
  pdf: Uint8Array,
  v: CoverValues | ((templatePages: number) => CoverValues),
  name = 'the Smart Template',
): Promise<FilledTemplate> {
  let doc: PDFDocument;
  let pages: number;
  try {
    doc = await PDFDocument.load(pdf, { throwOnInvalidObject: true, updateMetadata: false });
    pages = doc.getPageCount(); // throws for a file without a page tree
  } catch (err) {
    throw new DocumentError(
      'smart_template_broken',
      `${name}: the PDF cannot be read (${readableReason(err)})`,
    );
  }
  if (pages === 0) throw new DocumentError('smart_template_broken', `${name}: the PDF has no pages`);
  const values = typeof v === 'function' ? v(pages) : v;
  const font = await doc.embedFont(StandardFonts.Helvetica);
  const form = doc.getForm();
  const filled: string[] = [];
  for (const field of form.getFields()) {
    if (!(field instanceof PDFTextField)) continue;
    const key = coverValueOfField(field.getName());
    if (!key) continue;
    const raw = values[key];
    if (raw === null || key === 'time_zone') continue;
    let value = drawable(font, String(raw));
    const max = field.getMaxLength();
    if (max !== undefined) value = value.slice(0, max);
    if (key === 'message' && value.includes('\n')) field.enableMultiline();
    field.setText(value);
    filled.push(field.getName());
  }
  form.updateFieldAppearances(font);
  form.flatten();
  return { pdf: await doc.save(), pages, filled };
}

/**
 * Fills a Smart Template for a fax of `documentPages` pages: the total page count it shows is
 * `documentPages` plus the template's own pages. In the service it is the PDF sandbox
 * (check.ts `fillTemplate`: a child process with memory and time caps, shared fairly between
 * accounts); it rejects with a DocumentError ('smart_template_broken', or the sandbox's codes).
 */
export interface TemplateFiller {
  fillTemplate(
    bytes: Uint8Array,
    name: string,
    values: CoverValues,
    documentPages: number,
    signal: AbortSignal | undefined,
    accountId: string,
  ): Promise<FilledTemplate>;
}

/** The Smart Template as failure messages name it. */
export const templateLabel = (t: { name?: string }): string =>
  t.name === undefined ? 'the Smart Template' : `Smart Template "${t.name}"`;

/**
 * Builds the job's cover for a fax of `documentPages` pages, or null when it has none. The drawn
 * cover (our own fixed one-page layout, bounded work) is its values: the render process draws them; a Smart Template, a customer's
 * PDF, is filled by `o.filler` (the caller's PDF sandbox), which also counts its pages: nothing of
 * the template is parsed in this process.
 */
export async function buildCover(
  ctx: CoverContext,
  documentPages: number,
  now: Date,
  o: { filler: TemplateFiller; signal?: AbortSignal; accountId?: string },
): Promise<BuiltCover | null> {
  const src = coverSource(ctx);
  if (src === null) return null;
  if (src === 'fax_default') {
    const values = coverValues(ctx, now, documentPages + 1);
    return { source: src, pdf: null, pages: 1, values };
  }
  const tpl = ctx.smartTemplate!;
  // The sandbox sets the total itself from the pages it finds; the same total is computed here from
  // its answer, so the values returned are the ones printed.
  const filled = await o.filler.fillTemplate(
    tpl.pdf,
    templateLabel(tpl),
    coverValues(ctx, now, documentPages + 1),
    documentPages,
    o.signal,
    o.accountId ?? '',
  );
  return {
    source: src,
    pdf: filled.pdf,
    pages: filled.pages,
    values: coverValues(ctx, now, documentPages + filled.pages),
  };
}

// ---------------------------------------------------------------------------------------------
// Loading the context from PostgreSQL.

const FAX_DEFAULT_COLUMNS =
  'id, name, fax_as, fax_quality, cover_page, sender_name, sender_company, sender_phone, sender_email, cover_footer, header_line';

/**
 * The Fax Default a cover uses: the given id (null when it is not the account's), or with
 * `'default'` the account's default one.
 */
export async function loadFaxDefault(
  db: Queryable,
  accountId: string,
  id: string | 'default',
): Promise<FaxDefaultCover | null> {
  if (id !== 'default' && !isId(id)) return null;
  const r =
    id === 'default'
      ? await db.query<FaxDefaultCover>(
          `SELECT ${FAX_DEFAULT_COLUMNS} FROM fax_defaults WHERE account_id = $1 AND is_default`,
          [accountId],
        )
      : await db.query<FaxDefaultCover>(
          `SELECT ${FAX_DEFAULT_COLUMNS} FROM fax_defaults WHERE id = $1 AND account_id = $2`,
          [id, accountId],
        );
  return r.rows[0] ?? null;
}

export async function loadTimeZone(db: Queryable, accountId: string): Promise<string> {
  const r = await db.query<{ time_zone: string }>('SELECT time_zone FROM accounts WHERE id = $1', [
    accountId,
  ]);
  return r.rows[0]?.time_zone ?? 'UTC';
}

/**
 * A Smart Template's PDF; a template without one fails the job (permanently). A deleted template is
 * found only with `deleted` (the worker, for faxes accepted before the deletion; migration 014).
 */
export async function loadSmartTemplate(
  db: Queryable,
  accountId: string,
  id: string,
  o: { deleted?: boolean } = {},
): Promise<{ id: string; name: string; pdf: Uint8Array } | null> {
  if (!isId(id)) return null;
  const r = await db.query<{ id: string; name: string; pdf: Buffer | null }>(
    `SELECT id, name, pdf FROM smart_templates WHERE id = $1 AND account_id = $2${o.deleted ? '' : ' AND deleted_at IS NULL'}`,
    [id, accountId],
  );
  const row = r.rows[0];
  if (!row) return null;
  if (!row.pdf || row.pdf.length === 0)
    throw new DocumentError('smart_template_empty', `the Smart Template "${row.name}" has no PDF uploaded`);
  return { id: row.id, name: row.name, pdf: await open(db, templateContext(accountId, row.id), row.pdf) };
}

export interface CoverJob {
  id: string;
  account_id: string;
  fax_number: string;
  caller_id: string;
  fax_default_id: string | null;
  /** The Fax Default's values frozen when the job was accepted (migration 014). */
  fax_default?: FaxDefaultCover | null;
  smart_document_id: string | null;
  options: CoverContext['options'];
}

/**
 * The cover context of a stored job: the Fax Default values it was accepted with (a job accepted
 * before they were kept on the job reads its Fax Default's row), and its Smart Template, even one
 * deleted since.
 */
export async function loadCoverContext(db: Queryable, job: CoverJob): Promise<CoverContext> {
  const [timeZone, faxDefault, smartTemplate] = await Promise.all([
    loadTimeZone(db, job.account_id),
    job.fax_default
      ? job.fax_default
      : job.fax_default_id
        ? loadFaxDefault(db, job.account_id, job.fax_default_id)
        : null,
    job.smart_document_id
      ? loadSmartTemplate(db, job.account_id, job.smart_document_id, { deleted: true })
      : null,
  ]);
  return {
    timeZone,
    faxDefault,
    smartTemplate,
    faxNumber: job.fax_number,
    callerId: job.caller_id,
    // Sealed in the row (a row read without getJob); opened ones are returned as they are.
    options: await openJobOptions(db, job.account_id, job.id, job.options),
  };
}
