// The PDF checks themselves. They run inside the sandbox process (child.ts), never in a worker's
// own process: hostile files can take minutes and gigabytes. Each refusal is a DocumentError whose
// code becomes the job's failure_code.
//
// The structure is read by PDFium, the renderer itself (render/engine.ts), so the check is never
// stricter than what renders: a file PDFium repairs (no %%EOF, a broken cross-reference table, a
// page without MediaBox, a page tree that refers to itself) passes, and one it cannot open is refused
// with PDFium's own reason. Before PDFium decodes anything, every stream is counted against the
// decompression budgets (budget.ts): those, the page count and the image sizes are the safety limits.
import { Pdfium, RenderError } from '../render/engine.ts';
import { DocumentError, readableReason } from '../errors.ts';
import { ACCEPTED_FORMATS, checkCodes, sniffFormat, type DocumentFormat } from '../formats.ts';
import { countDecoded } from './budget.ts';

export { checkCodes };

export interface InspectLimits {
  maxPages: number;
  /** Largest decoded size of one stream, and of one image as its dictionary declares it. */
  maxStreamBytes: number;
  /** Largest decoded size of all streams of the document together. */
  maxDecodedBytes: number;
}

export interface PageInfo {
  /** Points (1/72 in), as PDFium places the page (/Rotate applied). */
  width: number;
  height: number;
}

export interface PdfInfo {
  pageCount: number;
  /** What all streams decode to, every filter's output counted (budget.ts). */
  decodedBytes: number;
  pages: PageInfo[];
  /** What the document is, found by its content (its name is not looked at). */
  format: DocumentFormat;
  /**
   * For an image (TIFF, JPEG, PNG): the PDF made from it (one page per image), which is what is
   * rendered. Absent for a PDF: its own bytes are rendered.
   */
  pdf?: Uint8Array;
}

let engine: Promise<Pdfium> | undefined;
/** PDFium, loaded once per sandbox process on first use. */
function pdfium(): Promise<Pdfium> {
  engine ??= Pdfium.load();
  return engine;
}

/**
 * Checks a document of any accepted format, recognised by its content: a PDF as it is, an image
 * (TIFF, JPEG, PNG) made into a PDF first (image.ts, loaded on the first image), which is then
 * checked like any PDF and returned for rendering.
 */
export async function inspectDocument(
  bytes: Uint8Array,
  name: string,
  limits: InspectLimits,
): Promise<PdfInfo> {
  const format = sniffFormat(bytes);
  if (format === null || format === 'pdf') return inspectPdf(bytes, name, limits);
  const { imageToPdf } = await import('./image.ts');
  const pdf = await imageToPdf(bytes, name, format, limits);
  return { ...(await inspectPdf(pdf, name, limits)), format, pdf };
}

export async function inspectPdf(bytes: Uint8Array, name: string, limits: InspectLimits): Promise<PdfInfo> {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (sniffFormat(buf) !== 'pdf')
    throw new DocumentError(
      checkCodes.notPdf,
      `${name}: not ${ACCEPTED_FORMATS} (recognised by its content, not its name)`,
    );
  const text = buf.toString('latin1');

  // Before any parser decodes anything: every stream through its whole filter chain, counted
  // while streaming and stopped past the budgets (budget.ts).
  const decodedBytes = await countDecoded(buf, text, name, limits);

  const reader = await pdfium();
  let doc: ReturnType<Pdfium['open']>;
  try {
    doc = reader.open(buf);
  } catch (err) {
    if (err instanceof RenderError && err.code === checkCodes.encrypted)
      throw new DocumentError(checkCodes.encrypted, `${name}: ${err.message} (it needs a password to open)`);
    if (err instanceof RenderError && err.code === 'pdf_too_large')
      throw new DocumentError('pdf_check_memory', `${name}: the PDF does not fit in the checker's memory`);
    if (!(err instanceof RenderError)) engine = undefined; // a trap may have left PDFium damaged
    // Objects but no end, and PDFium cannot rebuild it: cut off in transfer.
    if (buf.subarray(Math.max(0, buf.length - 1024)).indexOf('%%EOF') < 0 && /\d+\s+\d+\s+obj\b/.test(text))
      throw new DocumentError(
        checkCodes.truncated,
        `${name}: the PDF is truncated (no %%EOF marker at its end) and what is left cannot be read`,
      );
    throw new DocumentError(
      checkCodes.broken,
      `${name}: ${err instanceof RenderError ? err.message : `the PDF cannot be read (${readableReason(err)})`}`,
    );
  }
  try {
    const count = doc.pageCount;
    if (count === 0) throw new DocumentError(checkCodes.noPages, `${name}: the PDF has no pages`);
    if (count > limits.maxPages)
      throw new DocumentError(
        checkCodes.tooManyPages,
        `${name}: the PDF has ${count} pages; at most ${limits.maxPages} are accepted per document`,
      );
    const pages: PageInfo[] = [];
    for (let i = 0; i < count; i++) {
      const size = doc.pageSize(i);
      if (!size)
        throw new DocumentError(
          checkCodes.broken,
          `${name}: page ${i + 1} of ${count} cannot be found in the PDF's page tree`,
        );
      const { width, height } = size;
      // Any size is placed on the fax page (scaled to fit), but a page without area has nothing to scale.
      if (!(width > 0 && height > 0 && Number.isFinite(width) && Number.isFinite(height)))
        throw new DocumentError(
          checkCodes.pageSize,
          `${name}: page ${i + 1} measures ${fmt(width)} x ${fmt(height)} pt; a page without area cannot be placed on a fax page`,
        );
      pages.push({ width, height });
    }
    return { pageCount: count, decodedBytes, pages, format: 'pdf' };
  } catch (err) {
    if (err instanceof DocumentError) throw err;
    engine = undefined; // a trap may have left PDFium damaged: the next check loads a fresh one
    throw new DocumentError(checkCodes.broken, `${name}: the PDF cannot be read (${readableReason(err)})`);
  } finally {
    doc.close();
  }
}

function fmt(n: number): string {
  return Number.isFinite(n) ? String(Math.round(n * 10) / 10) : String(n);
}
