// A PDF of a received fax made without re-encoding it: every TIFF strip becomes an image XObject
// whose stream is the strip's own T.4/T.6 bytes, filtered by CCITTFaxDecode. The only change to the
// bytes is their bit order when the TIFF stores them least significant bit first (FillOrder 2), since
// PDF reads coded data most significant bit first; the codes themselves are untouched. Each page is
// the fax page's physical size (pixels / dpi), so it prints at the size it was sent.
import {
  PDFDocument,
  PDFName,
  concatTransformationMatrix,
  drawObject,
  popGraphicsState,
  pushGraphicsState,
} from 'pdf-lib';
import type { TiffPage } from './tiff.ts';

const REVERSED = new Uint8Array(256).map((_, b) => {
  let r = 0;
  for (let i = 0; i < 8; i++) if (b & (1 << i)) r |= 1 << (7 - i);
  return r;
});

function msbFirst(data: Uint8Array, lsbFirst: boolean): Uint8Array {
  if (!lsbFirst) return data;
  const out = new Uint8Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = REVERSED[data[i]!]!;
  return out;
}

const down = (pt: number) => Math.floor(pt * 1000) / 1000;

/** The PDF of the pages (from readFaxTiff), one PDF page per fax page. */
export async function faxPdf(
  pages: TiffPage[],
  meta: { title: string; received: Date },
): Promise<Uint8Array> {
  const doc = await PDFDocument.create({ updateMetadata: false });
  doc.setTitle(meta.title);
  doc.setCreationDate(meta.received);
  doc.setProducer('faxline');
  const ctx = doc.context;
  for (const p of pages) {
    // Sizes in points rounded down to 1/1000: rendered at the fax's own dpi the page is then exactly its
    // pixels wide and high (a hair more would round up to one more pixel, and stretch the image by it).
    const wPt = down((p.width / p.xDpi) * 72);
    const hPt = down((p.height / p.yDpi) * 72);
    const page = doc.addPage([wPt, hPt]);
    let top = 0;
    p.strips.forEach((s, i) => {
      const parms: Record<string, unknown> = {
        K: p.compression === 4 ? -1 : p.twoD ? 1 : 0,
        Columns: p.width,
        Rows: s.rows,
        EndOfBlock: false,
        BlackIs1: false,
      };
      if (p.byteAligned) parms.EncodedByteAlign = true;
      const dict: Record<string, unknown> = {
        Type: 'XObject',
        Subtype: 'Image',
        Width: p.width,
        Height: s.rows,
        BitsPerComponent: 1,
        ColorSpace: 'DeviceGray',
        Filter: 'CCITTFaxDecode',
        DecodeParms: parms,
      };
      // A min-is-black TIFF maps white runs to 1 bits: invert so the page still shows black on white.
      if (p.minIsBlack) dict.Decode = [1, 0];
      const ref = ctx.register(ctx.stream(msbFirst(s.data, p.lsbFirst), dict as never));
      const name = `Im${i}`;
      page.node.setXObject(PDFName.of(name), ref);
      const h = down((s.rows / p.yDpi) * 72);
      page.pushOperators(
        pushGraphicsState(),
        concatTransformationMatrix(wPt, 0, 0, h, 0, hPt - top - h),
        drawObject(name),
        popGraphicsState(),
      );
      top += h;
    });
  }
  return doc.save({ useObjectStreams: false });
}
