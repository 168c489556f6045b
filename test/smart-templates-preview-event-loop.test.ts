// A fax or a preview with a Smart Template gets its cover filled in the PDF sandbox (a `fillTemplate`
// request), not on the calling process's event loop. The sandbox's request: the filled, flattened
// template with the total page count (documents + the template's own pages), and the caps and
// failure codes of a check, naming the template. Then a preview using a large valid form (1,200
// fields, about a second of pdf-lib work) while another account's requests are answered as usual: the
// service runs in this process, so its event loop is the one measured. Everything is compared with
// the preview's own duration, not with fixed times, so a loaded machine does not change the outcome:
// with the template filled in the API process (the code before this), pdf-lib held the loop for most
// of the preview, in pieces of up to a second.
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import { PDFDocument } from 'pdf-lib';
import { coverValues, type CoverContext } from '../src/documents/cover.ts';
import { Pdfium } from '../src/documents/render/engine.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { brokenForm, documentRefusal, manyFieldsPdf, sandboxes, watchEventLoop } from './support/forms.ts';
import { startService } from './support/harness.ts';
import { makePdf } from './support/pdf.ts';

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const cover: CoverContext = {
  timeZone: 'UTC',
  faxDefault: null,
  smartTemplate: null,
  faxNumber: '+15551234567',
  callerId: '+15550100001',
  options: { recipient_name: 'Dr. Ada Moreau', subject: 'Lab results' },
};
const values = coverValues(cover, new Date('2026-11-26T14:30:00Z'), 0);

const refusal = documentRefusal;

