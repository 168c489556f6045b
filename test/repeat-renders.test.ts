// Repeated documents (issue 33, docs/documents-rendering.md "Repeated documents"), against the real
// PostgreSQL and RabbitMQ on the simulated line: an account's send of documents it sent before reads
// their pages as rendered then instead of checking and rendering them again (the metric
// faxline_repeat_renders_total counts both), and each fax still gets its own cover. The pages are the
// same as a fresh render's, another account never reads them, a header line renders each fax its own,
// and deleting the content of the fax they were rendered for deletes them too.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { parseExposition, sumOf } from '../src/metrics/exposition.ts';
import { getRender } from '../src/documents/render/store.ts';
import { readTiffPages } from '../src/documents/render/tiff-read.ts';
import { twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { eventually } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

describe('repeated documents', () => {
  let t: TwoAccounts;
  before(async () => {
    t = await twoAccounts({ SIM_SPEEDUP: '1000', LINES: '16', LINE_POLL_MS: '50' }, { cover: true });
  });
  after(async () => {
    await t?.close();
  });

  const counts = async () => {
    const m = parseExposition(await (await fetch(`${t.s.url}/metrics`)).text());
    const n = (outcome: string) => sumOf(m, 'faxline_repeat_renders_total', { outcome });
    return { rendered: n('rendered'), reused: n('reused'), own_header: n('own_header') };
  };
  const since = async (before: Awaited<ReturnType<typeof counts>>) => {
    const now = await counts();
    return {
      rendered: now.rendered - before.rendered,
      reused: now.reused - before.reused,
      own_header: now.own_header - before.own_header,
    };
  };
  /** Sends and waits until delivered; returns the job id. */
  const send = async (token: string, file_data: string, extra: Record<string, unknown> = {}) => {
    const r = await t.api('POST', '/v1/faxes/send', token, {
      fax_number: '+15557654321',
      fax_data: [{ file_name: 'form.pdf', file_data }],
      ...extra,
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const id = r.body.data.job_id as string;
    const job = await eventually(async () => {
      const g = await t.api('GET', `/v1/faxes/${id}`, token);
      return ['delivered', 'failed', 'unknown'].includes(g.body.data?.state) ? g.body.data : null;
    }, 60_000);
    assert.equal(job.state, 'delivered', `${id}: ${JSON.stringify(job.failure)}`);
    return id;
  };
  /** The fax's pages as sent: each page's T.6 strip and size, the cover first. */
  const pagesOf = async (jobId: string) => {
    const r = await getRender(t.owner, jobId);
    assert.ok(r, `${jobId} has its image`);
    return (await readTiffPages(r.tiff)).map((p) => ({
      w: p.width,
      h: p.height,
      data: Buffer.from(p.data).toString('base64'),
    }));
  };
  const contentRows = async (accountId: string) =>
    (
      await t.owner.query<{ job_id: string; quality: string }>(
        'SELECT job_id, quality FROM document_renders WHERE account_id = $1 AND content_key IS NOT NULL ORDER BY created_at',
        [accountId],
      )
    ).rows;

  it('renders an account’s document once per quality; its next send reuses the pages, with its own cover', async () => {
    const pdf = await makePdfBase64(2, randomUUID());
    const c0 = await counts();
    const first = await send(t.tokenA, pdf, { recipient_name: 'First pharmacy' });
    assert.deepEqual(await since(c0), { rendered: 1, reused: 0, own_header: 0 });
    const c1 = await counts();
    const second = await send(t.tokenA, pdf, { recipient_name: 'Second pharmacy' });
    assert.deepEqual(await since(c1), { rendered: 0, reused: 1, own_header: 0 }, 'the second send reuses');
    assert.deepEqual(
      (await contentRows(t.a.account_id)).map((r) => r.job_id),
      [first],
      'the pages are kept once, under the fax they were rendered for',
    );

    const [p1, p2] = [await pagesOf(first), await pagesOf(second)];
    assert.equal(p1.length, 3, 'cover and two pages');
    assert.equal(p2.length, 3);
    assert.deepEqual(p2.slice(1), p1.slice(1), 'the same document pages');
    assert.notDeepEqual(p2[0], p1[0], 'each fax has its own cover (its own recipient name)');
    const cover = (await getRender(t.owner, second))!.cover!;
    assert.equal(cover.to_name, 'Second pharmacy');
    assert.equal(cover.total_pages, 3);

    // Another quality is another render.
    const c2 = await counts();
    await send(t.tokenA, pdf, { fax_quality: 'hd' });
    assert.deepEqual(await since(c2), { rendered: 1, reused: 0, own_header: 0 });
  });

  it('finds the pages by the documents’ digests: a repeated send never reads their bytes', async () => {
    const pdf = await makePdfBase64(1, randomUUID());
    const first = await send(t.tokenA, pdf);
    // The same bytes again, scheduled a little ahead: before it is prepared, its stored document is
    // made unreadable (not a PDF). Prepared from its digest, it is sent with the first's pages.
    const r = await t.api('POST', '/v1/faxes/send', t.tokenA, {
      fax_number: '+15557654321',
      fax_data: [{ file_name: 'form.pdf', file_data: pdf }],
      scheduled_date: new Date(Date.now() + 5_000).toISOString(),
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const id = r.body.data.job_id as string;
    // Spoilt only while the job still waits for its time (so before any worker could read it): a
    // machine too slow for that fails here rather than passing without showing anything.
    const spoilt = await t.owner.query(
      `UPDATE fax_documents SET content = '\\x00'::bytea
        WHERE job_id = $1 AND content_digest IS NOT NULL
          AND EXISTS (SELECT 1 FROM fax_jobs WHERE id = $1 AND state = 'scheduled')`,
      [id],
    );
    assert.equal(spoilt.rowCount, 1, 'the document was stored with its digest, and spoilt before its time');
    const c0 = await counts();
    const job = await eventually(async () => {
      const g = await t.api('GET', `/v1/faxes/${id}`, t.tokenA);
      return ['delivered', 'failed', 'unknown'].includes(g.body.data?.state) ? g.body.data : null;
    }, 60_000);
    assert.equal(job.state, 'delivered', JSON.stringify(job.failure));
    assert.deepEqual(await since(c0), { rendered: 0, reused: 1, own_header: 0 });
    assert.deepEqual((await pagesOf(id)).slice(1), (await pagesOf(first)).slice(1));
  });

  it('never reads another account’s pages: the same bytes from B are rendered for B, to the same image', async () => {
    const pdf = await makePdfBase64(1, randomUUID());
    const a = await send(t.tokenA, pdf);
    const c0 = await counts();
    const b = await send(t.tokenB, pdf);
    assert.deepEqual(await since(c0), { rendered: 1, reused: 0, own_header: 0 }, 'B renders its own');
    assert.equal((await contentRows(t.b.account_id)).filter((r) => r.job_id === b).length, 1);
    // A fresh render and the one A's sends reuse are the same pages: reuse changes no pixel.
    assert.deepEqual((await pagesOf(b)).slice(1), (await pagesOf(a)).slice(1));
  });

  it('sends of the same new document at once render it once', async () => {
    const pdf = await makePdfBase64(3, randomUUID());
    const c0 = await counts();
    await Promise.all(Array.from({ length: 5 }, () => send(t.tokenA, pdf)));
    assert.deepEqual(await since(c0), { rendered: 1, reused: 4, own_header: 0 });
  });

  it('deleting the content of the fax the pages were rendered for deletes them: the next send renders', async () => {
    // A document of its own (randomUUID in its text): one made in the same second as another
    // case's would be the same bytes, and its pages would come from that case's fax.
    const pdf = await makePdfBase64(1, randomUUID());
    const first = await send(t.tokenA, pdf);
    const second = await send(t.tokenA, pdf);
    assert.ok((await contentRows(t.a.account_id)).some((r) => r.job_id === first));
    const del = await t.api('DELETE', `/v1/faxes/${first}/content`, t.tokenA);
    assert.equal(del.http, 200, JSON.stringify(del.body));
    assert.ok(!(await contentRows(t.a.account_id)).some((r) => r.job_id === first), 'the kept pages went');
    const c0 = await counts();
    const third = await send(t.tokenA, pdf);
    assert.deepEqual(await since(c0), { rendered: 1, reused: 0, own_header: 0 });
    assert.deepEqual((await pagesOf(third)).slice(1), (await pagesOf(second)).slice(1));
  });

  it('with a header line, renders each fax its own pages (they carry its own values)', async () => {
    await t.owner.query(
      `UPDATE fax_defaults SET header_line = 'To {to_number}  page {page} of {pages}' WHERE account_id = $1`,
      [t.b.account_id],
    );
    try {
      const pdf = await makePdfBase64(1, randomUUID());
      const c0 = await counts();
      const one = await send(t.tokenB, pdf, { fax_number: '+15557654301' });
      const two = await send(t.tokenB, pdf, { fax_number: '+15557654302' });
      assert.deepEqual(await since(c0), { rendered: 0, reused: 0, own_header: 2 });
      assert.ok(!(await contentRows(t.b.account_id)).some((r) => r.job_id === one || r.job_id === two));
      assert.notDeepEqual(
        (await pagesOf(one)).slice(1),
        (await pagesOf(two)).slice(1),
        'each its own header',
      );
    } finally {
      await t.owner.query('UPDATE fax_defaults SET header_line = NULL WHERE account_id = $1', [
        t.b.account_id,
      ]);
    }
  });
});
