// Writes the generated part of the line-time corpus (test/fixtures/line-corpus/, README.md there):
// letters, invoices, forms, colour timetables, papers, pages with photographs, charts and scans,
// drawn with pdf-lib from text made up here. Deterministic (a seeded generator), so running it again
// gives the same pages. The "scans" are pages of this corpus rasterised by poppler's `pdftoppm`
// (a tool of this script only), then skewed, given paper grain and noise, and embedded as JPEG.
//
//   node bench/line-corpus-generate.ts
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { gunzipSync } from 'node:zlib';
import { join } from 'node:path';
import jpeg from 'jpeg-js';
import { PDFDocument, StandardFonts, rgb, type PDFFont, type PDFPage, type RGB } from 'pdf-lib';

const OUT = new URL('../test/fixtures/line-corpus/', import.meta.url);

/** xorshift32: the same pages on every run. */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

const WORDS = (
  'the of and to in is that for it as with was on be by this are from at or an which have not had ' +
  'their one all were we when there can more if will each about how up out them then she many some ' +
  'so these would other into has her two like him see time could no make than first been its who ' +
  'now people my made over did down only way find use may water long little very after words called ' +
  'just where most know get through back much before go good new write our used me man too any day ' +
  'same right look think also around another came come work three word must because does part even ' +
  'place well such here take why things help put years different away again off went old number ' +
  'great tell men say small every found still between name should home big give air line set own ' +
  'under read last never us left end along while might next sound below saw something thought both ' +
  'few those always looked show large often together asked house world going want school important ' +
  'until form food keep children feet land side without boy once animals life enough took sometimes ' +
  'four head above kind began almost live page got earth need far hand high year mother light parts ' +
  'country father let night following picture being study second eyes soon times story boys since ' +
  'white days ever paper hard near sentence better best across during today others however sure means ' +
  'knew try told young miles sun ways thing whole hear example heard several change answer room sea ' +
  'against top turned learn point city play toward five using himself usually money seen car morning ' +
  'order delivery invoice account payment service contract customer period report meeting schedule ' +
  'transmission receiver document signature address company office department total amount balance'
).split(' ');

function words(r: () => number, n: number): string {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(WORDS[Math.floor(r() * WORDS.length)]!);
  return out.join(' ');
}

function sentence(r: () => number): string {
  const s = words(r, 6 + Math.floor(r() * 12));
  return s.charAt(0).toUpperCase() + s.slice(1) + '.';
}

function paragraph(r: () => number, sentences: number): string {
  return Array.from({ length: sentences }, () => sentence(r)).join(' ');
}

/** Lines of `text` no wider than `width` points in `font` at `size`. */
function wrap(text: string, font: PDFFont, size: number, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const w of text.split(' ')) {
    const next = line ? `${line} ${w}` : w;
    if (font.widthOfTextAtSize(next, size) > width && line) {
      lines.push(line);
      line = w;
    } else line = next;
  }
  if (line) lines.push(line);
  return lines;
}

/** Draws wrapped text from (x, y) downwards; returns the y below it. */
function textBlock(
  page: PDFPage,
  text: string,
  o: { x: number; y: number; width: number; font: PDFFont; size: number; leading?: number; color?: RGB },
): number {
  const lead = o.leading ?? o.size * 1.25;
  let y = o.y;
  for (const l of wrap(text, o.font, o.size, o.width)) {
    page.drawText(l, { x: o.x, y, size: o.size, font: o.font, color: o.color ?? rgb(0, 0, 0) });
    y -= lead;
  }
  return y;
}

interface Fonts {
  times: PDFFont;
  timesBold: PDFFont;
  helv: PDFFont;
  helvBold: PDFFont;
  courier: PDFFont;
}

async function newDoc(): Promise<{ doc: PDFDocument; f: Fonts }> {
  const doc = await PDFDocument.create();
  doc.setCreationDate(new Date('2026-11-28T00:00:00Z'));
  doc.setModificationDate(new Date('2026-11-28T00:00:00Z'));
  doc.setProducer('faxline bench/line-corpus-generate.ts');
  const f: Fonts = {
    times: await doc.embedFont(StandardFonts.TimesRoman),
    timesBold: await doc.embedFont(StandardFonts.TimesRomanBold),
    helv: await doc.embedFont(StandardFonts.Helvetica),
    helvBold: await doc.embedFont(StandardFonts.HelveticaBold),
    courier: await doc.embedFont(StandardFonts.Courier),
  };
  return { doc, f };
}

