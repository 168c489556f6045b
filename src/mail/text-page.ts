// The body of a mail as a page of its own (mail setting body "page"): subject and plain text drawn
// on A4 with a standard font, wrapped; what the font cannot draw becomes '?'. Continued on further
// pages when long (at most MAX_PAGES).
import { PDFDocument, StandardFonts } from 'pdf-lib';

const MAX_PAGES = 5;

/** Characters WinAnsi (the standard fonts' encoding) can draw; others become '?'. */
function drawable(s: string): string {
  return s.replace(/\t/g, '    ').replace(/[^\x20-\x7e\xa0-\xff]/g, '?');
}

export async function textPagePdf(subject: string, text: string): Promise<Uint8Array> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  const bold = await doc.embedFont(StandardFonts.HelveticaBold);
  const [w, h] = [595.28, 841.89];
  const margin = 56;
  const size = 11;
  const lead = 15;
  const width = w - 2 * margin;
  const lines: string[] = [];
  for (const para of drawable(text).split(/\r?\n/)) {
    let line = '';
    for (const word of para.split(' ')) {
      const next = line ? `${line} ${word}` : word;
      if (font.widthOfTextAtSize(next, size) <= width || !line) line = next;
      else {
        lines.push(line);
        line = word;
      }
    }
    lines.push(line);
  }
  let page = doc.addPage([w, h]);
  let y = h - margin;
  if (subject) {
    page.drawText(drawable(subject).slice(0, 120), { x: margin, y, size: 14, font: bold });
    y -= 2 * lead;
  }
  for (const line of lines) {
    if (y < margin) {
      if (doc.getPageCount() >= MAX_PAGES) break;
      page = doc.addPage([w, h]);
      y = h - margin;
    }
    page.drawText(line, { x: margin, y, size, font });
    y -= lead;
  }
  return doc.save();
}
