// A Smart Template's form, in the sandbox process (child.ts). At upload (a `formFields` request): its
// AcroForm fields listed and the form filled once with sample values, so a template that could not be
// filled is refused at upload rather than failing every fax later. For a fax or a preview (a
// `fillTemplate` request): the form filled with the cover's values and flattened. pdf-lib parses a
// whole file synchronously (seconds for a large one), which is why this never runs in the API or
// send worker process.
import {
  PDFButton,
  PDFCheckBox,
  PDFDropdown,
  PDFDocument,
  PDFOptionList,
  PDFRadioGroup,
  PDFSignature,
  PDFTextField,
  type PDFField,
} from 'pdf-lib';
import { type CoverValues, type FilledTemplate, coverValueOfField, fillSmartTemplate } from '../cover.ts';
import { DocumentError, readableReason } from '../errors.ts';

export const fieldTypes = ['text', 'checkbox', 'radio', 'dropdown', 'list', 'signature', 'button'] as const;

export interface FormField {
  name: string;
  type: (typeof fieldTypes)[number];
  /** The cover value a send writes into it, or null. */
  fills: string | null;
}

const typeOf = (f: PDFField): FormField['type'] =>
  f instanceof PDFTextField
    ? 'text'
    : f instanceof PDFCheckBox
      ? 'checkbox'
      : f instanceof PDFRadioGroup
        ? 'radio'
        : f instanceof PDFDropdown
          ? 'dropdown'
          : f instanceof PDFOptionList
            ? 'list'
            : f instanceof PDFSignature
              ? 'signature'
              : f instanceof PDFButton
                ? 'button'
                : 'text';

/**
 * Most form fields a template may have, and the longest field name (fully qualified): the list is
 * kept with the template and answered by every GET of it, so a file cannot make it megabytes (a
 * 20 MB PDF could otherwise carry one field name of 20 MB). A cover form has tens of fields.
 */
export const formLimits = { maxFields: 5_000, maxNameChars: 256 } as const;

/** Values that fill every field a send could fill: the trial fill of an upload. */
const SAMPLE: CoverValues = {
  date: 'November 26, 2026, 9:30 AM (UTC)',
  time_zone: 'UTC',
  to_name: 'Recipient',
  to_fax: '+15550000000',
  from_name: 'Sender',
  from_company: 'Company',
  from_fax: '+15550000001',
  from_phone: '+15550000002',
  from_email: 'sender@example.org',
  subject: 'Subject',
  message: 'Message\nsecond line',
  footer: 'Footer',
  total_pages: 2,
};

/**
 * The form fields of `pdf` (named `name` in messages), after a trial fill; throws
 * DocumentError('smart_template_broken') when the form cannot be read or filled.
 */
export async function readForm(pdf: Uint8Array, name: string): Promise<FormField[]> {
  let doc: PDFDocument;
  try {
    doc = await PDFDocument.load(pdf, { throwOnInvalidObject: true, updateMetadata: false });
  } catch (err) {
    throw new DocumentError(
      'smart_template_broken',
      `${name}: the PDF cannot be read as a form (${readableReason(err)})`,
    );
  }
  let fields: FormField[];
  try {
    fields = doc
      .getForm()
      .getFields()
      .map((f) => {
        const type = typeOf(f);
        return { name: f.getName(), type, fills: type === 'text' ? coverValueOfField(f.getName()) : null };
      });
  } catch (err) {
    throw new DocumentError(
      'smart_template_broken',
      `${name}: the form fields cannot be read (${readableReason(err)})`,
    );
  }
  if (fields.length > formLimits.maxFields)
    throw new DocumentError(
      'smart_template_broken',
      `${name}: the form has ${fields.length} fields; a Smart Template may have at most ${formLimits.maxFields}`,
    );
  const long = fields.find((f) => f.name.length > formLimits.maxNameChars);
  if (long)
    throw new DocumentError(
      'smart_template_broken',
      `${name}: a form field's name has ${long.name.length} characters; at most ${formLimits.maxNameChars} are allowed`,
    );
  // fillSmartTemplate throws DocumentError('smart_template_broken') itself; any other failure of
  // pdf-lib while filling or flattening would fail every fax sent with this template.
  await fillSmartTemplate(pdf, SAMPLE, name).catch(brokenForm(name));
  return fields;
}

/** A failure of pdf-lib while filling or flattening, as the template's fault. */
const brokenForm =
  (name: string) =>
  (err: unknown): never => {
    if (err instanceof DocumentError) throw err;
    throw new DocumentError(
      'smart_template_broken',
      `${name}: the form cannot be filled (${readableReason(err)})`,
    );
  };

/**
 * A fax's cover from the Smart Template `pdf` (named `name` in messages): filled with `values`, whose
 * total page count becomes `documentPages` plus the template's own pages, and flattened.
 */
export function fillTemplate(
  pdf: Uint8Array,
  name: string,
  values: CoverValues,
  documentPages: number,
): Promise<FilledTemplate> {
  return fillSmartTemplate(pdf, (pages) => ({ ...values, total_pages: documentPages + pages }), name).catch(
    brokenForm(name),
  );
}