const A4: [number, number] = [595.28, 841.89];
const LETTER: [number, number] = [612, 792];

async function letters(): Promise<Uint8Array> {
  const { doc, f } = await newDoc();
  const r = rng(11);
  const colours = [rgb(0.1, 0.3, 0.6), rgb(0.6, 0.1, 0.15), rgb(0.1, 0.45, 0.25), rgb(0.35, 0.35, 0.35)];
  for (let i = 0; i < 4; i++) {
    const page = doc.addPage(i % 2 ? LETTER : A4);
    const [w, h] = page.getSize().width ? [page.getWidth(), page.getHeight()] : [0, 0];
    const c = colours[i]!;
    // Letterhead: a coloured logo block and a tinted band.
    page.drawRectangle({ x: 0, y: h - 90, width: w, height: 90, color: rgb(0.93, 0.95, 0.98) });
    page.drawRectangle({ x: 50, y: h - 75, width: 50, height: 50, color: c });
    page.drawText('N', { x: 62, y: h - 65, size: 36, font: f.helvBold, color: rgb(1, 1, 1) });
    page.drawText(`Northfield ${['Logistics', 'Medical Group', 'Energy', 'Legal Services'][i]}`, {
      x: 115,
      y: h - 52,
      size: 18,
      font: f.helvBold,
      color: c,
    });
    page.drawText('12 Harbour Road, Bristol BS1 4RT  ·  +44 117 496 0000  ·  office@example.org', {
      x: 115,
      y: h - 68,
      size: 8,
      font: f.helv,
      color: rgb(0.4, 0.4, 0.4),
    });
    let y = h - 140;
    for (const l of ['Ms Jane Okafor', 'Purchasing Department', '48 Mill Lane', 'Leeds LS2 7HQ']) {
      page.drawText(l, { x: 60, y, size: 11, font: f.times });
      y -= 14;
    }
    page.drawText(`${14 + i} November 2026`, { x: w - 180, y: h - 140, size: 11, font: f.times });
    y -= 20;
    page.drawText(`Re: ${words(r, 5)}`, { x: 60, y, size: 11, font: f.timesBold });
    y -= 24;
    page.drawText('Dear Ms Okafor,', { x: 60, y, size: 11, font: f.times });
    y -= 22;
    for (let p = 0; p < 5; p++) {
      y = textBlock(page, paragraph(r, 3 + Math.floor(r() * 3)), {
        x: 60,
        y,
        width: w - 120,
        font: f.times,
        size: 11,
      });
      y -= 8;
    }
    page.drawText('Yours sincerely,', { x: 60, y: y - 6, size: 11, font: f.times });
    // A signature: a blue pen stroke.
    const sx = 62;
    const sy = y - 40;
    let path = `M 0 0`;
    for (let k = 1; k <= 24; k++) path += ` L ${k * 5} ${Math.sin(k * 0.9) * 8 + (r() - 0.5) * 4}`;
    page.drawSvgPath(path, { x: sx, y: sy, borderColor: rgb(0.1, 0.15, 0.55), borderWidth: 1.2 });
    page.drawText('Thomas Reid, Director', { x: 60, y: sy - 22, size: 11, font: f.times });
    page.drawLine({ start: { x: 50, y: 50 }, end: { x: w - 50, y: 50 }, thickness: 0.25, color: c });
    page.drawText(`Registered in England No. 0${4812300 + i}. ${words(r, 14)}.`, {
      x: 50,
      y: 38,
      size: 6.5,
      font: f.helv,
      color: rgb(0.45, 0.45, 0.45),
    });
  }
  return doc.save();
}

