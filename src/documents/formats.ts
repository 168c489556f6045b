// What a document is, found by its content (never by its name or Content-Type), and the codes of the
// checks that refuse one. Pure: used by the API (file_data at the door), the fetcher (file_url) and
// the sandbox process.

export type DocumentFormat = 'pdf' | 'tiff' | 'jpeg' | 'png';

/** PDFium looks for the %PDF- header in the first 1024 bytes; so do we. */
const HEADER_WINDOW = 1024;

/** What `bytes` is, by its first bytes (magic numbers); null for anything we do not take. */
export function sniffFormat(bytes: Uint8Array): DocumentFormat | null {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length >= 8 && b.readUInt32BE(0) === 0x89504e47 && b.readUInt32BE(4) === 0x0d0a1a0a) return 'png';
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'jpeg';
  if (b.length >= 4 && (b.readUInt32BE(0) === 0x49492a00 || b.readUInt32BE(0) === 0x4d4d002a)) return 'tiff';
  if (b.subarray(0, HEADER_WINDOW).indexOf('%PDF-', 0, 'latin1') >= 0) return 'pdf';
  return null;
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

/** Codes of the checks of an image (TIFF, JPEG, PNG) made into a PDF in the sandbox (sandbox/image.ts). */
export const imageCodes = {
  broken: 'image_broken',
  tooLarge: 'image_too_large',
  tooManyPages: 'image_too_many_pages',
} as const;

/** How a refusal names what is accepted. */
export const ACCEPTED_FORMATS = 'a PDF, TIFF, JPEG or PNG document';
