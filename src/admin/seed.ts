import { randomInt } from 'node:crypto';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import type { Queryable } from '../db/pool.ts';
import { createAccount } from '../auth/service.ts';
import { contactIds } from '../auth/contact-id.ts';
import { defaultSandboxLimits, PdfSandbox } from '../documents/check.ts';
import { createFaxDefault } from '../accounts/fax-defaults.ts';
import { createSmartTemplate, type Inspected, inspectSmartTemplate } from '../accounts/smart-templates.ts';

export interface DemoSeed {
  account_id: string;
  api_key: string;
  /** The account's 60 numbers, oldest first; the first two are the fax_as of its two Fax Defaults. */
  numbers: string[];
  template_id: string;
  smart_document_id: string;
  contact_ids: string[];
  esign_template_id: string;
  esign_field_ids: string[];
  esign_field_rule_ids: string[];
  esign_document_id: string;
}

const one = async (db: Queryable, sql: string, values: unknown[]): Promise<string> =>
  (await db.query<{ id: string }>(sql, values)).rows[0]!.id;

/** The demo Smart Template: a one-page referral form whose fields the worker fills and flattens. */
async function referralFormPdf(): Promise<Buffer> {
  const doc = await PDFDocument.create();
  const page = doc.addPage([612, 792]);
  const font = await doc.embedFont(StandardFonts.HelveticaBold);
  const form = doc.getForm();
  page.drawText('Demo Clinic — Referral', { x: 72, y: 720, size: 20, font });
  const fields: [string, string, number, number][] = [
    ['to', 'To', 660, 22],
    ['to_fax', 'Fax', 630, 22],
    ['from', 'From', 600, 22],
    ['from_fax', 'Our fax', 570, 22],
    ['date', 'Date', 540, 22],
    ['pages', 'Pages', 510, 22],
    ['subject', 'Re', 480, 22],
    ['message', 'Notes', 300, 160],
  ];
  for (const [name, label, y, h] of fields) {
    page.drawText(label, { x: 72, y: y + h - 14, size: 11, font });
    const f = form.createTextField(name);
    if (name === 'message') f.enableMultiline();
    f.addToPage(page, { x: 150, y, width: 390, height: h });
  }
  return Buffer.from(await doc.save());
}

/**
 * The demo form, checked like an upload (inspectSmartTemplate: the PDF sandbox, then its fields), in
 * a sandbox of its own that is closed when done: no process outlives the seed.
 */
async function checkedForm(): Promise<{ form: Buffer; inspected: Inspected }> {
  const form = await referralFormPdf();
  const sandbox = new PdfSandbox(defaultSandboxLimits);
  try {
    return {
      form,
      inspected: await inspectSmartTemplate(
        form,
        'referral-form.pdf',
        sandbox,
        AbortSignal.timeout(60_000),
        '',
      ),
    };
  } finally {
    await sandbox.close();
  }
}

/** Checked once per process: every demo account gets the same form. */
let demoForm: Promise<{ form: Buffer; inspected: Inspected }> | null = null;

/**
 * A complete demo account; a new one every call. Run inside a transaction. Its Fax Defaults and Smart
 * Template are made by the functions behind POST /v1/fax-defaults and POST /v1/smart-templates, the
 * template's PDF checked in the PDF sandbox like an upload (once per process; see checkedForm).
 */