async function invoices(): Promise<Uint8Array> {
  const { doc, f } = await newDoc();
  const r = rng(23);
  for (let i = 0; i < 4; i++) {
    const page = doc.addPage(i === 3 ? LETTER : A4);
    const w = page.getWidth();
    const h = page.getHeight();
    const brand = [rgb(0.05, 0.2, 0.45), rgb(0.55, 0.05, 0.1), rgb(0.0, 0.4, 0.35), rgb(0.25, 0.25, 0.3)][i]!;
    page.drawRectangle({ x: 0, y: h - 100, width: w, height: 100, color: brand });
    page.drawText('INVOICE', { x: 50, y: h - 60, size: 28, font: f.helvBold, color: rgb(1, 1, 1) });
    page.drawText(`No. 2026-${1040 + i * 17}   Date ${3 + i * 5} Nov 2026   Due 30 days`, {
      x: 50,
      y: h - 82,
      size: 10,
      font: f.helv,
      color: rgb(1, 1, 1),
    });
    let y = h - 135;
    page.drawText('Bill to', { x: 50, y, size: 9, font: f.helvBold, color: brand });
    page.drawText('Ship to', { x: 300, y, size: 9, font: f.helvBold, color: brand });
    y -= 14;
    for (const [a, b] of [
      ['Harlow Engineering Ltd', 'Harlow Engineering, Dock 4'],
      ['Unit 9, Riverside Park', 'Canal Street'],
      ['Cambridge CB4 1XT', 'Ely CB7 4AF'],
    ]) {
      page.drawText(a!, { x: 50, y, size: 10, font: f.helv });
      page.drawText(b!, { x: 300, y, size: 10, font: f.helv });
      y -= 13;
    }
    y -= 20;
    const cols = [50, 90, 330, 390, 460];
    // Table header: a mid-grey fill with bold black text.
    page.drawRectangle({ x: 45, y: y - 5, width: w - 90, height: 20, color: rgb(0.78, 0.8, 0.84) });
    ['Item', 'Description', 'Qty', 'Unit price', 'Amount'].forEach((t, k) =>
      page.drawText(t, { x: cols[k]!, y, size: 9.5, font: f.helvBold }),
    );
    y -= 20;
    let total = 0;
    const rows = 14 + Math.floor(r() * 8);
    for (let k = 0; k < rows; k++) {
      if (k % 2 === 0)
        page.drawRectangle({ x: 45, y: y - 5, width: w - 90, height: 17, color: rgb(0.94, 0.95, 0.97) });
      const qty = 1 + Math.floor(r() * 20);
      const price = Math.round(r() * 40000) / 100;
      total += qty * price;
      page.drawText(String(100 + k), { x: cols[0]!, y, size: 9, font: f.helv });
      page.drawText(words(r, 4), { x: cols[1]!, y, size: 9, font: f.helv });
      page.drawText(String(qty), { x: cols[2]!, y, size: 9, font: f.helv });
      page.drawText(price.toFixed(2), { x: cols[3]!, y, size: 9, font: f.helv });
      page.drawText((qty * price).toFixed(2), { x: cols[4]!, y, size: 9, font: f.helv });
      y -= 17;
    }
    page.drawLine({ start: { x: 45, y: y + 8 }, end: { x: w - 45, y: y + 8 }, thickness: 0.5 });
    y -= 10;
    page.drawRectangle({ x: 330, y: y - 40, width: w - 375, height: 52, color: rgb(1, 0.96, 0.75) });
    page.drawText(`Subtotal  ${total.toFixed(2)}`, { x: 340, y, size: 10, font: f.helv });
    page.drawText(`VAT 20%  ${(total * 0.2).toFixed(2)}`, { x: 340, y: y - 14, size: 10, font: f.helv });
    page.drawText(`Total due  GBP ${(total * 1.2).toFixed(2)}`, {
      x: 340,
      y: y - 30,
      size: 11,
      font: f.helvBold,
    });
    textBlock(page, `Payment terms: ${paragraph(r, 3)}`, {
      x: 50,
      y: 90,
      width: w - 100,
      font: f.helv,
      size: 7,
      color: rgb(0.35, 0.35, 0.35),
    });
  }
  return doc.save();
}

/** Dotted leader from x0 to x1 at y: small dots, as forms print them. */
function leader(page: PDFPage, x0: number, x1: number, y: number): void {
  for (let x = x0; x < x1; x += 3) page.drawCircle({ x, y: y + 1, size: 0.45, color: rgb(0, 0, 0) });
}

