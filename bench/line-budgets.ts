// Measures each page of the line-time corpus (test/fixtures/line-corpus/) at `low` and `standard`
// through the render processes, and writes the budgets test/render-line.test.ts holds the pages to:
// the measured compressed size plus 5 % (at least 64 bytes). Run it after a deliberate change of the
// rendering, and say in the commit why the pages grew or shrank.
//
//   node bench/line-budgets.ts
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { RenderPool } from '../src/documents/render/pool.ts';
import type { Quality } from '../src/documents/render/raster.ts';
import { renderFax } from '../src/documents/render/render.ts';

const CORPUS = new URL('../test/fixtures/line-corpus/', import.meta.url);
export const BUDGET_QUALITIES: Quality[] = ['low', 'standard'];

/** Compressed bytes of each page of each corpus document, at each quality. */
export async function measureCorpus(pool: RenderPool): Promise<Record<string, Record<string, number[]>>> {
  const out: Record<string, Record<string, number[]>> = {};
  const names = readdirSync(CORPUS)
    .filter((f) => f.endsWith('.pdf'))
    .sort();
  for (const q of BUDGET_QUALITIES) {
    out[q] = {};
    for (const name of names) {
      const bytes = readFileSync(new URL(name, CORPUS));
      const pages = (await pool.run({ kind: 'page-image', pdf: bytes, page: 0, quality: 'low' })).pageCount;
      out[q][name] = (await renderFax(pool, [{ name, bytes, pages }], q)).pageBytes;
    }
  }
  return out;
}

if (import.meta.main) {
  const pool = new RenderPool(1);
  try {
    const measured = await measureCorpus(pool);
    const budgets = Object.fromEntries(
      Object.entries(measured).map(([q, docs]) => [
        q,
        Object.fromEntries(
          Object.entries(docs).map(([d, pages]) => [
            d,
            pages.map((b) => Math.max(b + 64, Math.ceil(b * 1.05))),
          ]),
        ),
      ]),
    );
    writeFileSync(new URL('budgets.json', CORPUS), JSON.stringify(budgets, null, 2) + '\n');
    console.log(JSON.stringify(measured));
  } finally {
    await pool.close();
  }
}
