// Request schemas of the customer API. They validate requests and generate the OpenAPI document.
import { z } from 'zod';
import { E164_PATTERN } from './e164.ts';

const e164 = z
  .string({ message: 'must be a string' })
  .regex(E164_PATTERN, 'must be an E.164 number: +, a first digit 1-9, then 1 to 14 more digits');

function isHttpUrl(s: string): boolean {
  try {
    const u = new URL(s);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}

/**
 * An unknown property is refused, not stripped: a misspelt field would otherwise be accepted as if it
 * had not been sent (a send "succeeding" without its subject), and a body of millions of unknown keys
 * would be walked to be thrown away. "unknown field "x"" after the object's path (describeIssues).
 */
function unknownFields(i: { code?: string; keys?: string[] }): string | undefined {
  if (i.code !== 'unrecognized_keys') return undefined;
  const keys = i.keys ?? [];
  const named = keys
    .slice(0, 5)
    .map((k) => JSON.stringify(short(k)))
    .join(', ');
  const more = keys.length > 5 ? ` and ${keys.length - 5} more` : '';
  return `${keys.length === 1 ? 'unknown field' : 'unknown fields'} ${named}${more}`;
}

/** An object schema that refuses unknown properties (unknownFields). */
export const strict = <T extends z.core.$ZodLooseShape>(shape: T) =>
  z.strictObject(shape, { error: unknownFields });

export const faxDocument = strict({
  file_name: z
    .string({ message: 'is required' })
    .min(1, 'must not be empty')
    .max(255, 'is longer than 255 characters'),
  file_url: z.string({ message: 'must be a string' }).max(2048, 'is longer than 2048 characters').optional(),
  file_data: z.string({ message: 'must be a string' }).optional(),
}).superRefine((d, ctx) => {
  if (d.file_url !== undefined && d.file_data !== undefined)
    ctx.addIssue({ code: 'custom', message: 'give either file_url or file_data, not both' });
  else if (d.file_url === undefined && d.file_data === undefined)
    ctx.addIssue({ code: 'custom', message: 'one of file_url or file_data is required' });
  if (d.file_url !== undefined) {
    if (!isHttpUrl(d.file_url))
      ctx.addIssue({ code: 'custom', path: ['file_url'], message: 'must be an http or https URL' });
  }
});

const isoDate = z
  .string({ message: 'must be a string' })
  .regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$/, {
    message: 'must be an ISO 8601 timestamp with a time-zone offset, e.g. 2026-12-01T09:30:00Z',
    abort: true,
  })
  .refine((s) => !Number.isNaN(Date.parse(s)), 'is not a valid date');

/** Bounds of the per-fax options (docs/api.md "Per-fax options"; migration 016 checks them too). */
export const faxOptionBounds = {
  clientReferenceMax: 128,
  maxDials: [1, 100],
  giveUpAfter: [60, 7 * 86_400],
  /** The schema's ceiling on recipients; BROADCAST_MAX_RECIPIENTS sets the installation's limit below it. */
  recipientsCeiling: 10_000,
} as const;

const MAX_DOCUMENTS = 20;

/** Printable characters only: no control characters (C0, DEL, C1) and no line breaks. */
const PRINTABLE = /^[^\p{Cc}\u2028\u2029]*$/u;

const clientReference = z
  .string({ message: 'must be a string' })
  .min(1, 'must not be empty')
  .max(faxOptionBounds.clientReferenceMax, `is longer than ${faxOptionBounds.clientReferenceMax} characters`)
  .regex(PRINTABLE, 'must be printable characters (no control characters or line breaks)')
  .describe(
    `Your own reference for this fax, 1-${faxOptionBounds.clientReferenceMax} printable characters: returned with the fax, in its events and webhooks, and searchable (GET /v1/faxes?client_reference=). Not unique: several faxes may share one.`,
  );

const boundedInt = (name: string, [min, max]: readonly [number, number], unit = '') =>
  z
    .number({ message: 'must be a whole number' })
    .int('must be a whole number')
    .min(min, `must be at least ${min}${unit}`)
    .max(max, `must be at most ${max}${unit}`)
    .describe(name);

/** One recipient of a broadcast: its number and its own cover-page fields. */
export const broadcastRecipient = strict({
  fax_number: e164,
  to_name: z
    .string({ message: 'must be a string' })
    .max(200, 'is longer than 200 characters')
    .optional()
    .describe("The recipient's name on its cover page (recipient_name of a single send)."),
  subject: z
    .string({ message: 'must be a string' })
    .max(200, 'is longer than 200 characters')
    .optional()
    .describe("This recipient's cover-page subject, instead of the send's subject."),
  message: z
    .string({ message: 'must be a string' })
    .max(5000, 'is longer than 5000 characters')
    .optional()
    .describe("This recipient's cover-page message, instead of the send's message."),
  client_reference: clientReference
    .optional()
    .describe("This recipient's fax reference, instead of the send's client_reference."),
});
export type BroadcastRecipient = z.infer<typeof broadcastRecipient>;

