// Fax Defaults of an account: the sender identity, quality and cover page behind a send's
// template_id. The HTTP routes (src/api/routes/fax-defaults.ts) and `seed-demo` (src/admin/seed.ts)
// both go through these functions. Each runs inside the caller's transaction: the API's is scoped to
// the account (row-level security); seed-demo's is the owner's.
import { z } from 'zod';
import type { Queryable } from '../db/pool.ts';
import { ApiError } from '../domain/envelope.ts';
import { E164_PATTERN } from '../domain/e164.ts';
import { faxQualities } from '../domain/fax-default.ts';
import { headerLineProblem, headerPlaceholders } from '../domain/header-line.ts';
import { checkCallerId } from './numbers.ts';
import { isId } from '../domain/ids.ts';

const e164 = (what: string) =>
  z
    .string({ message: 'must be a string' })
    .regex(E164_PATTERN, `must be an E.164 ${what}: +, a first digit 1-9, then 1 to 14 more digits`);

/** Optional text: null or an empty (or blank) string clears it. */
const text = (max: number) =>
  z
    .string({ message: 'must be a string or null' })
    .max(max, `is longer than ${max} characters`)
    .nullable()
    .transform((s) => (s === null || s.trim() === '' ? null : s.trim()));

const EMAIL =
  /^[^\s@<>()[\]\\,;:"]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;

const fields = {
  name: z
    .string({ message: 'must be a string' })
    .trim()
    .min(1, 'must not be empty')
    .max(100, 'is longer than 100 characters')
    .describe('Shown to the customer only (lists, dashboards); 1 to 100 characters.'),
  is_default: z
    .boolean({ message: 'must be true or false' })
    .describe(
      "The account's default Fax Default (used by a send without template_id). Setting it unsets the previous default; at most one.",
    ),
  fax_as: e164('number').describe(
    'The caller id of a send that gives none, and the "Fax" line of the sender on the cover.',
  ),
  fax_quality: z
    .enum(faxQualities, { message: "must be 'low', 'standard' or 'hd'" })
    .describe('Quality of a send that gives none (the same values as fax_quality of a send).'),
  cover_page: z
    .boolean({ message: 'must be true or false' })
    .describe('Whether faxes sent with this Fax Default get a cover page.'),
  sender_name: text(200).describe('"From" on the cover; a send\'s sender_name takes precedence.'),
  sender_company: text(200).describe('Shown after the sender name on the cover.'),
  sender_phone: e164('phone number').nullable().describe('Voice number on the cover, E.164; null clears it.'),
  sender_email: z
    .string({ message: 'must be a string or null' })
    .max(254, 'is longer than 254 characters')
    .regex(EMAIL, 'must be an e-mail address such as name@example.org')
    .nullable()
    .describe('E-mail address on the cover; null clears it.'),
  cover_footer: text(1000).describe(
    'Small print at the bottom of the cover (e.g. a confidentiality notice).',
  ),
  header_line: z
    .string({ message: 'must be a string or null' })
    .nullable()
    .transform((s) => (s === null || s.trim() === '' ? null : s.trim()))
    .superRefine((s, ctx) => {
      const problem = s === null ? null : headerLineProblem(s);
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    })
    .describe(
      'The header line printed at the top of every page of faxes sent with this Fax Default (the page is scaled down ' +
        'a little to make room, nothing is covered); null (the default) or an empty string: no header line. ' +
        'Up to 120 characters; placeholders: ' +
        Object.entries(headerPlaceholders)
          .map(([k, v]) => `{${k}}: ${v}`)
          .join('; ') +
        '. An unknown placeholder is refused (422 naming it).',
    ),
};

/** A misspelt field is refused rather than ignored (a PATCH would otherwise "succeed" changing nothing). */
const unknownField = (i: { code?: string; keys?: string[] }) =>
  i.code === 'unrecognized_keys'
    ? (i.keys ?? []).map((k) => `${k}: is not a field of a Fax Default`).join('; ')
    : undefined;

/** POST /v1/fax-defaults: name and fax_as are required; the rest have defaults. */
export const faxDefaultCreateBody = z.strictObject(
  {
    name: fields.name,
    is_default: fields.is_default.default(false),
    fax_as: fields.fax_as,
    fax_quality: fields.fax_quality.default('standard'),
    cover_page: fields.cover_page.default(true),
    sender_name: fields.sender_name.optional(),
    sender_company: fields.sender_company.optional(),
    sender_phone: fields.sender_phone.optional(),
    sender_email: fields.sender_email.optional(),
    cover_footer: fields.cover_footer.optional(),
    header_line: fields.header_line.optional(),
  },
  { error: unknownField },
);
export type FaxDefaultCreate = z.input<typeof faxDefaultCreateBody>;

/** PATCH /v1/fax-defaults/{id}: the fields to change, at least one. */
export const faxDefaultUpdateBody = z
  .strictObject(
    {
      name: fields.name.optional(),
      is_default: fields.is_default.optional(),
      fax_as: fields.fax_as.optional(),
      fax_quality: fields.fax_quality.optional(),
      cover_page: fields.cover_page.optional(),
      sender_name: fields.sender_name.optional(),
      sender_company: fields.sender_company.optional(),
      sender_phone: fields.sender_phone.optional(),
      sender_email: fields.sender_email.optional(),
      cover_footer: fields.cover_footer.optional(),
      header_line: fields.header_line.optional(),
    },
    { error: unknownField },
  )
  .refine((b) => Object.values(b).some((v) => v !== undefined), 'give at least one field to change');
export type FaxDefaultUpdate = z.output<typeof faxDefaultUpdateBody>;

/** A Fax Default as the API shows it. */
export const faxDefaultView = z.object({
  id: z.string().describe('The template_id of a send.'),
  name: z.string(),
  is_default: z.boolean(),
  fax_as: z.string(),
  fax_quality: z.enum(faxQualities),
  cover_page: z.boolean(),
  sender_name: z.string().nullable(),
  sender_company: z.string().nullable(),
  sender_phone: z.string().nullable(),
  sender_email: z.string().nullable(),
  cover_footer: z.string().nullable(),
  header_line: z.string().nullable(),
  created_at: z.string(),
});
export type FaxDefaultView = z.output<typeof faxDefaultView>;

/** The columns of a FaxDefaultView. */
export const FAX_DEFAULT_VIEW_COLUMNS = `id, name, is_default, fax_as, fax_quality, cover_page, sender_name,
  sender_company, sender_phone, sender_email, cover_footer, header_line,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`;

const COLUMNS = [
  'name',
  'is_default',
  'fax_as',
  'fax_quality',
  'cover_page',
  'sender_name',
  'sender_company',
  'sender_phone',
  'sender_email',
  'cover_footer',
  'header_line',
] as const;

/** Taken before any row lock (the same order everywhere, so no deadlock); held to the transaction's end. */
async function lockDefault(c: Queryable, accountId: string): Promise<void> {
  await c.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 7301019))', [`fax-default:${accountId}`]);
}

