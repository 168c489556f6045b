// The proof-of-transmission files on their own: the TIFF reader, the image PDF (T.6 data carried
// unchanged, read back by poppler) and the report's edge cases (no call made, image gone, many
// attempts over several pages, text the standard fonts cannot draw).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { encodeT6 } from '../src/documents/render/g4.ts';
import { readTiffPages } from '../src/documents/render/tiff-read.ts';
import { writeTiffClassF } from '../src/documents/render/tiff.ts';
import { imagePdf, reportPdf, stamp, type ReportAttempt, type ReportInput } from '../src/documents/proof.ts';

const work = mkdtempSync(join(tmpdir(), 'faxline-proof-pdf-'));
after(() => rmSync(work, { recursive: true, force: true }));

function tool(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { encoding: 'latin1', timeout: 60_000 });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${cmd}: exit ${r.status}: ${r.stderr}`);
  return r.stdout;
}

/** A 1728 x h page, white but for a black square at (x, y). */
function page(h: number, x: number, y: number, yDpi = 98) {
  const rb = 216;
  const rows = new Uint8Array(rb * h);
  for (let r = y; r < y + 40; r++) for (let b = x >> 3; b < (x >> 3) + 5; b++) rows[r * rb + b] = 0xff;
  return { data: encodeT6(rows, 1728, h), width: 1728, height: h, xDpi: 204, yDpi };
}

const base: ReportInput = {
  jobId: '6f1c2b9e-8d4a-4c3b-9a1e-2f5d7c8b9a01',
  state: 'failed',
  faxNumber: '+15551234567',
  toName: 'Zoë Ωmega',
  callerId: '+15550001111',
  quality: 'low',
  pageCount: 3,
  pagesSent: 0,
  createdAt: new Date('2026-11-26T10:00:00Z'),
  completedAt: new Date('2026-11-26T10:05:00Z'),
  failure: { code: 'pdf_broken', reason: 'letter.pdf: the PDF cannot be read (broken structure)' },
  timeZone: 'Europe/Paris',
  attempts: [],
  firstPage: null,
  noImage: 'none was made (the fax ended before it was rendered)',
  now: new Date('2026-11-26T11:00:00Z'),
};

describe('proof of transmission files', () => {
  it('reads back the pages of our TIFF, and refuses what is not one', async () => {
    const pages = [page(1078, 100, 100), page(2156, 800, 1000, 196)];
    const tiff = writeTiffClassF(pages);
    const back = await readTiffPages(tiff);
    assert.equal(back.length, 2);
    for (const [i, p] of back.entries()) {
      assert.deepEqual(
        [p.width, p.height, p.xDpi, p.yDpi, p.compression],
        [1728, pages[i]!.height, 204, pages[i]!.yDpi, 4],
      );
      assert.ok(Buffer.from(p.data).equals(Buffer.from(pages[i]!.data)));
    }
    await assert.rejects(readTiffPages(Buffer.from('%PDF-1.7 not a tiff')), /not a TIFF file/);
    const cut = Buffer.from(tiff.subarray(0, 8));
    cut.writeUInt32LE(tiff.length + 10, 4);
    await assert.rejects(readTiffPages(cut), /bad directory offset/);
  });

  it('wraps each page in a PDF with its T.6 data unchanged; poppler renders the mark where it was', async () => {
    const pages = [page(1078, 100, 100), page(1078, 1200, 900)];
    const pdf = await imagePdf(await readTiffPages(writeTiffClassF(pages)), 'test');
    const file = join(work, 'image.pdf');
    writeFileSync(file, pdf);
    tool('pdfimages', ['-ccitt', file, join(work, 'raw')]);
    for (const [i, p] of pages.entries())
      assert.ok(readFileSync(join(work, `raw-00${i}.ccitt`)).equals(Buffer.from(p.data)), `page ${i + 1}`);
    // Letter at 204 x 98 dpi: 8.47 x 11 in. Rendered at 204 dpi square, page 2's mark is at
    // (1200..1240, 900 * 204 / 98 ...).
    tool('pdftoppm', ['-r', '204', '-gray', '-f', '2', '-l', '2', '-singlefile', file, join(work, 'p2')]);
    const pgm = readFileSync(join(work, 'p2.pgm'));
    const header = pgm.toString('latin1', 0, 20).split(/\s+/);
    const [w, h] = [Number(header[1]), Number(header[2])];
    assert.ok(Math.abs(w - 1728) <= 1 && h === 2244, `${w} x ${h}`);
    const data = pgm.subarray(pgm.length - w * h);
    const at = (x: number, y: number) => data[y * w + x]!;
    assert.ok(at(1220, Math.round(920 * (204 / 98))) < 64, 'the mark is black');
    assert.ok(at(200, 200) > 192, 'elsewhere is white');
    await assert.rejects(
      imagePdf([{ ...(await readTiffPages(writeTiffClassF(pages)))[0]!, compression: 1 }], 'x'),
      /T\.6 \(4\) expected/,
    );
  });

  it('reports a fax that failed before any call, without an image, in the account time zone', async () => {
    const file = join(work, 'none.pdf');
    writeFileSync(file, await reportPdf(base));
    const txt = tool('pdftotext', ['-layout', file, '-']);
    assert.match(txt, /Result: FAILED: pdf_broken/);
    assert.match(txt, /To\s+\+15551234567 \(Zo.{1,2} \?mega\)/, 'ë is WinAnsi, Ω is not');
    assert.match(txt, /Submitted\s+2026-11-26 11:00:00 GMT\+1/);
    assert.match(txt, /No call was made/);
    assert.match(txt, /First page: none was made/);
    assert.doesNotMatch(tool('pdfimages', ['-list', file]), / ccitt /);
    assert.equal(stamp(new Date('2026-11-26T10:00:00Z'), 'Not/AZone'), '2026-11-26 10:00:00 UTC');
  });

  it('puts one line per attempt, over several pages when there are many', async () => {
    const attempts: ReportAttempt[] = Array.from({ length: 60 }, (_, i) => ({
      attempt: i + 1,
      started_at: new Date(Date.UTC(2026, 10, 26, 10, i)),
      ended_at: new Date(Date.UTC(2026, 10, 26, 10, i, 30)),
      outcome: i === 59 ? 'delivered' : 'failed',
      failure_type: i === 59 ? null : 'busy',
      failure_code: i === 59 ? null : 'BUSY',
      failure_message: i === 59 ? null : 'the line is busy',
      pages_sent: i === 59 ? 3 : 0,
      page_count: 3,
      bit_rate: i === 59 ? 9600 : null,
      remote_station_id: i === 59 ? 'FAR END 1' : null,
      duration_ms: 30_000,
      engine: i === 59 ? { ecm: false, bit_rate: 9600, t30_text: 'OK' } : null,
    }));
    const file = join(work, 'many.pdf');
    const firstPage = (await readTiffPages(writeTiffClassF([page(1078, 100, 100)])))[0]!;
    writeFileSync(
      file,
      await reportPdf({
        ...base,
        state: 'delivered',
        failure: null,
        pagesSent: 3,
        attempts,
        firstPage,
        noImage: null,
      }),
    );
    const info = tool('pdfinfo', [file]);
    const pages = Number(/Pages:\s+(\d+)/.exec(info)![1]);
    assert.ok(pages >= 2, `${pages} pages`);
    const txt = tool('pdftotext', ['-layout', file, '-']);
    for (const n of [1, 30, 60]) assert.match(txt, new RegExp(`\\n\\s*${n}\\s+2026-11-26`), `attempt ${n}`);
    assert.match(txt, /Result: DELIVERED/);
    assert.match(txt, /Remote CSID\s+FAR END 1/);
    assert.match(txt, /ECM\s+off/);
    assert.match(txt, /Line time\s+1800\.0 s in 60 attempt/);
    assert.equal((tool('pdfimages', ['-list', file]).match(/ ccitt /g) ?? []).length, 1);
    tool('pdftoppm', ['-r', '30', '-gray', file, join(work, 'many')]);
    assert.equal(readdirSync(work).filter((f) => f.startsWith('many-')).length, pages);
  });
});