export const sendFaxBody = strict({
  fax_number: e164
    .optional()
    .describe('Destination. Required unless recipients is given (then it must be absent).'),
  recipients: z
    .array(broadcastRecipient, { message: 'must be an array' })
    .min(1, 'must have at least 1 recipient')
    .max(faxOptionBounds.recipientsCeiling, `has more than ${faxOptionBounds.recipientsCeiling} recipients`)
    .optional()
    .describe(
      'Broadcast: in place of fax_number, the recipients of the same documents, each with its own cover-page fields; one fax job per recipient, grouped by a broadcast_id. At most BROADCAST_MAX_RECIPIENTS (default 1000).',
    ),
  fax_data: z
    .array(faxDocument, { message: 'must be an array' })
    .min(1, 'must have at least 1 document')
    .max(MAX_DOCUMENTS, `has more than ${MAX_DOCUMENTS} documents`),
  caller_id: e164.optional(),
  template_id: z.string({ message: 'must be a string' }).optional(),
  smart_document_id: z.string({ message: 'must be a string' }).optional(),
  fax_priority: z.enum(['high', 'regular'], { message: "must be 'high' or 'regular'" }).default('regular'),
  fax_quality: z.enum(['low', 'standard', 'hd'], { message: "must be 'low', 'standard' or 'hd'" }).optional(),
  scheduled_date: isoDate.optional(),
  approval_required: z.boolean({ message: 'must be true or false' }).default(false),
  subject: z.string({ message: 'must be a string' }).max(200, 'is longer than 200 characters').optional(),
  sender_name: z.string({ message: 'must be a string' }).max(200, 'is longer than 200 characters').optional(),
  recipient_name: z
    .string({ message: 'must be a string' })
    .max(200, 'is longer than 200 characters')
    .optional(),
  message: z.string({ message: 'must be a string' }).max(5000, 'is longer than 5000 characters').optional(),
  client_reference: clientReference.optional(),
  max_dials: boundedInt(
    `Calls placed for this fax before it is given up, instead of the installation's MAX_DIALS: ${faxOptionBounds.maxDials[0]}-${faxOptionBounds.maxDials[1]}.`,
    faxOptionBounds.maxDials,
  ).optional(),
  give_up_after: boundedInt(
    `Seconds after the fax was first ready to send after which no new call is placed, instead of the installation's KILL_TIME_SECONDS: ${faxOptionBounds.giveUpAfter[0]}-${faxOptionBounds.giveUpAfter[1]} (7 days).`,
    faxOptionBounds.giveUpAfter,
    ' seconds',
  ).optional(),
})
  .superRefine((b, ctx) => {
    if (b.template_id !== undefined && b.smart_document_id !== undefined)
      ctx.addIssue({ code: 'custom', message: 'template_id and smart_document_id cannot be combined' });
    if (b.fax_number !== undefined && b.recipients !== undefined)
      ctx.addIssue({
        code: 'custom',
        message: 'give either fax_number (one recipient) or recipients (a broadcast), not both',
      });
    else if (b.fax_number === undefined && b.recipients === undefined)
      ctx.addIssue({ code: 'custom', path: ['fax_number'], message: 'is required' });
  })
  .meta({
    description:
      "A send to one number (the spec's form: fax_number) or a broadcast (recipients instead of fax_number); exactly one of the two.",
    oneOf: [
      { title: 'one recipient', required: ['fax_number'], not: { required: ['recipients'] } },
      { title: 'broadcast', required: ['recipients'], not: { required: ['fax_number'] } },
    ],
  });
export type SendFaxBody = z.infer<typeof sendFaxBody>;

/**
 * The most JSON values (as src/domain/json-shape.ts counts them) a legitimate request body can hold:
 * a send to `maxRecipients` recipients, each with every field of a recipient, with the most documents
 * (MAX_DOCUMENTS), each with every field of a document, and every field of a send. No other request of the API
 * comes near it (the others are at most SMALL_BODY_BYTES). Counted as the scan does: 1, plus 1 per
 * member of an object (the comma before it, or the object for its first), plus 1 per element of an
 * array with its own members for an object element. With BROADCAST_MAX_RECIPIENTS=1000: 6,098.
 */
export function maxJsonValues(maxRecipients: number): number {
  const fields = (o: { shape: object }) => Object.keys(o.shape).length;
  return (
    1 +
    fields(sendFaxBody) +
    maxRecipients * (1 + fields(broadcastRecipient)) +
    MAX_DOCUMENTS * (1 + fields(faxDocument))
  );
}

