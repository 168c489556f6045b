// Proof of transmission (issue 21, item 3): the image as transmitted, as a PDF, and the transmission
// report. Both wrap the pages of the stored TIFF (fax_renders) as they are, CCITT T.6 data in image
// XObjects with the CCITTFaxDecode filter: nothing is decoded or re-encoded, so what a viewer shows
// is exactly what went on the line. Built with pdf-lib's low-level objects; our own layout, bounded
// work (a fax's pages are referenced, not processed).
import {
  PDFDocument,
  PDFRawStream,
  StandardFonts,
  concatTransformationMatrix,
  drawObject,
  popGraphicsState,
  pushGraphicsState,
  rgb,
  type PDFFont,
  type PDFPage,
  type PDFRef,
} from 'pdf-lib';
import { wrap } from './cover-layout.ts';
import type { PageLayout, StoredPage } from './render/tiff-read.ts';

/** The page as an image XObject holding its T.6 data unchanged. */
function faxImage(doc: PDFDocument, p: StoredPage): PDFRef {
  if (p.compression !== 4) throw new Error(`fax image page: compression ${p.compression}, T.6 (4) expected`);
  const dict = doc.context.obj({
    Type: 'XObject',
    Subtype: 'Image',
    Width: p.width,
    Height: p.height,
    ColorSpace: 'DeviceGray',
    BitsPerComponent: 1,
    Filter: 'CCITTFaxDecode',
    // K < 0: pure two-dimensional (T.6); min-is-white data, so 0 bits decode to black (BlackIs1 false).
    DecodeParms: { K: -1, Columns: p.width, Rows: p.height, BlackIs1: false },
  });
  return doc.context.register(PDFRawStream.of(dict, p.data));
}

/** Draws an image XObject into the box (x, y, w, h) of a page. */
function place(page: PDFPage, ref: PDFRef, x: number, y: number, w: number, h: number): void {
  const name = page.node.newXObject('FaxPage', ref);
  page.pushOperators(
    pushGraphicsState(),
    concatTransformationMatrix(w, 0, 0, h, x, y),
    drawObject(name),
    popGraphicsState(),
  );
}

/** Page size of a fax page, in points, from its pixels and resolution. */
const sizeOf = (p: Pick<PageLayout, 'width' | 'height' | 'xDpi' | 'yDpi'>): [number, number] => [
  (p.width / p.xDpi) * 72,
  (p.height / p.yDpi) * 72,
];

/** The fax as transmitted, whole in memory (imagePdfParts over pages already read). */
export async function imagePdf(pages: StoredPage[], title: string): Promise<Uint8Array> {
  const strips = new Map(pages.map(({ data, ...p }) => [{ ...p, offset: 0, length: data.length }, data]));
  const parts: Uint8Array[] = [];
  for await (const b of imagePdfParts(
    [...strips.keys()],
    async function* (p) {
      yield strips.get(p)!;
    },
    title,
  ))
    parts.push(b);
  return Buffer.concat(parts);
}

/** A PDF literal string: printable ASCII as it is, anything else as an octal escape. */
function pdfString(s: string): string {
  let out = '(';
  for (const ch of Buffer.from(s, 'latin1')) {
    const c = String.fromCharCode(ch);
    out +=
      ch < 32 || ch > 126 || c === '(' || c === ')' || c === '\\'
        ? `\\${ch.toString(8).padStart(3, '0')}`
        : c;
  }
  return `${out})`;
}

/** A number as PDF writes it: at most 4 decimals, no exponent. */
const num = (x: number) => String(Math.round(x * 10_000) / 10_000);

/**
 * The fax as transmitted, one PDF page per fax page at its paper size, its T.6 strip unchanged in an
 * image XObject (CCITTFaxDecode), written piece by piece: only `strip`'s pieces of one page are held
 * at a time, so a fax of any size is served with little memory (the API's image endpoint). Objects:
 * 1 catalog, 2 page tree, 3 info, then per page a page, its content stream and its image.
 */
