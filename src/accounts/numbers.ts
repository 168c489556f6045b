// Fax numbers: operators assign and release them (admin CLI, as the schema owner), customers update a
// number's label, station id and receiving flag (the API, scoped to the account), and the intake
// checks the caller id of every send and forward against them.
import { z } from 'zod';
import { ApiError } from '../domain/envelope.ts';
import type { Queryable } from '../db/pool.ts';
import { E164_PATTERN, isE164 } from '../domain/e164.ts';
import { isId } from '../domain/ids.ts';

/** T.30 TSI/CSID: at most 20 characters, each a digit, a space or '+'. */
export const STATION_ID = /^[0-9 +]{1,20}$/;

const label = z
  .string({ message: 'must be a string or null' })
  .trim()
  .min(1, 'must not be empty (null clears it)')
  .max(100, 'is longer than 100 characters')
  .nullable();
const stationId = z
  .string({ message: 'must be a string or null' })
  .regex(STATION_ID, 'must be 1 to 20 characters, each a digit, a space or + (T.30 TSI/CSID)')
  .nullable();

export const numberUpdateBody = z
  .object({
    label: label.optional(),
    station_id: stationId
      .optional()
      .describe('What the remote fax machine shows as our identity (T.30 TSI/CSID); null: the number.'),
    receive: z.boolean({ message: 'must be true or false' }).optional(),
    email_to: z
      .array(
        z
          .string({ message: 'must be a string' })
          .max(254, 'is longer than 254 characters')
          .regex(/^[^@\s<>,;]+@[^@\s<>,;]+\.[^@\s<>,;]+$/, 'must be an email address'),
        { message: 'must be an array of email addresses' },
      )
      .max(10, 'has more than 10 addresses')
      .optional()
      .describe(
        'Fax to email: addresses that get every fax this number receives ([] stops it; docs/mail.md).',
      ),
    email_attach: z
      .enum(['pdf', 'link', 'none'], { message: 'must be pdf, link or none' })
      .optional()
      .describe(
        'What the mail of a received fax carries: pdf (the fax attached), link (a link to it, no document in the mail), none (only that it arrived).',
      ),
  })
  .strict()
  .refine(
    (b) => Object.keys(b).length > 0,
    'give at least one of label, station_id, receive, email_to, email_attach',
  );
export type NumberUpdate = z.output<typeof numberUpdateBody>;

export interface NumberRow {
  id: string;
  number: string;
  label: string | null;
  station_id: string | null;
  receive: boolean;
  capabilities: string[];
  email_to: string[];
  email_attach: 'pdf' | 'link' | 'none';
  created_at: string;
}

export const NUMBER_COLUMNS = `id, number, label, station_id, receive, capabilities, email_to, email_attach,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`;

export const numberMessages = {
  updated: 'Number has been updated successfully.',
  notFound: 'Number not found',
} as const;

/** A refusal of the operator's command (the admin CLI prints the message and exits 1). */
export class NumberAdminError extends Error {
  override readonly name = 'NumberAdminError';
}

export interface Assignment {
  accountId: string;
  number: string;
  receive?: boolean;
  label?: string;
  stationId?: string;
}

/**
 * Assigns a number to an account (run as the schema owner, in a transaction). A number belongs to one
 * account: one held by another account is refused; one the account holds already is updated with the
 * options given (so the command can be repeated).
 */
