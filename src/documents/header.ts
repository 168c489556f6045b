// The header line drawn on the fax: for each page, a one-line PDF page as wide as the fax line and
// as tall as the header band (raster.ts, HEADER_BAND_IN), which the render process draws across the
// top of the page before fitting the page's content below it. pdf-lib draws our own text with a
// standard font (nothing of a customer's file is parsed here): bounded work, a few milliseconds for
// the pages of one render task.
import { PDFDocument, StandardFonts, type PDFFont } from 'pdf-lib';
import { fillHeaderLine, headerDateTime, type HeaderValues } from '../domain/header-line.ts';
import type { CoverContext } from './cover.ts';
import { characterSet } from './cover-layout.ts';
import { FAX_WIDTH, HEADER_BAND_IN, X_DPI } from './render/raster.ts';

/** Text size: Helvetica Bold at 10 pt is about 10 rows tall at `low` (98 lines per inch). */
const SIZE = 10;
/** Down to this size before the text is cut (8 pt: still 8 rows of capitals at `low`). */
const MIN_SIZE = 8;
const WIDTH_PT = (FAX_WIDTH / X_DPI) * 72;
const HEIGHT_PT = HEADER_BAND_IN * 72;
/** Left and right margins, in points (0.15 in: receivers may lose a few millimetres at the edges). */
const MARGIN = 10.8;
/** Baseline above the band's bottom, in points (room for descenders). */
const BASELINE = 5;

/** A fax's header line: its template and the values that do not change from page to page. */
export interface HeaderLine {
  template: string;
  values: HeaderValues;
}

/**
 * The header line of a fax from its Fax Default (`header_line`) and request values, or null when the
 * Fax Default has none. `now` is the moment of preparation (the render), as on the cover page.
 */
export function headerLineOf(ctx: CoverContext | null | undefined, now: Date): HeaderLine | null {
  const template = ctx?.faxDefault?.header_line;
  if (!ctx || !template) return null;
  const { date, time } = headerDateTime(now, ctx.timeZone);
  const text = (s: string | null | undefined) => s?.trim() ?? '';
  return {
    template,
    values: {
      sender_name: text(ctx.options.sender_name) || text(ctx.faxDefault?.sender_name),
      sender_number: ctx.callerId,
      to_name: text(ctx.options.recipient_name),
      to_number: ctx.faxNumber,
      date,
      time,
    },
  };
}

/** The header texts of pages [first, first + count) of a fax of `pages` pages (from 0). */
export function headerTexts(h: HeaderLine, first: number, count: number, pages: number): string[] {
  return Array.from({ length: count }, (_, i) => fillHeaderLine(h.template, h.values, first + i + 1, pages));
}

/** What the standard font can draw (WinAnsi); anything else becomes '?', as on the cover. */
function drawable(font: PDFFont, s: string): string {
  const set = characterSet(font);
  return [...s].map((ch) => (set.has(ch.codePointAt(0)!) ? ch : '?')).join('');
}

/** The text and size that fit the line: smaller down to MIN_SIZE, then cut with an ellipsis. */
export function fitLine(font: PDFFont, text: string): { text: string; size: number } {
  const room = WIDTH_PT - 2 * MARGIN;
  for (let size = SIZE; size >= MIN_SIZE; size -= 0.5)
    if (font.widthOfTextAtSize(text, size) <= room) return { text, size };
  // The longest prefix that fits, by bisection: a filled-in line can be thousands of characters
  // (customer names in repeated placeholders), and measuring one prefix per character was quadratic.
  const fits = (n: number) => font.widthOfTextAtSize(`${text.slice(0, n)}…`, MIN_SIZE) <= room;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return { text: `${text.slice(0, lo).trimEnd()}…`, size: MIN_SIZE };
}

/** A PDF with one header-band page per text, in order (what a render task draws on its pages). */
export async function headerPdf(texts: string[]): Promise<Uint8Array> {
  const pdf = await PDFDocument.create();
  const font = await pdf.embedFont(StandardFonts.HelveticaBold);
  for (const t of texts) {
    const page = pdf.addPage([WIDTH_PT, HEIGHT_PT]);
    const line = fitLine(font, drawable(font, t));
    page.drawText(line.text, { x: MARGIN, y: BASELINE, size: line.size, font });
  }
  return pdf.save({ useObjectStreams: false });
}
