// The PDF checks themselves. They run inside the sandbox process (child.ts), never in a worker's
// own process: pdf-lib holds the whole file in memory and hostile files can take minutes and
// gigabytes. Each refusal is a DocumentError whose code becomes the job's failure_code.
import { PDFDocument, PDFName, PDFNumber, PDFRawStream, ParseSpeeds } from 'pdf-lib';
import { DocumentError } from '../errors.ts';
import { countDecoded } from './budget.ts';

export interface InspectLimits {
  maxPages: number;
  /** Largest decoded size of one stream, and of one image as its dictionary declares it. */
  maxStreamBytes: number;
  /** Largest decoded size of all streams of the document together. */
  maxDecodedBytes: number;
}

export interface PageInfo {
  /** Points (1/72 in), after UserUnit; as the page is displayed before /Rotate. */
  width: number;
  height: number;
  rotate: number;
}

export interface PdfInfo {
  pageCount: number;
  /** What all streams decode to, every filter's output counted (budget.ts). */
  decodedBytes: number;
  pages: PageInfo[];
}

/** The check codes (the job's failure_code). */
export const checkCodes = {
  notPdf: 'not_a_pdf',
  truncated: 'pdf_truncated',
  encrypted: 'pdf_encrypted',
  broken: 'pdf_broken',
  noPages: 'pdf_no_pages',
  tooManyPages: 'pdf_too_many_pages',
  pageSize: 'pdf_page_size',
  bomb: 'pdf_decompression_bomb',
  imageTooLarge: 'pdf_image_too_large',
} as const;

/** Page sides outside this range (in points) are absurd: 0.5 in to 200 in, the PDF format's own limit. */
export const pageSideLimits = { min: 36, max: 14_400 } as const;

export async function inspectPdf(bytes: Uint8Array, name: string, limits: InspectLimits): Promise<PdfInfo> {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (buf.length < 5 || buf.subarray(0, 5).toString('latin1') !== '%PDF-')
    throw new DocumentError(checkCodes.notPdf, `${name}: not a PDF (it does not start with %PDF-)`);
  const text = buf.toString('latin1');
  if (buf.subarray(Math.max(0, buf.length - 1024)).indexOf('%%EOF') < 0) {
    // Objects but no end: cut off in transfer. Not even one object: not a PDF body at all.
    if (/\d+\s+\d+\s+obj\b/.test(text))
      throw new DocumentError(
        checkCodes.truncated,
        `${name}: the PDF is truncated (no %%EOF marker at its end)`,
      );
    throw new DocumentError(checkCodes.broken, `${name}: the PDF cannot be read (it holds no PDF objects)`);
  }
  // Encryption is declared in the trailer (or the cross-reference stream's dictionary), which is
  // never itself compressed or encrypted: a byte search finds it even when pdf-lib could not parse
  // the encrypted objects.
  if (/\/Encrypt\s*(\d+\s+\d+\s+R|<<)/.test(text))
    throw new DocumentError(checkCodes.encrypted, `${name}: the PDF is encrypted or password-protected`);

  // Before any parser decodes anything: every stream through its whole filter chain, counted
  // while streaming and stopped past the budgets (budget.ts).
  const decodedBytes = await countDecoded(buf, text, name, limits);

  let doc: PDFDocument;
  try {
    doc = await PDFDocument.load(buf, {
      throwOnInvalidObject: true,
      updateMetadata: false,
      ignoreEncryption: true,
      parseSpeed: ParseSpeeds.Fastest,
    });
  } catch (err) {
    throw new DocumentError(checkCodes.broken, `${name}: the PDF cannot be read (${short(err)})`);
  }
  if (doc.isEncrypted)
    throw new DocumentError(checkCodes.encrypted, `${name}: the PDF is encrypted or password-protected`);

  let count: number;
  try {
    count = doc.getPageCount();
  } catch (err) {
    throw new DocumentError(checkCodes.broken, `${name}: the PDF's page tree is broken (${short(err)})`);
  }
  if (count === 0) throw new DocumentError(checkCodes.noPages, `${name}: the PDF has no pages`);
  if (count > limits.maxPages)
    throw new DocumentError(
      checkCodes.tooManyPages,
      `${name}: the PDF has ${count} pages; at most ${limits.maxPages} are accepted per document`,
    );

  const pages: PageInfo[] = [];
  const all = doc.getPages();
  for (let i = 0; i < all.length; i++) {
    const page = all[i]!;
    let box: { width: number; height: number };
    try {
      box = page.getMediaBox();
    } catch {
      throw new DocumentError(checkCodes.broken, `${name}: page ${i + 1} has no valid MediaBox`);
    }
    const uu = page.node.lookup(PDFName.of('UserUnit'));
    const unit = uu instanceof PDFNumber ? uu.asNumber() : 1;
    const w = Math.abs(box.width * unit);
    const h = Math.abs(box.height * unit);
    if (
      !Number.isFinite(w) ||
      !Number.isFinite(h) ||
      Math.min(w, h) < pageSideLimits.min ||
      Math.max(w, h) > pageSideLimits.max
    )
      throw new DocumentError(
        checkCodes.pageSize,
        `${name}: page ${i + 1} measures ${fmt(w)} x ${fmt(h)} pt; each side must be between ${pageSideLimits.min} pt (0.5 in) and ${pageSideLimits.max} pt (200 in)`,
      );
    pages.push({ width: w, height: h, rotate: page.getRotation().angle });
  }

  // Images: the renderer allocates what the dictionary declares, whatever the stream holds.
  for (const [, obj] of doc.context.enumerateIndirectObjects()) {
    if (!(obj instanceof PDFRawStream)) continue;
    if (obj.dict.lookup(PDFName.of('Subtype')) !== PDFName.of('Image')) continue;
    const num = (k: string) => {
      const v = obj.dict.lookup(PDFName.of(k));
      return v instanceof PDFNumber ? v.asNumber() : 0;
    };
    const bpc = num('BitsPerComponent') || 8;
    const cs = obj.dict.lookup(PDFName.of('ColorSpace'));
    // Gray 1, RGB 3; anything else (CMYK, ICC-based, indexed, …) counted as 4, the most there is.
    const comps = cs === PDFName.of('DeviceGray') ? 1 : cs === PDFName.of('DeviceRGB') ? 3 : 4;
    const decoded = (num('Width') * num('Height') * bpc * comps) / 8;
    if (!Number.isFinite(decoded) || decoded > limits.maxStreamBytes)
      throw new DocumentError(
        checkCodes.imageTooLarge,
        `${name}: an image declares ${num('Width')} x ${num('Height')} pixels, more than ${limits.maxStreamBytes} bytes decoded`,
      );
  }
  return { pageCount: count, decodedBytes, pages };
}

function short(err: unknown): string {
  return String((err as Error)?.message ?? err).slice(0, 200);
}

function fmt(n: number): string {
  return Number.isFinite(n) ? String(Math.round(n * 10) / 10) : String(n);
}
