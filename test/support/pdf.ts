import { PDFDocument, StandardFonts } from 'pdf-lib';

/**
 * A small real PDF with `pages` text pages (Letter by default). Two made in the same second are the
 * same bytes unless `label` (printed on each page) differs.
 */
export async function makePdf(pages = 1, size: [number, number] = [612, 792], label = ''): Promise<Buffer> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  for (let i = 0; i < pages; i++) {
    const p = doc.addPage(size);
    p.drawText(`faxline test page ${i + 1} of ${pages}${label ? ` ${label}` : ''}`, {
      x: 72,
      y: size[1] - 100,
      size: 14,
      font,
    });
  }
  return Buffer.from(await doc.save());
}

export async function makePdfBase64(pages = 1, label = ''): Promise<string> {
  return (await makePdf(pages, undefined, label)).toString('base64');
}
