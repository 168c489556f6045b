// Every column that holds fax content or a secret, and what its values are sealed to (the context
// authenticated with each ciphertext, src/db/encryption.ts): a value copied into another row, column
// or account does not open. docs/encryption.md lists the same columns for operators.
import { contentDigest, encryptionOn, openText, sealMany, sealText, type SealContext } from './encryption.ts';
import type { Queryable } from './pool.ts';

export function documentContext(accountId: string, jobId: string, position: number): SealContext {
  return { accountId, kind: 'fax_documents.content', id: `${jobId}/${position}` };
}

export function renderContext(accountId: string, jobId: string): SealContext {
  return { accountId, kind: 'fax_renders.tiff', id: jobId };
}

export function sharedPageContext(
  accountId: string,
  jobId: string,
  quality: string,
  page: number,
): SealContext {
  return { accountId, kind: 'document_renders.pages', id: `${jobId}/${quality}/${page}` };
}

export function receivedContext(accountId: string, id: string, column: 'tiff' | 'pdf'): SealContext {
  return { accountId, kind: `received_faxes.${column}`, id };
}

export function templateContext(accountId: string, id: string): SealContext {
  return { accountId, kind: 'smart_templates.pdf', id };
}

export function webhookSecretContext(accountId: string, id: string): SealContext {
  return { accountId, kind: 'webhook_endpoints.secret', id };
}

/**
 * The text of a queued mail (mail_outbox subject and body of refusals and plain mails: a refusal
 * repeats the sender's subject and file names). Rows without an account are not sealed.
 */
export function outboxContext(accountId: string, id: string, column: 'subject' | 'body'): SealContext {
  return { accountId, kind: `mail_outbox.${column}`, id };
}

export function coverContext(accountId: string, jobId: string): SealContext {
  return { accountId, kind: 'fax_renders.cover', id: jobId };
}

export function jobOptionsContext(accountId: string, jobId: string): SealContext {
  return { accountId, kind: 'fax_jobs.options', id: jobId };
}

/**
 * The fields of a send's options that are the customer's content (cover-page text, names): sealed
 * together, as JSON text under the key `sealed`, in `fax_jobs.options`. The other options (approval,
 * the mail gateway's origin) stay queryable. docs/encryption.md, "What is encrypted".
 */
export const SEALED_OPTION_FIELDS = ['subject', 'message', 'sender_name', 'recipient_name'] as const;

/** The stored form of a job's options: the content fields moved into one sealed value. */
export async function sealJobOptions<T extends object>(
  db: Queryable,
  accountId: string,
  jobId: string,
  options: T,
): Promise<Record<string, unknown>> {
  if (!encryptionOn()) return { ...(options as Record<string, unknown>) };
  const content: Record<string, unknown> = {};
  const rest: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(options)) {
    if ((SEALED_OPTION_FIELDS as readonly string[]).includes(k)) content[k] = v;
    else rest[k] = v;
  }
  if (Object.keys(content).length === 0) return rest;
  return {
    ...rest,
    sealed: await sealText(db, jobOptionsContext(accountId, jobId), JSON.stringify(content)),
  };
}

/** A job's options as the customer gave them (the inverse of sealJobOptions; clear options as they are). */
export async function openJobOptions<T>(
  db: Queryable,
  accountId: string,
  jobId: string,
  options: T,
): Promise<T> {
  const sealed = (options as { sealed?: unknown } | null)?.sealed;
  if (typeof sealed !== 'string') return options;
  const { sealed: _, ...rest } = options as Record<string, unknown>;
  const content = JSON.parse(await openText(db, jobOptionsContext(accountId, jobId), sealed)) as object;
  return { ...rest, ...content } as T;
}

/** A document's content as stored (sealed) and its digest (contentDigest). */
export interface StoredContent {
  stored: Buffer;
  digest: Buffer;
}

/** The stored form of one job's documents' contents, in order (null stays null). */
export async function sealDocuments(
  db: Queryable,
  jobId: string,
  accountId: string,
  docs: { content: Uint8Array | null }[],
): Promise<(StoredContent | null)[]> {
  const present = docs.flatMap((d, i) =>
    d.content ? [{ ...documentContext(accountId, jobId, i), plain: d.content }] : [],
  );
  const sealed = await sealMany(db, accountId, present);
  const out: (StoredContent | null)[] = [];
  let k = 0;
  for (const d of docs)
    out.push(
      d.content ? { stored: sealed[k++]!, digest: await contentDigest(db, accountId, d.content) } : null,
    );
  return out;
}
