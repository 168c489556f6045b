import { PDFDocument, StandardFonts } from 'pdf-lib';

/** A small real PDF with `pages` text pages (Letter by default). */
export async function makePdf(pages = 1, size: [number, number] = [612, 792]): Promise<Buffer> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  for (let i = 0; i < pages; i++) {
    const p = doc.addPage(size);
    p.drawText(`faxline test page ${i + 1} of ${pages}`, { x: 72, y: size[1] - 100, size: 14, font });
  }
  return Buffer.from(await doc.save());
}

export async function makePdfBase64(pages = 1): Promise<string> {
  return (await makePdf(pages)).toString('base64');
}