export async function* imagePdfParts(
  pages: PageLayout[],
  strip: (p: PageLayout) => AsyncIterable<Uint8Array>,
  title: string,
): AsyncGenerator<Uint8Array> {
  const offsets: number[] = [];
  let pos = 0;
  const out = (s: string | Uint8Array) => {
    const b = typeof s === 'string' ? Buffer.from(s, 'latin1') : s;
    pos += b.length;
    return b;
  };
  const obj = (n: number, body: string) => {
    offsets[n] = pos;
    return out(`${n} 0 obj\n${body}\nendobj\n`);
  };
  for (const p of pages)
    if (p.compression !== 4)
      throw new Error(`fax image page: compression ${p.compression}, T.6 (4) expected`);
  yield out('%PDF-1.4\n%\xe2\xe3\xcf\xd3\n');
  yield obj(1, '<< /Type /Catalog /Pages 2 0 R >>');
  const kids = pages.map((_, i) => `${4 + 3 * i} 0 R`).join(' ');
  yield obj(2, `<< /Type /Pages /Count ${pages.length} /Kids [${kids}] >>`);
  yield obj(3, `<< /Title ${pdfString(title)} /Producer (faxline) >>`);
  for (const [i, p] of pages.entries()) {
    const [w, h] = sizeOf(p);
    const [page, content, image] = [4 + 3 * i, 5 + 3 * i, 6 + 3 * i];
    yield obj(
      page,
      `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 ${num(w)} ${num(h)}] ` +
        `/Resources << /XObject << /FaxPage ${image} 0 R >> >> /Contents ${content} 0 R >>`,
    );
    const ops = `q ${num(w)} 0 0 ${num(h)} 0 0 cm /FaxPage Do Q`;
    yield obj(content, `<< /Length ${ops.length} >>\nstream\n${ops}\nendstream`);
    // K < 0: pure two-dimensional (T.6); min-is-white data, so 0 bits decode to black (BlackIs1 false).
    offsets[image] = pos;
    yield out(
      `${image} 0 obj\n<< /Type /XObject /Subtype /Image /Width ${p.width} /Height ${p.height} ` +
        `/ColorSpace /DeviceGray /BitsPerComponent 1 /Filter /CCITTFaxDecode ` +
        `/DecodeParms << /K -1 /Columns ${p.width} /Rows ${p.height} /BlackIs1 false >> /Length ${p.length} >>\nstream\n`,
    );
    let got = 0;
    for await (const b of strip(p)) {
      got += b.length;
      yield out(b);
    }
    if (got !== p.length) throw new Error(`fax image page ${i + 1}: ${got} bytes read, ${p.length} expected`);
    yield out('\nendstream\nendobj\n');
  }
  const xref = pos;
  const count = 4 + 3 * pages.length;
  let table = `xref\n0 ${count}\n0000000000 65535 f \n`;
  for (let n = 1; n < count; n++) table += `${String(offsets[n]).padStart(10, '0')} 00000 n \n`;
  yield out(`${table}trailer\n<< /Size ${count} /Root 1 0 R /Info 3 0 R >>\nstartxref\n${xref}\n%%EOF\n`);
}

/** One call attempt, as the line caller recorded it (fax_attempts). */
export interface ReportAttempt {
  attempt: number;
  started_at: Date;
  ended_at: Date | null;
  outcome: string | null;
  failure_type: string | null;
  failure_code: string | null;
  failure_message: string | null;
  pages_sent: number;
  page_count: number;
  bit_rate: number | null;
  remote_station_id: string | null;
  duration_ms: number | null;
  engine: Record<string, unknown> | null;
}

export interface ReportInput {
  jobId: string;
  state: string;
  faxNumber: string;
  toName: string | null;
  callerId: string;
  quality: string;
  pageCount: number | null;
  pagesSent: number;
  createdAt: Date;
  completedAt: Date | null;
  failure: { code: string; reason: string | null } | null;
  timeZone: string;
  attempts: ReportAttempt[];
  /** The first page as transmitted; null when the image is gone (deleted with the documents) or never made. */
  firstPage: StoredPage | null;
  /** Why there is no first page, when there is none. */
  noImage: string | null;
  now: Date;
}

/** The fields of a fax job (its row in fax_jobs) that a report names. */
export interface ReportJob {
  id: string;
  state: string;
  fax_number: string;
  options: { recipient_name?: string | null };
  caller_id: string;
  fax_quality: string;
  page_count: number | null;
  pages_sent: number;
  created_at: Date;
  completed_at: Date | null;
  failure_code: string | null;
  failure_reason: string | null;
}

