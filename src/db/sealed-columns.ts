// Every column that holds fax content or a secret, and what its values are sealed to (the context
// authenticated with each ciphertext, src/db/encryption.ts): a value copied into another row, column
// or account does not open. docs/encryption.md lists the same columns for operators.
import { sealMany, type SealContext } from './encryption.ts';
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

/** The stored form of one job's documents' contents, in order (null stays null). */
export async function sealDocuments(
  db: Queryable,
  jobId: string,
  accountId: string,
  docs: { content: Uint8Array | null }[],
): Promise<(Buffer | null)[]> {
  const present = docs.flatMap((d, i) =>
    d.content ? [{ ...documentContext(accountId, jobId, i), plain: d.content }] : [],
  );
  const sealed = await sealMany(db, accountId, present);
  let k = 0;
  return docs.map((d) => (d.content ? sealed[k++]! : null));
}
