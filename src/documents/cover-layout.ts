// The drawn cover's layout (our own one-page design), kept apart from how it is drawn: as a PDF
// (pdf-lib, drawCoverPage in cover.ts: the page a preview of the PDF or a test reads) or straight
// onto a fax page by the render processes (render/cover-raster.ts), which saves a PDF's drawing,
// saving, parsing and rendering on every fax (issue 33: the cover is on every fax). Both take the
// same operations from layoutCover, measured with the same font metrics, so they put the same text
// at the same places. Nothing here touches the database: the render processes import it.
import { PDFDocument, StandardFonts, type PDFFont } from 'pdf-lib';

/** What a cover shows: the resolved values, also returned by the preview endpoint. */
export interface CoverValues {
  /** Date and time of preparation in the account's time zone, e.g. "November 26, 2026, 9:30 AM (Europe/Paris)". */
  date: string;
  time_zone: string;
  to_name: string | null;
  to_fax: string;
  from_name: string | null;
  from_company: string | null;
  from_fax: string;
  from_phone: string | null;
  from_email: string | null;
  subject: string | null;
  message: string | null;
  footer: string | null;
  /** Pages of the whole fax, cover included. */
  total_pages: number;
}

/** The code points a font can draw, kept per font (a cover asks about a dozen times). */
const characterSets = new WeakMap<PDFFont, Set<number>>();
export function characterSet(font: PDFFont): Set<number> {
  let set = characterSets.get(font);
  if (!set) characterSets.set(font, (set = new Set(font.getCharacterSet())));
  return set;
}

/** Text the standard fonts can draw (WinAnsi): anything else becomes '?'. */
export function drawable(font: PDFFont, s: string): string {
  const set = characterSet(font);
  let out = '';
  for (const ch of s.replace(/\t/g, ' ').replace(/\r\n?/g, '\n')) {
    const cp = ch.codePointAt(0)!;
    out += ch === '\n' || set.has(cp) ? ch : '?';
  }
  return out;
}

/** Greedy word wrap to `width` points; long words are broken. */
export function wrap(font: PDFFont, text: string, size: number, width: number): string[] {
  const lines: string[] = [];
  for (const para of text.split('\n')) {
    let line = '';
    for (const word of para.split(/ +/)) {
      let w = word;
      while (font.widthOfTextAtSize(w, size) > width) {
        let cut = w.length - 1;
        while (cut > 1 && font.widthOfTextAtSize(w.slice(0, cut), size) > width) cut--;
        if (line) lines.push(line);
        lines.push(w.slice(0, cut));
        line = '';
        w = w.slice(cut);
      }
      const next = line ? `${line} ${w}` : w;
      if (font.widthOfTextAtSize(next, size) <= width) line = next;
      else {
        lines.push(line);
        line = w;
      }
    }
    lines.push(line);
  }
  return lines;
}

export const LETTER: [number, number] = [612, 792];
const MARGIN = 54;

export type CoverFont = 'regular' | 'bold';
/**
 * Every font and size the layout draws text in: the render processes keep glyph images of these
 * (render/cover-raster.ts). A new size in layoutCover belongs here too (a test draws every op).
 */
export const COVER_STYLES: readonly (readonly [CoverFont, number])[] = [
  ['bold', 40],
  ['regular', 11],
  ['bold', 12],
  ['regular', 12],
  ['bold', 10],
  ['regular', 10],
];
export interface CoverFonts {
  regular: PDFFont;
  bold: PDFFont;
}

/** One thing drawn on the cover, in PDF points (origin bottom left, as pdf-lib and PDF have it). */
export type CoverOp =
  /** A single line of text (no line breaks) with its baseline starting at (x, y), in black. */
  | { kind: 'text'; text: string; x: number; y: number; size: number; font: CoverFont }
  /** A horizontal rule from (x1, y) to (x2, y), `thickness` points thick (butt ends). */
  | { kind: 'rule'; x1: number; x2: number; y: number; thickness: number };

/**
 * The standard cover page (US Letter) as drawing operations: sizes stay at 10 pt or more so the text
 * survives 98 dpi ("low") fax resolution. A message too long for the page is cut with a note. Every
 * text is already limited to what the fonts can draw (anything else is '?').
 */
export function layoutCover(v: CoverValues, fonts: CoverFonts): CoverOp[] {
  const ops: CoverOp[] = [];
  const { regular, bold } = fonts;
  const [pw, ph] = LETTER;
  const right = pw - MARGIN;
  const text = (s: string, x: number, y: number, size: number, font: CoverFont) =>
    ops.push({ kind: 'text', text: drawable(fonts[font], s), x, y, size, font });
  const rule = (y: number, thickness: number) =>
    ops.push({ kind: 'rule', x1: MARGIN, x2: right, y, thickness });

  let y = ph - MARGIN - 36;
  text('FAX', MARGIN, y, 40, 'bold');
  const date = drawable(regular, v.date);
  text(date, right - regular.widthOfTextAtSize(date, 11), y + 12, 11, 'regular');
  y -= 18;
  rule(y, 2);
  y -= 30;

  const rows: [string, string | null][] = [
    ['To', v.to_name],
    ['Fax', v.to_fax],
    ['From', [v.from_name, v.from_company].filter(Boolean).join(', ') || null],
    ['Fax', v.from_fax],
    ['Phone', v.from_phone],
    ['Email', v.from_email],
    ['Pages', `${v.total_pages} (including this cover page)`],
  ];
  const labelX = MARGIN;
  const valueX = MARGIN + 70;
  for (const [label, value] of rows) {
    if (value === null) continue;
    text(`${label}:`, labelX, y, 12, 'bold');
    for (const line of wrap(regular, drawable(regular, value), 12, right - valueX)) {
      text(line, valueX, y, 12, 'regular');
      y -= 17;
    }
    y -= 3;
  }
  if (v.subject) {
    y -= 10;
    text('Subject:', labelX, y, 12, 'bold');
    for (const line of wrap(bold, drawable(bold, v.subject), 12, right - valueX)) {
      text(line, valueX, y, 12, 'bold');
      y -= 17;
    }
  }
  y -= 8;
  rule(y, 1);
  y -= 24;

  const footerLines = v.footer ? wrap(regular, drawable(regular, v.footer), 10, right - MARGIN) : [];
  const bottom = MARGIN + footerLines.length * 13 + (footerLines.length ? 14 : 0);
  if (v.message) {
    const lines = wrap(regular, drawable(regular, v.message), 12, right - MARGIN);
    const room = Math.max(0, Math.floor((y - bottom) / 16));
    const shown = lines.length > room ? lines.slice(0, Math.max(0, room - 1)) : lines;
    for (const line of shown) {
      text(line, MARGIN, y, 12, 'regular');
      y -= 16;
    }
    if (shown.length < lines.length) text('[message shortened to fit the cover page]', MARGIN, y, 10, 'bold');
  }
  let fy = MARGIN + (footerLines.length - 1) * 13;
  for (const line of footerLines) {
    text(line, MARGIN, fy, 10, 'regular');
    fy -= 13;
  }
  return ops;
}

let measuring: Promise<CoverFonts> | undefined;
/**
 * The two fonts, embedded once in a document of their own that is never saved: for a process that
 * lays covers out without drawing them as a PDF (a render process). Metrics do not depend on the
 * document a font is embedded in.
 */
export function coverFonts(): Promise<CoverFonts> {
  measuring ??= (async () => {
    const doc = await PDFDocument.create();
    return {
      regular: await doc.embedFont(StandardFonts.Helvetica),
      bold: await doc.embedFont(StandardFonts.HelveticaBold),
    };
  })();
  return measuring;
}