describe("the PDF sandbox's fillTemplate request", () => {
  const pool = sandboxes();

  it("fills and flattens the template, counting its pages in the fax's total", async () => {
    const p = pool({});
    // Two pages; one field of the first is named "Pages", one of the second "To".
    const tpl = manyFieldsPdf(2, 2, { p0f1: 'Pages', p1f0: 'To' });
    const filled = await p.fillTemplate(tpl, 'Smart Template "Two pages"', values, 5);
    assert.equal(filled.pages, 2);
    assert.deepEqual(filled.filled.sort(), ['Pages', 'To']);
    const doc = await PDFDocument.load(filled.pdf);
    assert.equal(doc.getPageCount(), 2);
    assert.equal(doc.getForm().getFields().length, 0, 'flattened: no fields left');
    const pdfium = await Pdfium.load();
    const shown = pdfium.open(filled.pdf);
    try {
      assert.match(shown.text(0), /\b7\b/, "the total pages: 5 of documents and the template's 2");
      assert.match(shown.text(1), /Dr\. Ada Moreau/);
    } finally {
      shown.close();
    }
    // The same process serves the next request.
    assert.equal((await p.check(manyFieldsPdf(3, 1), 'after.pdf')).pageCount, 3);
  });

  it('refuses a template it cannot read or fill with smart_template_broken, naming it', async () => {
    const p = pool({});
    for (const [tpl, why] of [
      [Buffer.from('%PDF-1.7 nothing'), /^Smart Template "Old": the PDF cannot be read \(/],
      [brokenForm('/T (subject) /Rect (x)'), /^Smart Template "Old": the form cannot be filled \(/],
    ] as const) {
      const err = await refusal(p.fillTemplate(tpl, 'Smart Template "Old"', values, 1));
      assert.equal(err.code, 'smart_template_broken');
      assert.match(err.message, why);
    }
  });

  it("stops a template that takes too long with the check's timeout code, naming it", async () => {
    const p = pool({ timeoutMs: 300 });
    const err = await refusal(p.fillTemplate(manyFieldsPdf(80, 40), 'Smart Template "Huge"', values, 1));
    assert.equal(err.code, 'pdf_check_timeout');
    assert.match(err.message, /^Smart Template "Huge": filling its form took longer than 0\.3 s/);
    // The killed process is replaced: the next request is served. By then the limit is one a busy
    // machine cannot reach (0.3 s is for the huge form: a fresh process's small one took longer
    // beside many other processes on two cores).
    p.limits.timeoutMs = 60_000;
    assert.equal((await p.fillTemplate(manyFieldsPdf(1, 1), 'next', values, 1)).pages, 1);
  });
});

describe('a preview with a large Smart Template and the API event loop', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let sender: string;
  let other: string;

  before(async () => {
    // Generous sandbox time: the form's seconds of work must not time out on a loaded machine (under
    // CI_LOAD=2 beside two other test files, 55 s was not enough); the case above tests the limit.
    // The test's own bound is raised to match (the runner's default is 180 s).
    s = await startService({ env: { PDF_CHECK_TIMEOUT_SECONDS: '150' } });
    sender = await tokenFor(s.url, (await seedAccount(s)).api_key);
    other = await tokenFor(s.url, (await seedAccount(s)).api_key);
  });
  after(async () => {
    await s.dropAll();
  });

  it(
    "answers another account's requests while a preview fills a form of 1,200 fields",
    { timeout: 360_000 },
    async (t) => {
      // 1,200 fields: each sandbox task stays under HEAVY_TASK_CPU_MS (1 s of CPU), so none is moved
      // to a low priority. At 3,200 fields (1.7 s of CPU to read) it was, and under CI_LOAD=2 (two nice-0
      // processes beside CI) a nice-19 process (the priority then) got so little CPU that the 60 s wait ran out (503).
      const pages = 30;
      const perPage = 40;
      const upload = await call(s.url, 'POST', '/v1/smart-templates', {
        token: sender,
        body: {
          name: 'Huge form',
          file_name: 'huge.pdf',
          file_data: manyFieldsPdf(pages, perPage, { p0f0: 'Pages' }).toString('base64'),
        },
      });
      assert.equal(upload.http, 200, JSON.stringify(upload.body).slice(0, 500));
      const smart_document_id = upload.body.data.id as string;
      const body = {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'letter.pdf', file_data: (await makePdf(2)).toString('base64') }],
        smart_document_id,
      };
      // Warm: the other account's request path (token, database) once before measuring.
      assert.equal((await call(s.url, 'GET', '/v1/numbers', { token: other })).http, 200);

      const loop = watchEventLoop();
      const latencies: number[] = [];
      let previewing = true;
      // The other account asks again as soon as it has its answer, for as long as the preview lasts.
      const probe = (async () => {
        while (previewing) {
          const t = performance.now();
          const r = await call(s.url, 'GET', '/v1/numbers', { token: other });
          latencies.push(performance.now() - t);
          assert.equal(r.http, 200);
        }
      })();
      const t0 = performance.now();
      const r = await call(s.url, 'POST', '/v1/faxes/preview', { token: sender, body });
      const previewMs = performance.now() - t0;
      const { stalledMs, longest } = loop.stop();
      previewing = false;
      await probe;

      assert.equal(r.http, 200, JSON.stringify(r.body).slice(0, 500));
      assert.equal(r.body.data.cover.source, 'smart_template');
      assert.equal(r.body.data.cover.smart_document_id, smart_document_id);
      assert.equal(r.body.data.cover.pages, pages, "the template's pages, counted by the sandbox");
      assert.equal(r.body.data.document_pages, 2);
      assert.equal(r.body.data.page_count, pages + 2);
      assert.equal(r.body.data.cover.values.total_pages, pages + 2);
      const worst = Math.max(...latencies);
      const figures =
        `preview ${Math.round(previewMs)} ms; event loop stalled ${Math.round(stalledMs)} ms in all ` +
        `(longest ${Math.round(longest)} ms); other account: ${latencies.length} requests, ` +
        `median ${Math.round(median(latencies))} ms, worst ${Math.round(worst)} ms`;
      t.diagnostic(figures);
      // Filling the form takes a while (else this test shows nothing) ...
      assert.ok(previewMs > 400, `the preview was too quick to show anything: ${figures}`);
      // ... during which the loop stays free: stalls add up to a small part of the preview's time, and
      // the other account is answered throughout.
      assert.ok(stalledMs < previewMs / 5, `the event loop was held during the preview: ${figures}`);
      assert.ok(worst < previewMs / 4, `one of the other account's requests waited: ${figures}`);
    },
  );
});
