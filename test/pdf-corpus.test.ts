// A public PDF test corpus (a sample of pdf.js's test/pdfs, test/fixtures/corpus/README.md) through
// the real check and render path: the sandbox's check in its child process, then the render
// processes making the TIFF Class F a fax sends. Each file is either delivered (rendered, every page)
// or refused with a failure code and a reason that names the file and its problem, never a
// JavaScript exception's text. The share delivered is compared with what PDFium alone opens (the
// document loads and every page of it loads), called directly here: no file that PDFium opens may be
// refused unless a documented safety limit names it.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { PdfSandbox, defaultSandboxLimits } from '../src/documents/check.ts';
import { DocumentError } from '../src/documents/errors.ts';
import { Pdfium } from '../src/documents/render/engine.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import { renderFax } from '../src/documents/render/render.ts';

const dir = new URL('./fixtures/corpus/pdfjs/', import.meta.url);
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.pdf'))
  .sort();

/**
 * Refusals of files PDFium opens, by the documented limits that allow them (docs/document-safety.md):
 * a page without area (pdf_page_size) and the safety limits (budgets, page counts, caps).
 */
const documentedLimits = new Set([
  'pdf_page_size',
  'pdf_decompression_bomb',
  'pdf_image_too_large',
  'pdf_too_many_pages',
  'pdf_check_memory',
  'pdf_check_timeout',
  'render_timeout',
  'render_memory_exceeded',
  'fax_image_too_large',
]);

/** Text that only a JavaScript exception (or a parser's internals) would put in a reason. */
const exceptionText =
  /call stack|is not a function|undefined|null|TypeError|RangeError|RuntimeError|Expected instance|Trying to parse|memory access|unreachable|\bat \w+ \(/i;

/** PDFium alone: the document opens, has pages, and every page loads. */
function pdfiumOpens(pdfium: Pdfium, bytes: Uint8Array): boolean {
  let doc;
  try {
    doc = pdfium.open(bytes);
  } catch {
    return false;
  }
  try {
    if (doc.pageCount === 0) return false;
    for (let i = 0; i < doc.pageCount; i++) if (!doc.pageSize(i)) return false;
    return true;
  } finally {
    doc.close();
  }
}

describe('PDF corpus (pdf.js test files) through check and render', () => {
  let sandbox: PdfSandbox;
  let pool: RenderPool;
  let pdfium: Pdfium;
  before(async () => {
    sandbox = new PdfSandbox({ ...defaultSandboxLimits, concurrency: 1, memoryMb: 256 });
    pool = new RenderPool({ size: 1 });
    pdfium = await Pdfium.load();
  });
  after(async () => {
    await sandbox.close();
    await pool.close();
  });

  it('delivers every file PDFium opens, refuses the others with a named reason', async () => {
    assert.ok(files.length >= 40, `the corpus has ${files.length} files`);
    const rows: { file: string; pdfium: boolean; outcome: string; reason: string }[] = [];
    for (const file of files) {
      const bytes = readFileSync(new URL(file, dir));
      const opens = pdfiumOpens(pdfium, bytes);
      let outcome = 'delivered';
      let reason = '';
      try {
        const info = await sandbox.check(bytes, file, AbortSignal.timeout(60_000), 'corpus');
        const fax = await renderFax(
          pool,
          [{ name: file, bytes: info.pdf ?? bytes, pages: info.pageCount }],
          'standard',
        );
        assert.equal(fax.pageCount, info.pageCount, `${file}: every page rendered`);
        assert.equal(fax.tiff.toString('latin1', 0, 4), 'II*\0', `${file}: a TIFF`);
      } catch (err) {
        assert.ok(err instanceof DocumentError, `${file}: not a document refusal: ${String(err)}`);
        outcome = err.code;
        reason = err.message;
        assert.ok(reason.startsWith(`${file}: `), `${file}: the reason names the file: ${reason}`);
        assert.doesNotMatch(reason, exceptionText, `${file}: a JavaScript exception reached the reason`);
        assert.ok(reason.length > file.length + 15, `${file}: the reason says what is wrong: ${reason}`);
      }
      rows.push({ file, pdfium: opens, outcome, reason });
    }

    const delivered = rows.filter((r) => r.outcome === 'delivered');
    const opened = rows.filter((r) => r.pdfium);
    const pct = (n: number) => `${((100 * n) / rows.length).toFixed(1)} %`;
    console.log(
      `corpus: ${rows.length} files; delivered ${delivered.length} (${pct(delivered.length)}); ` +
        `PDFium alone opens ${opened.length} (${pct(opened.length)})`,
    );
    for (const r of rows.filter((x) => x.outcome !== 'delivered'))
      console.log(`  refused ${r.outcome}${r.pdfium ? ' (PDFium opens it)' : ''}: ${r.reason}`);

    // Nothing PDFium cannot open is delivered (the renderer is PDFium: it would fail later).
    for (const r of delivered) assert.ok(r.pdfium, `${r.file}: delivered though PDFium does not open it`);
    // Nothing PDFium opens is refused, unless a documented safety limit names it.
    for (const r of rows.filter((x) => x.pdfium && x.outcome !== 'delivered'))
      assert.ok(
        documentedLimits.has(r.outcome),
        `${r.file}: PDFium opens it, refused as ${r.outcome}: ${r.reason}`,
      );
    // The files of issue 21: a truncated file PDFium repairs, a page with no MediaBox (Letter, as
    // PDFium defaults it), a page tree that once ended in "Maximum call stack size exceeded".
    for (const f of ['scan-bad.pdf', 'operator_list_cycle.pdf', 'issue15590.pdf', 'issue21436.pdf'])
      assert.equal(rows.find((r) => r.file === f)?.outcome, 'delivered', f);
    assert.ok(delivered.length >= opened.length - 1, 'at most the one zero-area page file is refused');
  });
});