/** What the report says of the job itself: one mapping for the report endpoint and the result mail. */
export function reportOfJob(
  job: ReportJob,
): Omit<ReportInput, 'timeZone' | 'attempts' | 'firstPage' | 'noImage' | 'now'> {
  return {
    jobId: job.id,
    state: job.state,
    faxNumber: job.fax_number,
    toName: job.options.recipient_name ?? null,
    callerId: job.caller_id,
    quality: job.fax_quality,
    pageCount: job.page_count,
    pagesSent: job.pages_sent,
    createdAt: job.created_at,
    completedAt: job.completed_at,
    failure: job.failure_code ? { code: job.failure_code, reason: job.failure_reason } : null,
  };
}

/** "2026-11-26 19:30:05 UTC" in the zone (an unknown zone: UTC). */
export function stamp(d: Date, timeZone: string): string {
  let zone = timeZone;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
  } catch {
    zone = 'UTC';
  }
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone: zone,
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hourCycle: 'h23',
    timeZoneName: 'short',
  }).formatToParts(d);
  const g = (t: string) => parts.find((p) => p.type === t)?.value ?? '';
  return `${g('year')}-${g('month')}-${g('day')} ${g('hour')}:${g('minute')}:${g('second')} ${g('timeZoneName')}`;
}

const seconds = (ms: number | null) => (ms === null ? '-' : `${(ms / 1000).toFixed(1)} s`);

/** ECM as the engine reported it. */
function ecmOf(a: ReportAttempt | undefined): string {
  const v = a?.engine?.ecm;
  return v === true ? 'on' : v === false ? 'off' : 'not reported';
}

function resultOf(a: ReportAttempt): string {
  if (a.outcome === 'delivered') return 'delivered';
  if (a.outcome === null) return 'in progress';
  const why = [a.failure_type, a.failure_code].filter(Boolean).join(' / ');
  return `${a.outcome}${why ? `: ${why}` : ''}`;
}

/** Text the standard fonts can draw (WinAnsi): anything else becomes '?'. */
function safe(font: PDFFont, s: string): string {
  const set = new Set(font.getCharacterSet());
  return [...s.replace(/\s+/g, ' ')].map((c) => (set.has(c.codePointAt(0)!) ? c : '?')).join('');
}

const MARGIN = 40;
const LETTER: [number, number] = [612, 792];

/**
 * The transmission report: the fax's result and reason, its dates, line time, pages sent of total,
 * the far end's identity (CSID), bit rate and ECM, one line per call attempt with what the fax engine
 * reported, and its first page reduced (the transmitted image, not a re-render).
 */
