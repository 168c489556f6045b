// The PDF sandbox itself: real child processes, real limits. A killed check fails that file only and
// the pool serves the next file with a fresh process.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { inflateSync } from 'node:zlib';
import { PdfSandbox, defaultSandboxLimits } from '../src/documents/check.ts';
import { DocumentError } from '../src/documents/errors.ts';
import { bombPdf, manyPagesPdf, objectFloodPdf, zlibBomb } from './fixtures/hostile/build.ts';
import { makePdf } from './support/pdf.ts';
import { childrenRunning, cpuTicks, waitFor } from './support/render-procs.ts';

const pools: PdfSandbox[] = [];
after(async () => {
  await Promise.all(pools.map((p) => p.close()));
});
function pool(over: Partial<typeof defaultSandboxLimits>): PdfSandbox {
  const p = new PdfSandbox({ ...defaultSandboxLimits, concurrency: 1, ...over });
  pools.push(p);
  return p;
}

let defaults: PdfSandbox | undefined;
const shared = () => (defaults ??= pool({}));

async function code(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => assert.fail('the check passed'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof DocumentError, String(err));
  return err.code;
}

describe('PDF sandbox', () => {
  it('the bomb builder makes real zlib data of the stated size', () => {
    const z = zlibBomb(3);
    assert.ok(z.length < 4 * 1024, `${z.length} bytes`);
    assert.equal(inflateSync(z).length, 3 * 1024 * 1024, 'inflates, checksum included');
  });

  it('reports pages and their sizes for a good file', async () => {
    const info = await shared().check(await makePdf(2, [842, 595]), 'a4-landscape.pdf');
    assert.equal(info.pageCount, 2);
    assert.deepEqual(info.pages[0], { width: 842, height: 595 });
  });

  it('refuses a 4 GiB decompression bomb at the default limits, quickly', async () => {
    const t = Date.now();
    assert.equal(await code(shared().check(bombPdf(4096), 'bomb.pdf')), 'pdf_decompression_bomb');
    // Well before 4 GiB are inflated; generous, because CI runs this beside other lanes (25 s there
    // at a load of 12 on two cores, against a few seconds alone).
    assert.ok(Date.now() - t < 45_000, `took ${Date.now() - t} ms`);
  });

  it('kills a check past its time limit and serves the next file', async () => {
    // 60,000 pages take far longer than 100 ms to walk even on a quiet machine; a warmed-up child
    // checks a one-page file in a few milliseconds. The limit is wall time from the moment the file
    // is handed over, so only the slow file runs under 100 ms: the fresh processes' first checks
    // (before and after) run under a limit a busy machine cannot reach (beside the other lanes of
    // CI a fresh process's first one-page check took longer than 100 ms: stop 37's CI).
    // No page limit here, or a fast machine would refuse the file for its page count first.
    const p = pool({ timeoutMs: 60_000, maxPages: 10_000_000 });
    await p.check(await makePdf(1), 'warm.pdf'); // start-up time is not the file's
    p.limits.timeoutMs = 100;
    const t = Date.now();
    const err = await p.check(manyPagesPdf(60_000), 'slow.pdf').then(
      () => assert.fail('the check passed'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof DocumentError, String(err));
    assert.equal(err.code, 'pdf_check_timeout');
    assert.match(err.message, /^slow\.pdf: checking the PDF took longer than 0\.1 s/);
    // On a busy machine (CI beside other lanes: 3.5 s) it takes longer in wall time, still far from
    // what walking 60,000 pages takes.
    assert.ok(Date.now() - t < 10_000, `took ${Date.now() - t} ms`);
    // The killed process is replaced: the next file is served.
    p.limits.timeoutMs = 60_000;
    assert.equal((await p.check(await makePdf(1), 'next.pdf')).pageCount, 1);
  });

  it('kills a check past its memory limit and serves the next file', async () => {
    const p = pool({ memoryMb: 160 });
    assert.equal(await code(p.check(objectFloodPdf(3_000_000), 'flood.pdf')), 'pdf_check_memory');
    assert.equal((await p.check(await makePdf(1), 'next.pdf')).pageCount, 1);
  });

  it('runs checks side by side up to its concurrency, and an abort is not the file’s fault', async () => {
    const p = pool({ concurrency: 2 });
    const pdf = await makePdf(1);
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => p.check(pdf, `${i}.pdf`)));
    assert.ok(results.every((r) => r.pageCount === 1));
    const ac = new AbortController();
    // Abort while the sandbox works on it: once one of the (idle) sandbox processes uses CPU again.
    const sandboxes = childrenRunning('sandbox/child.ts');
    assert.ok(sandboxes.length > 0, 'the sandbox processes of the checks above are still there');
    const ticks = new Map(sandboxes.map((pid) => [pid, cpuTicks(pid)]));
    const slow = p.check(manyPagesPdf(20_000), 'slow.pdf', ac.signal);
    const working = await waitFor(() => sandboxes.some((pid) => cpuTicks(pid) > ticks.get(pid)!), 10_000);
    assert.ok(working, 'a sandbox process took up the slow check');
    ac.abort(new Error('shutdown'));
    await assert.rejects(
      slow,
      (e: unknown) => !(e instanceof DocumentError) && (e as Error).message === 'shutdown',
    );
    assert.equal((await p.check(pdf, 'after.pdf')).pageCount, 1);
  });

  it('a check cut short by close() fails with a plain error, never blamed on the file; later checks are refused', async () => {
    const p = pool({});
    const pdf = await makePdf(1);
    await p.check(pdf, 'warm.pdf');
    const sandboxes = childrenRunning('sandbox/child.ts');
    const ticks = new Map(sandboxes.map((pid) => [pid, cpuTicks(pid)]));
    const slow = p.check(manyPagesPdf(20_000), 'slow.pdf');
    const working = await waitFor(() => sandboxes.some((pid) => cpuTicks(pid) > ticks.get(pid)!), 10_000);
    assert.ok(working, 'a sandbox process took up the slow check');
    await p.close();
    await assert.rejects(
      slow,
      (e: unknown) =>
        !(e instanceof DocumentError) &&
        (e as Error).message === 'the PDF sandbox was closed during the check',
    );
    // Closed for good (the owner's stop): a later check is refused, plainly, and starts no process.
    const existing = new Set(childrenRunning('sandbox/child.ts'));
    await assert.rejects(
      p.check(pdf, 'after.pdf'),
      (e: unknown) => !(e instanceof DocumentError) && (e as Error).message === 'the PDF sandbox is closed',
    );
    assert.deepEqual(
      childrenRunning('sandbox/child.ts').filter((pid) => !existing.has(pid)),
      [],
    );
  });
});
