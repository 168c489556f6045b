// Smart Templates of an account: a PDF with form fields that becomes the cover of a send naming it
// (smart_document_id); its text fields are filled from the cover values and the form flattened
// (src/documents/cover.ts). The HTTP routes (src/api/routes/smart-templates.ts) and `seed-demo`
// (src/admin/seed.ts) both go through these functions.
//
// An upload is checked as a document of a send is, in the PDF sandbox (src/documents/check.ts: child
// processes with memory and time caps, the same limits); only a PDF that passed is then opened with
// pdf-lib, again in the sandbox (a `formFields` request, src/documents/sandbox/form.ts), to read its
// form fields and to fill it once with sample values, so a template that could not be filled is
// refused now rather than failing every fax later. pdf-lib parses a whole file synchronously: in the
// API process a large upload would hold up every other account's requests.
import { z } from 'zod';
import { openOrNull, seal } from '../db/encryption.ts';
import type { Queryable } from '../db/pool.ts';
import { templateContext } from '../db/sealed-columns.ts';
import { ApiError } from '../domain/envelope.ts';
import { isId, newId } from '../domain/ids.ts';
import type { FormField, PdfInfo } from '../documents/check.ts';
import { fieldTypes } from '../documents/sandbox/form.ts';

export const smartTemplateCreateBody = z.strictObject(
  {
    name: z
      .string({ message: 'must be a string' })
      .trim()
      .min(1, 'must not be empty')
      .max(100, 'is longer than 100 characters')
      .describe('Shown to the customer only; 1 to 100 characters.'),
    file_name: z
      .string({ message: 'must be a string' })
      .min(1, 'must not be empty')
      .max(255, 'is longer than 255 characters')
      .optional()
      .describe('Name of the PDF file, as in a document of a send (kept for the customer only).'),
    file_data: z
      .string({ message: 'must be a string' })
      .describe('The complete PDF encoded as Base64, as file_data of a send; at most MAX_DOCUMENT_BYTES.'),
  },
  {
    error: (i: { code?: string; keys?: string[] }) =>
      i.code === 'unrecognized_keys'
        ? (i.keys ?? []).map((k) => `${k}: is not a field of a Smart Template upload`).join('; ')
        : undefined,
  },
);
export type SmartTemplateCreate = z.output<typeof smartTemplateCreateBody>;

export const smartTemplateField = z.object({
  name: z.string().describe('The field name as the PDF has it (fully qualified: parent.child).'),
  type: z.enum(fieldTypes),
  fills: z
    .string()
    .nullable()
    .describe(
      'The cover value a send writes into this field (to_name, from_fax, subject, …; see docs/documents-rendering.md), or null: the field is left as it is.',
    ),
});
export type SmartTemplateField = z.output<typeof smartTemplateField>;

export const smartTemplateView = z.object({
  id: z.string().describe('The smart_document_id of a send.'),
  name: z.string(),
  file_name: z.string().nullable(),
  page_count: z.number().int().nullable().describe('Cover pages this template adds to a fax.'),
  byte_size: z.number().int(),
  fields: z
    .array(smartTemplateField)
    .nullable()
    .describe('Its form fields; null in lists for a template uploaded before fields were read (GET it).'),
  created_at: z.string(),
});
export type SmartTemplateView = z.output<typeof smartTemplateView>;

/**
 * The PDF sandbox (src/documents/check.ts: PdfSandbox) as an upload uses it: the checks of a
 * document (only the page count is kept), then the form read and filled once; both reject with a
 * DocumentError for the file's faults.
 */
export interface TemplateSandbox {
  check(
    bytes: Uint8Array,
    name: string,
    signal: AbortSignal,
    accountId: string,
  ): Promise<Pick<PdfInfo, 'pageCount'>>;
  formFields(bytes: Uint8Array, name: string, signal: AbortSignal, accountId: string): Promise<FormField[]>;
}

export interface Inspected {
  pageCount: number;
  fields: SmartTemplateField[];
}

/**
 * Checks a Smart Template's PDF in the sandbox, as `accountId`'s (its fair share of the processes):
 * the checks of a document first (a DocumentError with the code a send's document would fail with),
 * then its form fields and a trial fill ('smart_template_broken'). Nothing of it parses the PDF in
 * this process. Throws DocumentError.
 */
export async function inspectSmartTemplate(
  pdf: Uint8Array,
  name: string,
  sandbox: TemplateSandbox,
  signal: AbortSignal,
  accountId: string,
): Promise<Inspected> {
  const info = await sandbox.check(pdf, name, signal, accountId);
  const fields = await sandbox.formFields(pdf, name, signal, accountId);
  return { pageCount: info.pageCount, fields };
}

/** The columns of a SmartTemplateView (the API's list reads them too). */
export const SMART_TEMPLATE_VIEW_COLUMNS = `id, name, file_name, page_count,
  CASE WHEN pdf IS NULL THEN NULL ELSE coalesce(byte_size, octet_length(pdf)) END AS byte_size, fields,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`;