export const forwardFaxBody = strict({
  job_id: z.string({ message: 'is required' }).min(1, 'is required'),
  fax_number: e164,
  caller_id: e164.optional(),
});

export const cancelScheduleBody = strict({
  job_id: z.string({ message: 'is required' }).min(1, 'is required'),
});

export const approveBody = strict({
  job_id: z.string({ message: 'is required' }).min(1, 'is required'),
});

export const rejectBody = strict({
  job_id: z.string({ message: 'is required' }).min(1, 'is required'),
  reason: z.string({ message: 'must be a string' }).max(500, 'is longer than 500 characters').optional(),
});

export const contactDeleteBody = strict({
  id: z
    .string({ message: 'is required' })
    .describe(
      'The encrypted contact ID: 32 opaque characters (base64url) issued by this installation; an altered or made-up one is not found.',
    ),
});

export const authBody = z.object({
  api_secret_key: z.string({ message: 'is required' }).min(1, 'is required'),
});

/**
 * Bodies whose text never reaches PostgreSQL as text, so the check for text it cannot store
 * (unstorableText) is not theirs: the API key is only hashed, and the contract answers every wrong
 * key with 401 'API Secret Key is invalid.'.
 */
export const textNotStored: ReadonlySet<z.ZodType> = new Set<z.ZodType>([authBody]);

/** "field.path: why" for the first few issues, as the envelope's message. */
export function describeIssues(err: z.ZodError, input?: unknown): string {
  return err.issues
    .slice(0, 5)
    .map((i) => {
      const path = i.path
        .map((p, n) => (typeof p === 'number' ? `[${p}]` : n === 0 ? String(p) : `.${String(p)}`))
        .join('');
      const msg =
        i.code === 'invalid_type' && valueAt(input, i.path) === undefined ? 'is required' : i.message;
      return path ? `${path}: ${msg}` : msg;
    })
    .join('; ');
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = input;
  for (const p of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[p];
  }
  return v;
}

/**
 * Text PostgreSQL cannot store: U+0000 (refused by text columns and by jsonb, even in keys) and
 * UTF-16 surrogates without their pair (refused by jsonb; text columns would get U+FFFD instead).
 * Checked over the whole parsed body, values and property names, before any schema, so every route
 * and both intakes refuse it the same way. Returns "path: why" for the first few, or null.
 */
export function unstorableText(input: unknown, max = 5): string | null {
  const found: string[] = [];
  // Iterative (a body may be nested thousands deep); a node's path is rebuilt only when reported.
  interface Node {
    value: unknown;
    key: string | number | null;
    parent: Node | null;
  }
  const stack: Node[] = [{ value: input, key: null, parent: null }];
  const pathOf = (n: Node | null): (string | number)[] => {
    const out: (string | number)[] = [];
    for (let p = n; p && p.key !== null; p = p.parent) out.push(p.key);
    return out.reverse();
  };
  while (stack.length > 0 && found.length < max) {
    const n = stack.pop()!;
    const v = n.value;
    if (typeof v === 'string') {
      const why = textProblem(v);
      if (why) found.push(describePath(pathOf(n), why));
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], key: i, parent: n });
    } else if (v !== null && typeof v === 'object') {
      const keys = Object.keys(v);
      for (let i = keys.length - 1; i >= 0; i--) {
        const k = keys[i]!;
        const why = textProblem(k);
        if (why) found.push(describePath(pathOf(n), `property name ${JSON.stringify(short(k))} ${why}`));
        else stack.push({ value: (v as Record<string, unknown>)[k], key: k, parent: n });
      }
    }
  }
  return found.length > 0 ? found.slice(0, max).join('; ') : null;
}

function textProblem(s: string): string | null {
  if (s.includes('\u0000')) return 'contains the character U+0000 (NUL), which cannot be stored';
  if (!s.isWellFormed())
    return 'contains an unpaired UTF-16 surrogate (U+D800 to U+DFFF), which is not valid Unicode text';
  return null;
}

/** A client's property name as echoed in a message: at most 64 characters. */
const short = (k: string) => (k.length > 64 ? `${k.slice(0, 63).replace(/[\ud800-\udbff]$/, '')}…` : k);

function describePath(path: readonly (string | number)[], why: string): string {
  const p = path
    .map((k, n) => (typeof k === 'number' ? `[${k}]` : n === 0 ? short(k) : `.${short(k)}`))
    .join('');
  // A path thousands deep is shown by its end, the part nearest the field.
  const shown = p.length > 200 ? `…${p.slice(-199).replace(/^[\udc00-\udfff]/, '')}` : p;
  return shown ? `${shown}: ${why}` : why;
}