async function forms(): Promise<Uint8Array> {
  const { doc, f } = await newDoc();
  const r = rng(37);
  for (let i = 0; i < 6; i++) {
    const page = doc.addPage(i % 3 === 2 ? LETTER : A4);
    const w = page.getWidth();
    const h = page.getHeight();
    page.drawText(`Form ${['TX-14', 'RA-2', 'HB-7', 'C-100', 'P-60', 'SA-302'][i]}`, {
      x: 50,
      y: h - 55,
      size: 20,
      font: f.helvBold,
    });
    page.drawText(words(r, 7).toUpperCase(), { x: 50, y: h - 72, size: 9, font: f.helv });
    page.drawRectangle({
      x: w - 170,
      y: h - 80,
      width: 120,
      height: 40,
      borderColor: rgb(0, 0, 0),
      borderWidth: 0.5,
      color: rgb(0.85, 0.85, 0.85),
    });
    page.drawText('For official use', { x: w - 160, y: h - 52, size: 7, font: f.helv });
    let y = h - 110;
    for (let s = 0; s < 4; s++) {
      // Section bar: a dark tint with white text, or a mid tint with black text.
      const dark = (s + i) % 2 === 0;
      page.drawRectangle({
        x: 45,
        y: y - 4,
        width: w - 90,
        height: 16,
        color: dark ? rgb(0.2, 0.25, 0.4) : rgb(0.7, 0.75, 0.85),
      });
      page.drawText(`Part ${s + 1}  ${words(r, 4)}`, {
        x: 50,
        y,
        size: 10,
        font: f.helvBold,
        color: dark ? rgb(1, 1, 1) : rgb(0, 0, 0),
      });
      y -= 24;
      const fields = 4 + Math.floor(r() * 3);
      for (let k = 0; k < fields; k++) {
        const label = `${s + 1}.${k + 1} ${words(r, 2 + Math.floor(r() * 3))}`;
        page.drawText(label, { x: 55, y, size: 9, font: f.helv });
        const lx = 55 + f.helv.widthOfTextAtSize(label, 9) + 4;
        if (k % 3 === 2) {
          leader(page, lx, 330, y);
          for (let b = 0; b < 8; b++)
            page.drawRectangle({
              x: 335 + b * 22,
              y: y - 4,
              width: 18,
              height: 16,
              borderColor: rgb(0, 0, 0),
              borderWidth: 0.25,
              color: rgb(0.92, 0.95, 1),
            });
        } else {
          leader(page, lx, 260, y);
          page.drawRectangle({
            x: 265,
            y: y - 4,
            width: w - 315,
            height: 16,
            color: rgb(0.9, 0.9, 0.9),
            borderColor: rgb(0.4, 0.4, 0.4),
            borderWidth: 0.25,
          });
          if (r() < 0.5) page.drawText(words(r, 3), { x: 270, y, size: 9, font: f.courier });
        }
        y -= 21;
      }
      // Checkboxes.
      for (let b = 0; b < 3; b++) {
        page.drawRectangle({
          x: 60 + b * 150,
          y: y - 2,
          width: 9,
          height: 9,
          borderColor: rgb(0, 0, 0),
          borderWidth: 0.5,
        });
        if ((b + s + i) % 3 === 0)
          page.drawText('X', { x: 61.5 + b * 150, y: y - 0.5, size: 8, font: f.helv });
        page.drawText(words(r, 2), { x: 75 + b * 150, y, size: 8.5, font: f.helv });
      }
      y -= 30;
    }
    textBlock(page, `Notes: ${paragraph(r, 6)}`, {
      x: 50,
      y: Math.min(y, 120),
      width: w - 100,
      font: f.helv,
      size: 6,
      leading: 7.5,
    });
    page.drawLine({ start: { x: 45, y: 30 }, end: { x: w - 45, y: 30 }, thickness: 0.25 });
  }
  return doc.save();
}

