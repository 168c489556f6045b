// Smart Template forms for tests, and a meter of the event loop's stalls while something runs.
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { after } from 'node:test';
import { PdfSandbox, defaultSandboxLimits } from '../../src/documents/check.ts';
import { DocumentError } from '../../src/documents/errors.ts';
import { assemblePdf } from '../fixtures/hostile/build.ts';

/** The DocumentError `p` rejects with (fails the test when it resolves or rejects otherwise). */
export async function documentRefusal(p: Promise<unknown>): Promise<DocumentError> {
  const err = await p.then(
    () => assert.fail('expected a refusal'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof DocumentError, String(err));
  return err;
}

/** Inside a describe: makes one-process sandboxes with the given limits, all closed after the suite. */
export function sandboxes(): (over: Partial<typeof defaultSandboxLimits>) => PdfSandbox {
  const made: PdfSandbox[] = [];
  after(async () => {
    await Promise.all(made.map((p) => p.close()));
  });
  return (over) => {
    const p = new PdfSandbox({ ...defaultSandboxLimits, concurrency: 1, ...over });
    made.push(p);
    return p;
  };
}

/**
 * A valid form of `pages` pages with `perPage` text fields each (widgets merged with their fields),
 * written object by object: milliseconds to build, seconds for pdf-lib to load, list and fill. Field
 * `p<page>f<index>` is named `rename[that]` when given.
 */
export function manyFieldsPdf(pages: number, perPage: number, rename: Record<string, string> = {}): Buffer {
  const pageRefs: string[] = [];
  const fieldRefs: string[] = [];
  const body: string[] = [];
  let n = 4; // 1 catalog, 2 page tree, 3 font
  for (let p = 0; p < pages; p++) {
    const pageNo = n++;
    pageRefs.push(`${pageNo} 0 R`);
    const annots: string[] = [];
    const fields: string[] = [];
    for (let i = 0; i < perPage; i++) {
      annots.push(`${n++} 0 R`);
      const x = 40 + (i % 4) * 140;
      const y = 740 - Math.floor(i / 4) * 20;
      fields.push(
        `<< /Type /Annot /Subtype /Widget /FT /Tx /T (${rename[`p${p}f${i}`] ?? `p${p}f${i}`}) /Rect [${x} ${y} ${x + 130} ${y + 16}] ` +
          `/P ${pageNo} 0 R /F 4 /DA (/Helv 10 Tf 0 g) /TU (Field ${i + 1} of page ${p + 1}) >>`,
      );
    }
    fieldRefs.push(...annots);
    body.push(
      `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Annots [${annots.join(' ')}] >>`,
      ...fields,
    );
  }
  return assemblePdf([
    `<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [${fieldRefs.join(' ')}] ` +
      '/DR << /Font << /Helv 3 0 R >> >> /DA (/Helv 0 Tf 0 g) >> >>',
    `<< /Type /Pages /Kids [${pageRefs.join(' ')}] /Count ${pages} >>`,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>',
    ...body,
  ]);
}

/** A one-page form whose one text field has `entries` (a name and a rectangle, broken or not). */
export const brokenForm = (entries: string) =>
  assemblePdf([
    '<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [4 0 R] >> >>',
    '<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
    '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Annots [4 0 R] >>',
    `<< /Type /Annot /Subtype /Widget /FT /Tx ${entries} /P 3 0 R >>`,
  ]);

/**
 * The loop's stalls from now until `stop()`: a 10 ms timer that fires late by more than 50 ms means
 * the loop was held (by one piece of work, or a machine too busy to run this process); their lengths
 * add up to `stalledMs`, `longest` is the longest gap between two ticks.
 */
export function watchEventLoop(): { stop(): { stalledMs: number; longest: number } } {
  const TICK_MS = 10;
  const STALL_MS = 50;
  let stalledMs = 0;
  let longest = 0;
  let last = performance.now();
  const ticker = setInterval(() => {
    const now = performance.now();
    const gap = now - last;
    last = now;
    longest = Math.max(longest, gap);
    if (gap > STALL_MS) stalledMs += gap - TICK_MS;
  }, TICK_MS);
  return {
    stop() {
      clearInterval(ticker);
      return { stalledMs, longest };
    },
  };
}
