// Hostile-tenant limits of rendering (issue 16, findings 1 and 5), against real render processes:
// a page's time limit, the fax's render time and TIFF size, the memory cap of a render process, a
// failed fax stopping its other tasks, and the fair share of the pool between accounts.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { afterEach, describe, it } from 'node:test';
import { DocumentError } from '../src/documents/errors.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import { renderFax } from '../src/documents/render/render.ts';
import { bombPdf, fillHeavyPdf, noisePdf } from './fixtures/hostile/build.ts';
import { alive, renderChildren, selfRss, waitFor } from './support/render-procs.ts';

const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));

/** The rejection of `p` (fails the test when `p` resolves). */
async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  assert.fail('expected the render to fail');
}

describe('render limits (hostile documents)', () => {
  // Each test closes its pool, so the render processes seen in /proc are that test's own.
  let open: RenderPool | null = null;
  const pool = (o: ConstructorParameters<typeof RenderPool>[0]) => (open = new RenderPool(o));
  afterEach(async () => {
    await open?.close();
    open = null;
  });

  it('stops a fill-heavy page at the per-page budget and kills its render process', async () => {
    const p = pool({ size: 1, pageTimeoutMs: 2_000 });
    const pdf = fillHeavyPdf();
    assert.ok(pdf.length < 14_000, `${pdf.length} bytes`);
    const started = Date.now();
    const fax = renderFax(p, [{ name: 'heavy.pdf', bytes: pdf, pages: 1 }], 'standard', undefined, {
      accountId: 'a',
    });
    fax.catch(() => undefined);
    const renderer = await waitFor(() => renderChildren()[0], 15_000);
    const err = await rejection(fax);
    const took = Date.now() - started;
    assert.ok(err instanceof DocumentError, String(err));
    assert.equal(err.code, 'render_timeout');
    assert.match(err.message, /^heavy\.pdf: page 1 took longer than 2 s/);
    // 2 s of CPU time (on a busy machine the wall time is longer, at most 8 s), not 30 s.
    assert.ok(took < 25_000, `stopped after ${took} ms (the page budget is 2 s)`);
    assert.ok(renderer, 'the page was rendered in a child process');
    assert.equal(await waitFor(() => !alive(renderer), 5_000), true, 'the render process was killed');
    // The pool keeps serving with a fresh process.
    const ok = await renderFax(
      p,
      [{ name: 'ok.pdf', bytes: fixture('letter-text-2p.pdf'), pages: 2 }],
      'low',
    );
    assert.equal(ok.pageCount, 2);
  });

  it('stops a fax whose pages compress badly at the TIFF size limit (default 64 MiB)', async () => {
    // Three processes: one account (this fax) may use all but one of them, so two run its tasks.
    const p = pool({ size: 3 });
    const pdf = noisePdf(100);
    assert.ok(pdf.length < 500_000, `${pdf.length} bytes`);
    const fax = renderFax(p, [{ name: 'noise.pdf', bytes: pdf, pages: 100 }], 'standard');
    fax.catch(() => undefined);
    const during = await waitFor(() => (renderChildren().length >= 2 ? renderChildren() : null), 15_000);
    const err = await rejection(fax);
    assert.ok(err instanceof DocumentError, String(err));
    assert.equal(err.code, 'fax_image_too_large');
    assert.match(err.message, /^noise\.pdf: the fax image grew past 67108864 bytes/);
    // Its tasks still running were stopped: their render processes are gone.
    assert.ok(during, 'two render processes');
    assert.equal(await waitFor(() => during.every((pid) => !alive(pid)), 5_000), true);
  });

  it('stops a fax that uses up its total render time', async () => {
    const p = pool({ size: 2, faxTimeoutMs: 300 });
    const a4 = fixture('a4-text-5p.pdf');
    const docs = Array.from({ length: 20 }, (_, i) => ({ name: `a4-${i}.pdf`, bytes: a4, pages: 5 }));
    const err = await rejection(renderFax(p, docs, 'hd'));
    assert.ok(err instanceof DocumentError, String(err));
    assert.equal(err.code, 'render_timeout');
    assert.match(err.message, /the fax took more than 0\.3 s of render \(CPU\) time in all/);
  });

  it('kills a render process that grows past its memory cap; the caller stays small', async () => {
    const p = pool({ size: 1, memoryMb: 200 });
    const pdf = bombPdf(400); // a content stream of 400 MiB from 400 KB
    const before = selfRss();
    const err = await rejection(renderFax(p, [{ name: 'big.pdf', bytes: pdf, pages: 1 }], 'standard'));
    const grew = selfRss() - before;
    assert.ok(err instanceof DocumentError, String(err));
    assert.equal(err.code, 'render_memory_exceeded');
    assert.match(err.message, /^big\.pdf: page 1: rendering needed more than 200 MB of memory/);
    assert.ok(grew < 64 * 1024 * 1024, `the calling process grew by ${Math.round(grew / 1e6)} MB`);
    const ok = await renderFax(
      p,
      [{ name: 'ok.pdf', bytes: fixture('letter-text-2p.pdf'), pages: 2 }],
      'low',
    );
    assert.equal(ok.pageCount, 2);
  });

  it('stops the other tasks of a fax as soon as one fails', async () => {
    // Three processes: one account (this fax) may use all but one of them, so both tasks run.
    const p = pool({ size: 3, pageTimeoutMs: 60_000 });
    const heavy = renderFax(
      p,
      [
        { name: 'heavy.pdf', bytes: fillHeavyPdf(), pages: 1 },
        { name: 'late.pdf', bytes: fixture('a4-text-5p.pdf').subarray(0, 3000), pages: 5 },
      ],
      'standard',
    );
    heavy.catch(() => undefined);
    const both = await waitFor(() => (renderChildren().length >= 2 ? renderChildren() : null), 15_000);
    assert.ok(both, 'two render processes');
    const err = await rejection(heavy);
    assert.ok(err instanceof DocumentError && err.code === 'pdf_broken', String(err));
    // The heavy page would run for tens of seconds: its process is killed instead.
    const stopped = await waitFor(() => both.filter(alive).length === 1, 5_000);
    assert.ok(stopped, 'the fill-heavy render process was killed');
  });

  it("serves another account's task after at most one task of an account with a long queue", async () => {
    for (const size of [1, 2]) {
      await open?.close();
      const p = pool({ size });
      const pdf = fixture('a4-text-5p.pdf');
      const task = { kind: 'fax-pages' as const, pdf, first: 0, count: 5, quality: 'standard' as const };
      const order: string[] = [];
      const runs: Promise<unknown>[] = [];
      for (let i = 0; i < 4 * size; i++)
        runs.push(p.run(task, { accountId: 'bulk', timeoutMs: 60_000 }).then(() => order.push(`bulk${i}`)));
      runs.push(
        p
          .run({ ...task, count: 1 }, { accountId: 'small', timeoutMs: 60_000 })
          .then(() => order.push('small')),
      );
      await Promise.all(runs);
      // The bulk account's running tasks (one per process) may finish first, and then one more at
      // most (finishing while the small task renders); never the whole queue.
      assert.ok(order.indexOf('small') <= size + 1, `size ${size}: ${order.join(' ')}`);
    }
  });
});