async function timetables(): Promise<Uint8Array> {
  const { doc, f } = await newDoc();
  const r = rng(41);
  const lineColours = [
    rgb(0.9, 0.1, 0.1),
    rgb(0.1, 0.6, 0.2),
    rgb(0.1, 0.3, 0.85),
    rgb(1, 0.8, 0.1),
    rgb(0.95, 0.5, 0.1),
    rgb(0.6, 0.2, 0.7),
  ];
  const stops =
    'Central,Market Square,Riverside,Old Town,University,Hospital,North Park,Station Road,Airport,Harbour,Stadium,Elm Grove,Mill End,Castle Hill,West Gate,Bridge Street,Fair Green,Kings Cross,Long Lane,Terminus'.split(
      ',',
    );
  for (let i = 0; i < 4; i++) {
    const landscape = i % 2 === 1;
    const page = doc.addPage(landscape ? [A4[1], A4[0]] : A4);
    const w = page.getWidth();
    const h = page.getHeight();
    const c = lineColours[i]!;
    page.drawRectangle({ x: 0, y: h - 60, width: w, height: 60, color: c });
    page.drawText(`Line ${i + 4}  ${stops[i]} - ${stops[19 - i]}`, {
      x: 30,
      y: h - 40,
      size: 20,
      font: f.helvBold,
      color: i === 3 ? rgb(0, 0, 0) : rgb(1, 1, 1),
    });
    page.drawText('Monday to Friday, valid from 1 December 2026', {
      x: 30,
      y: h - 78,
      size: 10,
      font: f.helv,
    });
    const cols = landscape ? 16 : 11;
    const rows = landscape ? 20 : 26;
    const x0 = 30;
    const stopW = 95;
    const colW = (w - 60 - stopW) / cols;
    let y = h - 105;
    for (let k = 0; k < cols; k++) {
      // Column heads: the line colour of each trip (express trips in another colour).
      const cc = lineColours[(i + (k % 4 === 3 ? 2 : 0)) % 6]!;
      page.drawRectangle({ x: x0 + stopW + k * colW, y: y - 4, width: colW, height: 16, color: cc });
      page.drawText(k % 4 === 3 ? 'X' : String(k + 1), {
        x: x0 + stopW + k * colW + 4,
        y,
        size: 8,
        font: f.helvBold,
        color: rgb(1, 1, 1),
      });
    }
    y -= 16;
    for (let s = 0; s < rows; s++) {
      // Alternate rows tinted in a light shade of the line colour.
      if (s % 2 === 0)
        page.drawRectangle({
          x: x0,
          y: y - 4,
          width: w - 60,
          height: 14,
          color: rgb(0.85 + c.red * 0.15, 0.85 + c.green * 0.15, 0.85 + c.blue * 0.15),
        });
      page.drawText(stops[s % stops.length]!, {
        x: x0 + 2,
        y,
        size: 8,
        font: s % 5 === 0 ? f.helvBold : f.helv,
      });
      for (let k = 0; k < cols; k++) {
        const t = 6 * 60 + k * 20 + s * 3 + Math.floor(r() * 2);
        const text = `${String(Math.floor(t / 60) % 24).padStart(2, '0')}:${String(t % 60).padStart(2, '0')}`;
        // Some times on a saturated highlight (connections), as real timetables do.
        if ((k * 7 + s * 3) % 17 === 0)
          page.drawRectangle({
            x: x0 + stopW + k * colW,
            y: y - 4,
            width: colW,
            height: 14,
            color: rgb(1, 0.85, 0),
          });
        page.drawText(text, { x: x0 + stopW + k * colW + 3, y, size: 7.5, font: f.helv });
      }
      y -= 14;
    }
    // Legend with colour swatches and a light tinted box.
    page.drawRectangle({ x: 30, y: 25, width: w - 60, height: 40, color: rgb(0.92, 0.92, 0.92) });
    for (let k = 0; k < 4; k++) {
      page.drawRectangle({ x: 40 + k * 130, y: 40, width: 14, height: 10, color: lineColours[k]! });
      page.drawText(`Line ${k + 4} ${words(r, 2)}`, { x: 58 + k * 130, y: 41, size: 8, font: f.helv });
    }
  }
  return doc.save();
}

async function papers(): Promise<Uint8Array> {
  const { doc, f } = await newDoc();
  const r = rng(53);
  for (let i = 0; i < 6; i++) {
    const page = doc.addPage(i < 3 ? LETTER : A4);
    const w = page.getWidth();
    const h = page.getHeight();
    let top = h - 60;
    if (i % 3 === 0) {
      top = textBlock(page, `On the ${words(r, 6)}`, {
        x: 72,
        y: h - 70,
        width: w - 144,
        font: f.timesBold,
        size: 16,
      });
      page.drawText('A. Author, B. Writer and C. Researcher', { x: 72, y: top - 4, size: 10, font: f.times });
      top -= 30;
    }
    const colW = (w - 144 - 18) / 2;
    for (let c = 0; c < 2; c++) {
      let y = top;
      const x = 72 + c * (colW + 18);
      while (y > 90) {
        if (r() < 0.15) {
          page.drawText(`${1 + Math.floor(r() * 6)}.${1 + Math.floor(r() * 4)} ${words(r, 3)}`, {
            x,
            y,
            size: 10,
            font: f.timesBold,
          });
          y -= 14;
        }
        if (c === 1 && i % 2 === 1 && y < 500 && y > 300) {
          // A figure: axes, a grid in light grey, two curves, a caption.
          const fh = 130;
          page.drawRectangle({
            x,
            y: y - fh,
            width: colW,
            height: fh,
            borderColor: rgb(0, 0, 0),
            borderWidth: 0.5,
          });
          for (let g = 1; g < 5; g++)
            page.drawLine({
              start: { x, y: y - fh + (g * fh) / 5 },
              end: { x: x + colW, y: y - fh + (g * fh) / 5 },
              thickness: 0.25,
              color: rgb(0.75, 0.75, 0.75),
            });
          for (const [col, ph] of [
            [rgb(0.8, 0.1, 0.1), 0],
            [rgb(0.1, 0.3, 0.8), 1.3],
          ] as const) {
            let d = `M 0 ${-fh / 2}`;
            for (let k = 1; k <= 40; k++)
              d += ` L ${(k * colW) / 40} ${-fh / 2 - Math.sin(k / 6 + ph) * fh * 0.35}`;
            page.drawSvgPath(d, { x, y, borderColor: col, borderWidth: 1 });
          }
          y -= fh + 12;
          y = textBlock(page, `Figure ${i + 1}: ${sentence(r)}`, {
            x,
            y,
            width: colW,
            font: f.times,
            size: 8,
          });
          y -= 6;
          continue;
        }
        y = textBlock(page, paragraph(r, 2 + Math.floor(r() * 3)), {
          x,
          y,
          width: colW,
          font: f.times,
          size: 9,
          leading: 10.5,
        });
        y -= 5;
      }
    }
    page.drawText(String(i + 1), { x: w / 2, y: 50, size: 9, font: f.times });
  }
  return doc.save();
}