export async function reportPdf(r: ReportInput): Promise<Uint8Array> {
  const doc = await PDFDocument.create();
  doc.setTitle(`Fax transmission report ${r.jobId}`);
  doc.setProducer('faxline');
  const font = await doc.embedFont(StandardFonts.Helvetica);
  const bold = await doc.embedFont(StandardFonts.HelveticaBold);
  let page = doc.addPage(LETTER);
  let y = LETTER[1] - MARGIN;
  const text = (s: string, x: number, size = 10, f = font) => {
    page.drawText(safe(f, s), { x, y, size, font: f });
  };

  text('Fax transmission report', MARGIN, 18, bold);
  y -= 26;
  const last = r.attempts.at(-1);
  const result =
    r.state === 'delivered'
      ? 'DELIVERED'
      : r.failure
        ? `${r.state.toUpperCase()}: ${r.failure.code}`
        : r.state.toUpperCase();
  text(`Result: ${result}`, MARGIN, 13, bold);
  y -= 20;

  // The thumbnail of the first page, top right.
  const thumbW = 180;
  const thumbX = LETTER[0] - MARGIN - thumbW;
  const top = y + 8;
  let thumbBottom = top;
  if (r.firstPage) {
    const [w, h] = sizeOf(r.firstPage);
    const thumbH = (thumbW * h) / w;
    thumbBottom = top - thumbH;
    place(page, faxImage(doc, r.firstPage), thumbX, thumbBottom, thumbW, thumbH);
    page.drawRectangle({
      x: thumbX,
      y: thumbBottom,
      width: thumbW,
      height: thumbH,
      borderColor: rgb(0, 0, 0),
      borderWidth: 0.5,
    });
    page.drawText('First page as transmitted', { x: thumbX, y: thumbBottom - 12, size: 8, font });
    thumbBottom -= 12;
  }

  const lineTime = r.attempts.reduce((n, a) => n + (a.duration_ms ?? 0), 0);
  const csid = [...r.attempts].reverse().find((a) => a.remote_station_id)?.remote_station_id;
  const engineRate = last?.engine?.bit_rate;
  const bitRate = last?.bit_rate ?? (typeof engineRate === 'number' ? engineRate : null);
  const rows: [string, string][] = [
    ['Fax', r.jobId],
    ['To', `${r.faxNumber}${r.toName ? ` (${r.toName})` : ''}`],
    ['From', r.callerId],
    ['Submitted', stamp(r.createdAt, r.timeZone)],
    ['Completed', r.completedAt ? stamp(r.completedAt, r.timeZone) : '-'],
    ['Pages sent', `${r.pagesSent} of ${r.pageCount ?? '-'}`],
    ['Line time', `${seconds(lineTime)} in ${r.attempts.length} attempt(s)`],
    ['Remote CSID', csid ?? '-'],
    ['Bit rate', bitRate ? `${bitRate} bit/s` : '-'],
    ['ECM', ecmOf(last)],
    ['Quality', r.quality],
  ];
  if (r.failure?.reason) rows.push(['Reason', r.failure.reason]);
  const valueX = MARGIN + 80;
  const valueW = thumbX - 16 - valueX;
  for (const [k, v] of rows) {
    text(k, MARGIN, 10, bold);
    const lines = wrap(font, safe(font, v), 10, valueW);
    for (const [i, l] of lines.slice(0, 6).entries()) {
      if (i > 0) y -= 13;
      text(l, valueX, 10);
    }
    y -= 15;
  }
  if (!r.firstPage && r.noImage) {
    text(`First page: ${r.noImage}`, MARGIN, 9);
    y -= 15;
  }

  // One line per attempt (and its engine's report), below both columns.
  y = Math.min(y, thumbBottom) - 18;
  const cols: [string, number][] = [
    ['#', MARGIN],
    ['Started', MARGIN + 18],
    ['Time', MARGIN + 148],
    ['Pages', MARGIN + 190],
    ['Bit rate', MARGIN + 228],
    ['ECM', MARGIN + 272],
    ['Remote CSID', MARGIN + 302],
    ['Result', MARGIN + 402],
  ];
  const header = () => {
    for (const [c, x] of cols) text(c, x, 9, bold);
    y -= 4;
    page.drawLine({
      start: { x: MARGIN, y },
      end: { x: LETTER[0] - MARGIN, y },
      thickness: 0.5,
    });
    y -= 12;
  };
  text('Attempts', MARGIN, 12, bold);
  y -= 18;
  if (r.attempts.length === 0) text('No call was made.', MARGIN, 10);
  else header();
  for (const a of r.attempts) {
    if (y < MARGIN + 40) {
      page = doc.addPage(LETTER);
      y = LETTER[1] - MARGIN;
      header();
    }
    const cells = [
      String(a.attempt),
      stamp(a.started_at, r.timeZone),
      seconds(a.duration_ms),
      `${a.pages_sent}/${a.page_count}`,
      a.bit_rate
        ? String(a.bit_rate)
        : typeof a.engine?.bit_rate === 'number'
          ? String(a.engine.bit_rate)
          : '-',
      a.engine && typeof a.engine.ecm === 'boolean' ? (a.engine.ecm ? 'on' : 'off') : '-',
      a.remote_station_id ?? '-',
      resultOf(a),
    ];
    cells.forEach((c, i) => {
      const x = cols[i]![1];
      const room = (cols[i + 1]?.[1] ?? LETTER[0] - MARGIN) - x - 4;
      page.drawText(wrap(font, safe(font, c), 8, room)[0] ?? '', { x, y, size: 8, font });
    });
    y -= 11;
    const detail = [
      a.failure_message,
      a.engine
        ? Object.entries(a.engine)
            .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
            .join(', ')
        : null,
    ]
      .filter(Boolean)
      .join(' | ');
    if (detail)
      for (const l of wrap(font, safe(font, detail), 7, LETTER[0] - 2 * MARGIN - 18).slice(0, 4)) {
        page.drawText(l, { x: MARGIN + 18, y, size: 7, font, color: rgb(0.25, 0.25, 0.25) });
        y -= 9;
      }
    y -= 4;
  }
  page.drawText(safe(font, `Generated ${stamp(r.now, r.timeZone)} by faxline`), {
    x: MARGIN,
    y: MARGIN - 16,
    size: 7,
    font,
  });
  return doc.save({ useObjectStreams: false });
}
