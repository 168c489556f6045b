// Turns a job's stored documents into what the line needs. This first version checks that each
// document is a PDF pdf-lib can open and counts its pages; page sizes on the line are estimated
// per quality from measured fax images (fax-domain notes: ~19 KB per letter page at standard).
import { PDFDocument } from 'pdf-lib';
import type { Quality } from '../transmission/backend.ts';
import { checkPdf } from './check.ts';
import { DocumentError } from './errors.ts';

export interface DocumentSource {
  file_name: string;
  file_url: string | null;
  content: Buffer | null;
}

export interface Prepared {
  pageCount: number;
  pageBytes: number[];
}

const estimatedPageBytes: Record<Quality, number> = { low: 12_000, standard: 19_000, hd: 40_000 };

export type Fetcher = (url: string, signal: AbortSignal) => Promise<Buffer>;

export function isPdf(bytes: Uint8Array): boolean {
  return bytes.length >= 5 && Buffer.from(bytes.subarray(0, 5)).toString('latin1') === '%PDF-';
}

export async function countPages(bytes: Uint8Array, name: string): Promise<number> {
  if (!isPdf(bytes)) throw new DocumentError('not_a_pdf', `${name}: not a PDF (does not start with %PDF-)`);
  let n: number;
  try {
    const doc = await PDFDocument.load(bytes, { throwOnInvalidObject: true, updateMetadata: false });
    n = doc.getPageCount();
  } catch (err) {
    if ((err as Error).name === 'EncryptedPDFError')
      throw new DocumentError('pdf_encrypted', `${name}: the PDF is encrypted`);
    throw new DocumentError('pdf_broken', `${name}: the PDF cannot be read (${(err as Error).message})`);
  }
  if (n === 0) throw new DocumentError('pdf_no_pages', `${name}: the PDF has no pages`);
  return n;
}

export async function prepareDocuments(
  docs: DocumentSource[],
  quality: Quality,
  fetcher: Fetcher,
  signal: AbortSignal,
): Promise<Prepared> {
  let pages = 0;
  for (const d of docs) {
    const bytes = d.content ?? (d.file_url ? await fetcher(d.file_url, signal) : null);
    if (!bytes) throw new DocumentError('document_missing', `${d.file_name}: no content`);
    pages += (await checkPdf(bytes, d.file_name, signal)).pageCount; // in the sandbox (check.ts)
  }
  return { pageCount: pages, pageBytes: Array.from({ length: pages }, () => estimatedPageBytes[quality]) };
}