/** A synthetic photograph: smooth shapes, shading and grain, width x height RGB, as JPEG. */
function photo(seed: number, width: number, height: number): Uint8Array {
  const r = rng(seed);
  const data = Buffer.alloc(width * height * 4);
  const blobs = Array.from({ length: 7 }, () => ({
    x: r() * width,
    y: r() * height,
    s: (0.08 + r() * 0.25) * width,
    c: [r() * 255, r() * 255, r() * 255],
  }));
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) {
      // Sky to ground gradient.
      const t = y / height;
      let cr = 120 + 110 * (1 - t);
      let cg = 150 + 80 * (1 - t);
      let cb = 200 - 120 * t;
      for (const b of blobs) {
        const d = Math.hypot(x - b.x, y - b.y) / b.s;
        if (d < 1) {
          const k = (1 - d * d) * 0.9;
          cr = cr * (1 - k) + b.c[0]! * k * (0.7 + 0.3 * Math.cos(d * 3));
          cg = cg * (1 - k) + b.c[1]! * k * (0.7 + 0.3 * Math.cos(d * 3));
          cb = cb * (1 - k) + b.c[2]! * k;
        }
      }
      const n = (r() - 0.5) * 18;
      const o = (y * width + x) * 4;
      data[o] = Math.max(0, Math.min(255, cr + n));
      data[o + 1] = Math.max(0, Math.min(255, cg + n));
      data[o + 2] = Math.max(0, Math.min(255, cb + n));
      data[o + 3] = 255;
    }
  return jpeg.encode({ data, width, height }, 80).data;
}

async function photos(): Promise<Uint8Array> {
  const { doc, f } = await newDoc();
  const r = rng(67);
  for (let i = 0; i < 3; i++) {
    const page = doc.addPage(A4);
    const w = page.getWidth();
    const h = page.getHeight();
    const img = await doc.embedJpg(photo(100 + i, 480, 320));
    const iw = i === 2 ? w - 100 : 300;
    const ih = (iw * 320) / 480;
    page.drawText(`${words(r, 4)}`.toUpperCase(), { x: 50, y: h - 60, size: 18, font: f.helvBold });
    page.drawImage(img, { x: 50, y: h - 90 - ih, width: iw, height: ih });
    page.drawText(`Photo: ${sentence(r)}`, { x: 50, y: h - 104 - ih, size: 7, font: f.helv });
    let y = h - 130 - ih;
    if (i < 2) {
      textBlock(page, paragraph(r, 8), { x: 370, y: h - 100, width: w - 420, font: f.times, size: 10 });
    }
    while (y > 80) {
      y = textBlock(page, paragraph(r, 4), { x: 50, y, width: w - 100, font: f.times, size: 10.5 });
      y -= 8;
    }
    if (i === 1) {
      // A light-blue call-out box over the text column.
      page.drawRectangle({ x: 370, y: 90, width: w - 420, height: 120, color: rgb(0.82, 0.9, 1) });
      textBlock(page, sentence(r) + ' ' + sentence(r), {
        x: 378,
        y: 195,
        width: w - 436,
        font: f.helvBold,
        size: 9,
      });
    }
  }
  return doc.save();
}