export async function seedDemo(db: Queryable, name = 'Demo clinic'): Promise<DemoSeed> {
  demoForm ??= checkedForm().catch((err: unknown) => {
    demoForm = null; // a failed check is tried again by the next seed
    throw err;
  });
  const { form, inspected } = await demoForm;
  const { account_id: a, api_key } = await createAccount(db, name);
  // A number belongs to one account: each demo account gets its own block of 60 (+1555 and 7 random
  // digits, then 01-60), and its Fax Defaults present two of them (the caller id rule).
  const block = `+1555${randomInt(0, 10_000_000).toString().padStart(7, '0')}`;
  const numbers = Array.from({ length: 60 }, (_, i) => `${block}${String(i + 1).padStart(2, '0')}`);
  // Before the Fax Defaults, whose fax_as must be numbers of the account (the caller id rule).
  // Demo numbers receive (issue 20): a fax sent to one over the loopback SIP set-up is stored for the
  // account and listed by GET /v1/received-faxes.
  await db.query(
    `INSERT INTO numbers (account_id, number, label, receive, created_at)
     SELECT $1, ($2::text[])[g], 'Line ' || g, true, now() + g * interval '1 millisecond'
       FROM generate_series(1, 60) g`,
    [a, numbers],
  );
  await createFaxDefault(db, a, {
    name: 'Front desk',
    is_default: true,
    fax_as: numbers[0]!,
    fax_quality: 'standard',
    cover_page: true,
    sender_name: 'Front Desk',
    sender_company: 'Demo Clinic',
    sender_phone: '+15550100000',
    sender_email: 'frontdesk@example.org',
  });
  const { id: templateId } = await createFaxDefault(db, a, {
    name: 'Pharmacy line (fine)',
    fax_as: numbers[1]!,
    fax_quality: 'hd',
    cover_page: true,
    sender_name: 'Pharmacy',
    sender_company: 'Demo Clinic',
  });
  const { id: smartId } = await createSmartTemplate(db, a, {
    name: 'Referral form',
    fileName: 'referral-form.pdf',
    pdf: form,
    inspected,
  });
  const codec = await contactIds(db);
  const contactIdList: string[] = [];
  for (const [n, f] of [
    ['Dr. Ada Moreau', '+15550110001'],
    ['Riverside Pharmacy', '+15550110002'],
    ['County Records', '+15550110003'],
  ] as const) {
    contactIdList.push(
      codec.encode(
        await one(
          db,
          'INSERT INTO contacts (account_id, name, fax_number) VALUES ($1, $2, $3) RETURNING id',
          [a, n, f],
        ),
      ),
    );
  }
  const tpl = await one(
    db,
    `INSERT INTO esign_templates (account_id, name) VALUES ($1, 'Consent form') RETURNING id`,
    [a],
  );
  const f1 = await one(
    db,
    `INSERT INTO esign_template_fields (account_id, template_id, name, field_type, required, page, x, y)
     VALUES ($1, $2, 'patient_signature', 'signature', true, 1, 72, 640) RETURNING id`,
    [a, tpl],
  );
  const f2 = await one(
    db,
    `INSERT INTO esign_template_fields (account_id, template_id, name, field_type, required, page, x, y)
     VALUES ($1, $2, 'guardian_signature', 'signature', false, 1, 72, 700) RETURNING id`,
    [a, tpl],
  );
  const r1 = await one(
    db,
    `INSERT INTO esign_field_rules (account_id, template_id, field_id, condition, action)
     VALUES ($1, $2, $3, '{"field":"patient_age","lt":18}', 'require') RETURNING id`,
    [a, tpl, f2],
  );
  const r2 = await one(
    db,
    `INSERT INTO esign_field_rules (account_id, template_id, field_id, condition, action)
     VALUES ($1, $2, $3, '{"field":"patient_signature","filled":true}', 'show') RETURNING id`,
    [a, tpl, f1],
  );
  const doc = await one(
    db,
    `INSERT INTO esign_documents (account_id, template_id, title) VALUES ($1, $2, 'Consent — J. Doe') RETURNING id`,
    [a, tpl],
  );
  await db.query(
    `INSERT INTO esign_document_themes (document_id, account_id, primary_color, background_color, font_family)
     VALUES ($1, $2, '#1f4e79', '#ffffff', 'Helvetica')`,
    [doc, a],
  );
  return {
    account_id: a,
    api_key,
    numbers,
    template_id: templateId,
    smart_document_id: smartId,
    contact_ids: contactIdList,
    esign_template_id: tpl,
    esign_field_ids: [f1, f2],
    esign_field_rule_ids: [r1, r2],
    esign_document_id: doc,
  };
}