/**
 * Makes room for a new default: unsets the account's current one (except `keep`). Concurrent calls
 * for one account wait for each other (a transaction-level advisory lock), so two requests marking
 * different Fax Defaults as default end with exactly one, never with a unique-index error.
 */
async function unsetDefault(c: Queryable, accountId: string, keep: string | null): Promise<void> {
  await lockDefault(c, accountId);
  await c.query(
    'UPDATE fax_defaults SET is_default = false WHERE account_id = $1 AND is_default AND id IS DISTINCT FROM $2',
    [accountId, keep],
  );
}

/**
 * Creates a Fax Default; an account holding `max` already is refused (422, FAX_DEFAULTS_PER_ACCOUNT),
 * and so is a fax_as the caller id rule refuses (422 naming fax_as: a number of another account, or
 * none of this one's), with `defaultCallerId` (FAX_DEFAULT_CALLER_ID, '' = none) as at send.
 */
export async function createFaxDefault(
  c: Queryable,
  accountId: string,
  input: FaxDefaultCreate,
  max = Infinity,
  defaultCallerId = '',
): Promise<FaxDefaultView> {
  const v = faxDefaultCreateBody.parse(input);
  const refused = await checkCallerId(c, accountId, v.fax_as, defaultCallerId, null, 'fax_as');
  if (refused) throw refused;
  // Concurrent creations of one account are serialised, so the count cannot be passed by a race.
  await lockDefault(c, accountId);
  if (Number.isFinite(max)) {
    const n = await c.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM (SELECT 1 FROM fax_defaults WHERE account_id = $1 LIMIT $2) x',
      [accountId, max],
    );
    if (n.rows[0]!.n >= max)
      throw new ApiError(
        422,
        `Fax Default limit reached: an account may have at most ${max} Fax Defaults; delete one first`,
      );
  }
  if (v.is_default) await unsetDefault(c, accountId, null);
  const r = await c.query<FaxDefaultView>(
    `INSERT INTO fax_defaults (account_id, ${COLUMNS.join(', ')})
     VALUES ($1, ${COLUMNS.map((_, i) => `$${i + 2}`).join(', ')})
     RETURNING ${FAX_DEFAULT_VIEW_COLUMNS}`,
    [accountId, ...COLUMNS.map((k) => v[k] ?? null)],
  );
  return r.rows[0]!;
}