async function charts(): Promise<Uint8Array> {
  const { doc, f } = await newDoc();
  const r = rng(79);
  const palette = [
    rgb(0.2, 0.4, 0.8),
    rgb(0.9, 0.5, 0.1),
    rgb(0.3, 0.7, 0.3),
    rgb(0.8, 0.2, 0.3),
    rgb(0.5, 0.5, 0.5),
  ];
  for (let i = 0; i < 3; i++) {
    const page = doc.addPage([A4[1], A4[0]]);
    const w = page.getWidth();
    const h = page.getHeight();
    // A slide: a light background gradient, title bar, bar chart, bullet list.
    for (let k = 0; k < 60; k++)
      page.drawRectangle({
        x: 0,
        y: (k * h) / 60,
        width: w,
        height: h / 60 + 0.5,
        color: rgb(0.88 + k * 0.002, 0.9 + k * 0.0015, 0.97),
      });
    page.drawRectangle({ x: 0, y: h - 70, width: w, height: 70, color: rgb(0.12, 0.2, 0.38) });
    page.drawText(`Quarterly ${words(r, 3)}`, {
      x: 40,
      y: h - 45,
      size: 24,
      font: f.helvBold,
      color: rgb(1, 1, 1),
    });
    const bx = 50;
    const by = 80;
    const bw = 430;
    const bh = 330;
    page.drawRectangle({ x: bx, y: by, width: bw, height: bh, color: rgb(1, 1, 1) });
    for (let g = 0; g <= 5; g++) {
      page.drawLine({
        start: { x: bx + 30, y: by + 20 + g * 60 },
        end: { x: bx + bw - 10, y: by + 20 + g * 60 },
        thickness: 0.25,
        color: rgb(0.6, 0.6, 0.6),
      });
      page.drawText(String(g * 20), { x: bx + 8, y: by + 17 + g * 60, size: 8, font: f.helv });
    }
    for (let q = 0; q < 4; q++)
      for (let s = 0; s < 3; s++) {
        const v = 40 + r() * 250;
        page.drawRectangle({
          x: bx + 45 + q * 95 + s * 26,
          y: by + 20,
          width: 22,
          height: v,
          color: palette[s]!,
        });
      }
    ['Q1', 'Q2', 'Q3', 'Q4'].forEach((t, q) =>
      page.drawText(t, { x: bx + 75 + q * 95, y: by + 6, size: 9, font: f.helvBold }),
    );
    let y = h - 110;
    for (let k = 0; k < 6; k++) {
      page.drawCircle({ x: 520, y: y + 4, size: 3, color: palette[k % 5]! });
      y = textBlock(page, sentence(r), { x: 530, y, width: w - 570, font: f.helv, size: 12 });
      y -= 10;
    }
  }
  return doc.save();
}

/** An 8-bit gray PGM (P5) as width, height and pixels. */
function readPgm(b: Buffer): { width: number; height: number; px: Uint8Array } {
  const head = b.subarray(0, 64).toString('latin1');
  const m = /^P5\s+(\d+)\s+(\d+)\s+(\d+)\s/.exec(head);
  if (!m) throw new Error('not a PGM');
  const width = Number(m[1]);
  const height = Number(m[2]);
  return { width, height, px: b.subarray(m[0].length, m[0].length + width * height) };
}