export async function assignNumber(
  c: Queryable,
  a: Assignment,
): Promise<NumberRow & { account_id: string; created: boolean }> {
  if (!isE164(a.number))
    throw new NumberAdminError(
      `--number ${JSON.stringify(a.number)} is not an E.164 number (+, a first digit 1-9, then 1 to 14 more digits)`,
    );
  if (!isId(a.accountId)) throw new NumberAdminError(`--account: no account with id ${a.accountId}`);
  if (a.stationId !== undefined && !STATION_ID.test(a.stationId))
    throw new NumberAdminError('--station-id must be 1 to 20 characters, each a digit, a space or +');
  if (a.label !== undefined && (a.label.trim() === '' || a.label.length > 100))
    throw new NumberAdminError('--label must be 1 to 100 characters');
  const acc = await c.query('SELECT 1 FROM accounts WHERE id = $1', [a.accountId]);
  if (acc.rowCount !== 1) throw new NumberAdminError(`--account: no account with id ${a.accountId}`);
  const ins = await c.query<NumberRow & { account_id: string }>(
    `INSERT INTO numbers (account_id, number, label, station_id, receive)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (number) DO NOTHING
     RETURNING account_id, ${NUMBER_COLUMNS}`,
    [a.accountId, a.number, a.label?.trim() ?? null, a.stationId ?? null, a.receive ?? false],
  );
  if (ins.rows[0]) return { ...ins.rows[0], created: true };
  const held = await c.query<{ account_id: string }>(
    'SELECT account_id FROM numbers WHERE number = $1 FOR UPDATE',
    [a.number],
  );
  const owner = held.rows[0]?.account_id;
  if (owner !== a.accountId)
    throw new NumberAdminError(
      owner === undefined
        ? `number ${a.number} was released while it was being assigned; try again`
        : `number ${a.number} belongs to another account (${owner}); release it first with remove-number --number ${a.number}`,
    );
  const upd = await c.query<NumberRow & { account_id: string }>(
    `UPDATE numbers SET label = coalesce($2, label), station_id = coalesce($3, station_id),
            receive = coalesce($4, receive)
      WHERE number = $1 RETURNING account_id, ${NUMBER_COLUMNS}`,
    [a.number, a.label?.trim() ?? null, a.stationId ?? null, a.receive ?? null],
  );
  return { ...upd.rows[0]!, created: false };
}

/** Releases a number from whichever account holds it (run as the schema owner). */
export async function releaseNumber(
  c: Queryable,
  number: string,
): Promise<{ number: string; account_id: string }> {
  if (!isE164(number))
    throw new NumberAdminError(`--number ${JSON.stringify(number)} is not an E.164 number`);
  const r = await c.query<{ number: string; account_id: string }>(
    'DELETE FROM numbers WHERE number = $1 RETURNING number, account_id',
    [number],
  );
  if (!r.rows[0]) throw new NumberAdminError(`number ${number} is not assigned to any account`);
  return r.rows[0];
}

/** Updates a number of the account (scoped transaction); null when it is not the account's. */
export async function updateNumber(c: Queryable, id: string, patch: NumberUpdate): Promise<NumberRow | null> {
  if (!isId(id)) return null;
  const cur = await c.query<{ capabilities: string[] }>('SELECT capabilities FROM numbers WHERE id = $1', [
    id,
  ]);
  if (!cur.rows[0]) return null;
  if (patch.receive === true && !cur.rows[0].capabilities.includes('fax_receive'))
    throw new ApiError(422, 'receive: this number cannot receive faxes (its capabilities lack fax_receive)');
  const sets: string[] = [];
  const values: unknown[] = [id];
  for (const k of ['label', 'station_id', 'receive', 'email_to', 'email_attach'] as const) {
    if (patch[k] === undefined) continue;
    values.push(patch[k]);
    sets.push(`${k} = $${values.length}`);
  }
  const r = await c.query<NumberRow>(
    `UPDATE numbers SET ${sets.join(', ')} WHERE id = $1 RETURNING ${NUMBER_COLUMNS}`,
    values,
  );
  return r.rows[0] ?? null;
}

/**
 * The caller id rule: a fax presents one of its account's numbers, or the installation's default
 * caller id (FAX_DEFAULT_CALLER_ID). Returns the refusal (422 naming `field`) or null. `from` says
 * where the caller id came from when the request did not give it. The same rule refuses a Fax
 * Default's fax_as when it is saved (field 'fax_as'), not only when a send uses it.
 */
export async function checkCallerId(
  c: Queryable,
  accountId: string,
  callerId: string,
  installationDefault: string,
  from: string | null,
  field: 'caller_id' | 'fax_as' = 'caller_id',
): Promise<ApiError | null> {
  if (installationDefault !== '' && callerId === installationDefault) return null;
  if (E164_PATTERN.test(callerId)) {
    const r = await c.query('SELECT 1 FROM numbers WHERE account_id = $1 AND number = $2', [
      accountId,
      callerId,
    ]);
    if (r.rowCount === 1) return null;
  }
  return new ApiError(
    422,
    `${field}: ${callerId}${from ? ` (${from})` : ''} is not one of your account's numbers` +
      (installationDefault !== '' ? ` nor the installation's caller id ${installationDefault}` : '') +
      (field === 'caller_id'
        ? '; send with caller_id set to one of the numbers of GET /v1/numbers'
        : '; set fax_as to one of the numbers of GET /v1/numbers'),
  );
}