export async function getFaxDefault(
  c: Queryable,
  accountId: string,
  id: string,
): Promise<FaxDefaultView | null> {
  if (!isId(id)) return null;
  const r = await c.query<FaxDefaultView>(
    `SELECT ${FAX_DEFAULT_VIEW_COLUMNS} FROM fax_defaults WHERE id = $1 AND account_id = $2`,
    [id, accountId],
  );
  return r.rows[0] ?? null;
}

/**
 * Changes the given fields; null when there is no such Fax Default in the account. A new fax_as is
 * checked by the caller id rule as at creation.
 */
export async function updateFaxDefault(
  c: Queryable,
  accountId: string,
  id: string,
  patch: FaxDefaultUpdate,
  defaultCallerId = '',
): Promise<FaxDefaultView | null> {
  if (!isId(id)) return null;
  if (patch.is_default === true) await lockDefault(c, accountId);
  // Found first (and locked), so that marking another account's id as default unsets nothing.
  const found = await c.query('SELECT 1 FROM fax_defaults WHERE id = $1 AND account_id = $2 FOR UPDATE', [
    id,
    accountId,
  ]);
  if (found.rowCount !== 1) return null;
  if (patch.fax_as !== undefined) {
    const refused = await checkCallerId(c, accountId, patch.fax_as, defaultCallerId, null, 'fax_as');
    if (refused) throw refused;
  }
  if (patch.is_default === true) await unsetDefault(c, accountId, id);
  const set = COLUMNS.filter((k) => patch[k] !== undefined);
  const r = await c.query<FaxDefaultView>(
    `UPDATE fax_defaults SET ${set.map((k, i) => `${k} = $${i + 3}`).join(', ')}
      WHERE id = $1 AND account_id = $2
      RETURNING ${FAX_DEFAULT_VIEW_COLUMNS}`,
    [id, accountId, ...set.map((k) => patch[k])],
  );
  return r.rows[0] ?? null;
}

/**
 * Deletes a Fax Default. Sends naming it are refused from now on; when it was the default, the
 * account has none. Faxes accepted with it keep its values (fax_jobs.fax_default).
 */
export async function deleteFaxDefault(c: Queryable, accountId: string, id: string): Promise<boolean> {
  if (!isId(id)) return false;
  const r = await c.query('DELETE FROM fax_defaults WHERE id = $1 AND account_id = $2', [id, accountId]);
  return r.rowCount === 1;
}