/** Pages of `pdf` as "scans": rasterised at 150 dpi, skewed, grainy paper, noise; JPEG in a PDF. */
async function scans(sources: { pdf: Uint8Array; page: number }[]): Promise<Uint8Array> {
  const dir = mkdtempSync(join(tmpdir(), 'line-corpus-'));
  const out = await PDFDocument.create();
  out.setCreationDate(new Date('2026-11-28T00:00:00Z'));
  out.setModificationDate(new Date('2026-11-28T00:00:00Z'));
  out.setProducer('faxline bench/line-corpus-generate.ts');
  try {
    for (const [n, s] of sources.entries()) {
      const src = join(dir, `s${n}.pdf`);
      writeFileSync(src, s.pdf);
      const base = join(dir, `p${n}`);
      execFileSync('pdftoppm', [
        '-gray',
        '-r',
        '150',
        '-f',
        String(s.page),
        '-l',
        String(s.page),
        '-singlefile',
        src,
        base,
      ]);
      const g = readPgm(readFileSync(`${base}.pgm`));
      const r = rng(200 + n);
      const angle = ((n % 2 ? 1 : -1) * (0.4 + n * 0.25) * Math.PI) / 180;
      const cos = Math.cos(angle);
      const sin = Math.sin(angle);
      const cx = g.width / 2;
      const cy = g.height / 2;
      const data = Buffer.alloc(g.width * g.height * 4);
      // Paper tone: a slightly yellow, uneven page; a darker band where the lid did not close.
      for (let y = 0; y < g.height; y++)
        for (let x = 0; x < g.width; x++) {
          const sx = cos * (x - cx) + sin * (y - cy) + cx;
          const sy = -sin * (x - cx) + cos * (y - cy) + cy;
          const ix = Math.floor(sx);
          const iy = Math.floor(sy);
          let v = 255;
          if (ix >= 0 && iy >= 0 && ix + 1 < g.width && iy + 1 < g.height) {
            const fx = sx - ix;
            const fy = sy - iy;
            const p = (xx: number, yy: number) => g.px[yy * g.width + xx]!;
            v =
              p(ix, iy) * (1 - fx) * (1 - fy) +
              p(ix + 1, iy) * fx * (1 - fy) +
              p(ix, iy + 1) * (1 - fx) * fy +
              p(ix + 1, iy + 1) * fx * fy;
          }
          const paper = 236 - 10 * Math.sin(y / 300 + n) - (x < 40 ? (40 - x) * 1.5 : 0);
          const ink = v / 255;
          const noise = (r() - 0.5) * 22;
          const lum = Math.max(0, Math.min(255, paper * ink + noise));
          const o = (y * g.width + x) * 4;
          data[o] = lum;
          data[o + 1] = Math.max(0, Math.min(255, lum - 2));
          data[o + 2] = Math.max(0, Math.min(255, lum - 10));
          data[o + 3] = 255;
        }
      const jpg = jpeg.encode({ data, width: g.width, height: g.height }, 60).data;
      const img = await out.embedJpg(jpg);
      const page = out.addPage([(g.width * 72) / 150, (g.height * 72) / 150]);
      page.drawImage(img, { x: 0, y: 0, width: page.getWidth(), height: page.getHeight() });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return out.save();
}

const docs: [string, Uint8Array][] = [
  ['letters.pdf', await letters()],
  ['invoices.pdf', await invoices()],
  ['forms.pdf', await forms()],
  ['timetables.pdf', await timetables()],
  ['papers.pdf', await papers()],
  ['photos.pdf', await photos()],
  ['charts.pdf', await charts()],
];
const byName = Object.fromEntries(docs);
docs.push([
  'scans.pdf',
  await scans([
    { pdf: byName['letters.pdf']!, page: 2 },
    { pdf: byName['invoices.pdf']!, page: 1 },
    { pdf: byName['forms.pdf']!, page: 4 },
    { pdf: byName['papers.pdf']!, page: 5 },
  ]),
]);
for (const [name, bytes] of docs) {
  writeFileSync(new URL(name, OUT), bytes);
  console.log(name, bytes.length);
}
// Pages of PDFs that Debian packages ship (their licences: README.md of the corpus), copied
// unchanged with pdf-lib.
const debian: [string, string, number[]][] = [
  ['debian-zlib-crc-doc.pdf', '/usr/share/doc/zlib1g-dev/crc-doc.1.0.pdf.gz', [1, 2, 3, 4, 5]],
  ['debian-bzip2-manual.pdf', '/usr/share/doc/bzip2/manual.pdf.gz', [1, 5, 6, 7]],
  ['debian-fontconfig-user.pdf', '/usr/share/doc/fontconfig/fontconfig-user.pdf.gz', [1, 2, 3]],
];
for (const [name, path, pages] of debian) {
  const src = await PDFDocument.load(gunzipSync(readFileSync(path)), { updateMetadata: false });
  const out = await PDFDocument.create({ updateMetadata: false });
  for (const p of await out.copyPages(
    src,
    pages.map((n) => n - 1),
  ))
    out.addPage(p);
  const bytes = await out.save();
  writeFileSync(new URL(name, OUT), bytes);
  console.log(name, bytes.length);
}
// The scans have no text layer: their reference text (for OCR recall) is that of the pages scanned.
const scanText = [
  ['letters.pdf', 2],
  ['invoices.pdf', 1],
  ['forms.pdf', 4],
  ['papers.pdf', 5],
].map(([name, page]) =>
  execFileSync(
    'pdftotext',
    ['-f', String(page), '-l', String(page), new URL(String(name), OUT).pathname, '-'],
    {
      encoding: 'utf8',
    },
  ),
);
writeFileSync(new URL('scans.pdf.txt', OUT), scanText.join('\f'));
