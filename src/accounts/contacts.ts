// An account's contacts: create, list (with search), get, update. Run inside a transaction scoped to
// the account (TenantDb: row-level security); the HTTP routes and seed-demo share these functions.
// Customers see encrypted ids (src/api/contact-id.ts), never the database's UUID.
import { z } from 'zod';
import { ApiError } from '../domain/envelope.ts';
import type { Queryable } from '../db/pool.ts';
import { E164_PATTERN } from '../domain/e164.ts';

const e164 = z
  .string({ message: 'must be a string' })
  .regex(E164_PATTERN, 'must be an E.164 number: +, a first digit 1-9, then 1 to 14 more digits');
const name = z
  .string({ message: 'must be a string' })
  .trim()
  .min(1, 'must not be empty')
  .max(200, 'is longer than 200 characters');
const company = z
  .string({ message: 'must be a string or null' })
  .trim()
  .max(200, 'is longer than 200 characters')
  .transform((s) => (s === '' ? null : s))
  .nullable();

export const contactCreateBody = z
  .object({
    name,
    fax_number: e164,
    company: company.optional().describe('Optional; null or an empty string clears it.'),
  })
  .strict();
export type ContactCreate = z.output<typeof contactCreateBody>;

export const contactUpdateBody = z
  .object({ name: name.optional(), fax_number: e164.optional(), company: company.optional() })
  .strict()
  .refine((b) => Object.keys(b).length > 0, 'give at least one of name, fax_number, company');
export type ContactUpdate = z.output<typeof contactUpdateBody>;

export interface ContactRow {
  id: string;
  name: string;
  fax_number: string | null;
  company: string | null;
  created_at: string;
}

export const CONTACT_COLUMNS = `id, name, fax_number, company,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`;

export const contactMessages = {
  created: 'Contact created successfully',
  listed: 'Contacts retrieved successfully',
  found: 'Contact retrieved successfully',
  updated: 'Contact has been updated successfully.',
} as const;

/** Serialises the writes of one account's contacts (the cap and the duplicate rule read, then write). */
async function lockContacts(c: Queryable, accountId: string): Promise<void> {
  await c.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 7301019))', [`contacts:${accountId}`]);
}

/** A contact of this account with this fax number, other than `except`. */
async function sameNumber(
  c: Queryable,
  accountId: string,
  faxNumber: string,
  except: string | null,
): Promise<string | null> {
  const r = await c.query<{ id: string }>(
    'SELECT id FROM contacts WHERE account_id = $1 AND fax_number = $2 AND id IS DISTINCT FROM $3 LIMIT 1',
    [accountId, faxNumber, except],
  );
  return r.rows[0]?.id ?? null;
}

/** Refusal of a second contact with the same fax number (decision: one contact per number). */
export const duplicateNumber = (existingId: string) =>
  new ApiError(409, 'fax_number: a contact with this fax number exists already in your account', {
    data: { id: existingId },
  });

/**
 * Creates a contact, at most `max` per account, one per fax number. `encode` turns a database id into
 * the id customers see (for the duplicate's answer).
 */
export async function createContact(
  c: Queryable,
  accountId: string,
  input: ContactCreate,
  max: number,
  encode: (id: string) => string,
): Promise<ContactRow> {
  await lockContacts(c, accountId);
  const n = await c.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM (SELECT 1 FROM contacts WHERE account_id = $1 LIMIT $2) x',
    [accountId, max],
  );
  if (n.rows[0]!.n >= max)
    throw new ApiError(
      422,
      `Contact limit reached: an account may have at most ${max} contacts; delete one first`,
    );
  const dup = await sameNumber(c, accountId, input.fax_number, null);
  if (dup) throw duplicateNumber(encode(dup));
  const r = await c.query<ContactRow>(
    `INSERT INTO contacts (account_id, name, fax_number, company) VALUES ($1, $2, $3, $4)
     RETURNING ${CONTACT_COLUMNS}`,
    [accountId, input.name, input.fax_number, input.company ?? null],
  );
  return r.rows[0]!;
}

/** Deletes a contact of the transaction's account (row-level security); false when there is none. */
export async function deleteContact(c: Queryable, id: string): Promise<boolean> {
  const r = await c.query('DELETE FROM contacts WHERE id = $1', [id]);
  return r.rowCount === 1;
}

export async function getContact(c: Queryable, id: string): Promise<ContactRow | null> {
  const r = await c.query<ContactRow>(`SELECT ${CONTACT_COLUMNS} FROM contacts WHERE id = $1`, [id]);
  return r.rows[0] ?? null;
}

/** Updates the given fields; null when the contact is not the account's. */
export async function updateContact(
  c: Queryable,
  accountId: string,
  id: string,
  patch: ContactUpdate,
  encode: (id: string) => string,
): Promise<ContactRow | null> {
  if (patch.fax_number !== undefined) {
    await lockContacts(c, accountId);
    // A contact that is not the account's is not found (404), whatever the number would collide with.
    if ((await c.query('SELECT 1 FROM contacts WHERE id = $1', [id])).rowCount !== 1) return null;
    const dup = await sameNumber(c, accountId, patch.fax_number, id);
    if (dup) throw duplicateNumber(encode(dup));
  }
  const sets: string[] = [];
  const values: unknown[] = [id];
  for (const k of ['name', 'fax_number', 'company'] as const) {
    if (patch[k] === undefined) continue;
    values.push(patch[k]);
    sets.push(`${k} = $${values.length}`);
  }
  const r = await c.query<ContactRow>(
    `UPDATE contacts SET ${sets.join(', ')} WHERE id = $1 RETURNING ${CONTACT_COLUMNS}`,
    values,
  );
  return r.rows[0] ?? null;
}

/**
 * The WHERE conditions of a contact search: a case-insensitive substring of the name, or, when the
 * search has digits, those digits in the fax number (spaces, dashes, brackets and + ignored).
 * The scan is bounded by CONTACTS_PER_ACCOUNT (it reads the account's contacts only).
 */
export function contactSearch(search: string): { where: string[]; values: unknown[] } {
  const like = `%${search.replace(/[\\%_]/g, (ch) => `\\${ch}`)}%`;
  const digits = search.replace(/\D/g, '');
  if (digits === '') return { where: [`name ILIKE $1`], values: [like] };
  return {
    where: [`(name ILIKE $1 OR regexp_replace(fax_number, '[^0-9]', '', 'g') LIKE $2)`],
    values: [like, `%${digits}%`],
  };
}