/**
 * Refuses (422) an account that holds `max` live Smart Templates already. The upload route asks it
 * before the sandbox checks too, so an account at its cap does not have PDFs checked for nothing;
 * createSmartTemplate asks it again under the account's lock, which is what makes the cap hold.
 */
export async function assertRoomForSmartTemplate(
  c: Queryable,
  accountId: string,
  max: number,
): Promise<void> {
  if (!Number.isFinite(max)) return;
  const n = await c.query<{ n: number }>(
    `SELECT count(*)::int AS n
       FROM (SELECT 1 FROM smart_templates WHERE account_id = $1 AND deleted_at IS NULL LIMIT $2) x`,
    [accountId, max],
  );
  if (n.rows[0]!.n >= max)
    throw new ApiError(
      422,
      `Smart Template limit reached: an account may have at most ${max} Smart Templates; delete one first`,
    );
}

/**
 * Stores a checked Smart Template (inspected by inspectSmartTemplate). An account holding `max`
 * (not deleted) already is refused (422, SMART_TEMPLATES_PER_ACCOUNT).
 */
export async function createSmartTemplate(
  c: Queryable,
  accountId: string,
  t: { name: string; fileName: string | null; pdf: Uint8Array; inspected: Inspected },
  max = Infinity,
): Promise<SmartTemplateView> {
  if (Number.isFinite(max)) {
    // Concurrent uploads of one account are serialised, so the count cannot be passed by a race.
    await c.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 7301019))', [
      `smart-template:${accountId}`,
    ]);
    await assertRoomForSmartTemplate(c, accountId, max);
  }
  // The id is chosen here: the file is sealed to it (src/db/sealed-columns.ts).
  const id = newId();
  const pdf = await seal(c, templateContext(accountId, id), t.pdf);
  const r = await c.query<SmartTemplateView>(
    `INSERT INTO smart_templates (id, account_id, name, file_name, pdf, byte_size, page_count, fields)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ${SMART_TEMPLATE_VIEW_COLUMNS}`,
    [
      id,
      accountId,
      t.name,
      t.fileName,
      pdf,
      t.pdf.length,
      t.inspected.pageCount,
      JSON.stringify(t.inspected.fields),
    ],
  );
  return r.rows[0]!;
}

/** A live (not deleted) Smart Template of the account, or null. */
export async function getSmartTemplate(
  c: Queryable,
  accountId: string,
  id: string,
): Promise<SmartTemplateView | null> {
  if (!isId(id)) return null;
  const r = await c.query<SmartTemplateView>(
    `SELECT ${SMART_TEMPLATE_VIEW_COLUMNS} FROM smart_templates WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL`,
    [id, accountId],
  );
  return r.rows[0] ?? null;
}

/** The PDF of a live Smart Template whose fields were never read (uploaded before migration 014). */
export async function uninspectedPdf(c: Queryable, accountId: string, id: string): Promise<Buffer | null> {
  const r = await c.query<{ pdf: Buffer | null }>(
    `SELECT pdf FROM smart_templates
      WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL AND fields IS NULL`,
    [id, accountId],
  );
  return openOrNull(c, templateContext(accountId, id), r.rows[0]?.pdf ?? null);
}

/** Records what inspectSmartTemplate found for a template uploaded before migration 014. */
export async function saveInspection(
  c: Queryable,
  accountId: string,
  id: string,
  inspected: Inspected,
): Promise<SmartTemplateView | null> {
  const r = await c.query<SmartTemplateView>(
    `UPDATE smart_templates SET page_count = $3, fields = $4
      WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL RETURNING ${SMART_TEMPLATE_VIEW_COLUMNS}`,
    [id, accountId, inspected.pageCount, JSON.stringify(inspected.fields)],
  );
  return r.rows[0] ?? null;
}

/**
 * Deletes a Smart Template: sends naming it are refused from now on. One that faxes refer to is only
 * marked deleted, so they keep their cover (the worker still reads it); one that none refer to is
 * removed with its PDF.
 */
export async function deleteSmartTemplate(c: Queryable, accountId: string, id: string): Promise<boolean> {
  if (!isId(id)) return false;
  // Locked first, in a statement of its own: a send that is inserting a fax naming this template holds
  // a key-share lock on its row (the foreign key check) until it commits, so this waits for it, and
  // the NOT EXISTS below, a new statement, then sees that fax. Without the lock the DELETE would not
  // see the uncommitted fax, wait for the same lock, and then remove the template from under it (ON
  // DELETE SET NULL: a fax accepted with a Smart Template sent without its cover).
  const live = await c.query(
    'SELECT 1 FROM smart_templates WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL FOR UPDATE',
    [id, accountId],
  );
  if (live.rowCount !== 1) return false;
  const removed = await c.query(
    `DELETE FROM smart_templates t
      WHERE t.id = $1 AND t.account_id = $2 AND t.deleted_at IS NULL
        AND NOT EXISTS (SELECT 1 FROM fax_jobs j WHERE j.smart_document_id = t.id)`,
    [id, accountId],
  );
  if (removed.rowCount === 1) return true;
  const marked = await c.query(
    `UPDATE smart_templates SET deleted_at = now()
      WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL`,
    [id, accountId],
  );
  return marked.rowCount === 1;
}
