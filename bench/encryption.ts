// Encryption at rest benchmark (not a test): what sealing costs the send path, with encryption on
// against off in the same run, on the real PostgreSQL. Each fax goes through every storage step of the
// send path that encryption touches, as the service runs them:
//   intake   insertJob with its document (the API's transaction; sealed: one data-key lookup + seal)
//   prepare  the send worker reads the document (PgDocumentStore.get) and stores the image (saveRender)
//   call     the line caller reads the image (getRender)
//   download GET /v1/faxes/{id}/image's reads: renderSize, then readRenderRange a MiB at a time
// Rendering, the PDF check and the call itself are the same with and without encryption and are left
// out (their cost: bench:render, bench:lines). Document: a PAGES-page PDF from the render corpus; image:
// that PDF rendered once at standard quality. The two variants alternate round after round, so the
// load of the shared machine falls on both alike. CPU is this process's (seal/open run here);
// PostgreSQL's CPU is not counted (the sealed values are 16 bytes per 64 KiB larger).
// Writes bench/results/encryption-<time>.json and .md.
//
//   npm run bench:encryption          (FAXES=40 ROUNDS=4 PAGES=10 by default)
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import pg from 'pg';
import { KeyRing, installEncryption, parseKeks } from '../src/db/encryption.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import { renderFax } from '../src/documents/render/render.ts';
import { getRender, readRenderRange, renderSize, saveRender } from '../src/documents/render/store.ts';
import { PgDocumentStore } from '../src/documents/store.ts';
import { insertJob } from '../src/jobs/repo.ts';
import { jobFixture } from '../test/support/jobs.ts';
import { createDatabase } from '../test/support/harness.ts';
import { buildCorpus, FIXTURES } from './render-corpus.ts';

const FAXES = Number(process.env.FAXES ?? 40);
const ROUNDS = Number(process.env.ROUNDS ?? 4);
const PAGES = Number(process.env.PAGES ?? 10);
const steps = ['intake', 'prepare', 'call', 'download'] as const;
type Step = (typeof steps)[number];
const round = (n: number, d = 2) => Math.round(n * 10 ** d) / 10 ** d;

const pdf = Buffer.from(await buildCorpus(PAGES));
const renderPool = new RenderPool({ size: 1, recycleAfterTasks: 1_000_000, faxTimeoutMs: 3_600_000 });
const fax = await renderFax(
  renderPool,
  [{ name: 'corpus.pdf', bytes: pdf, pages: PAGES }],
  'standard',
).finally(() => renderPool.close());
const tiff = fax.tiff;
const ring = new KeyRing(parseKeks(randomBytes(32).toString('base64'), 'bench'));

const db = await createDatabase({ migrated: true });
const pool = new pg.Pool({ connectionString: db.url, max: 4 });
type Totals = Record<Step, { wallMs: number; cpuMs: number }>;
const zero = (): Totals => Object.fromEntries(steps.map((s) => [s, { wallMs: 0, cpuMs: 0 }])) as Totals;
const acc = { on: zero(), off: zero() };
let faxes = { on: 0, off: 0 };

async function timed(t: Totals, step: Step, fn: () => Promise<unknown>): Promise<void> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  t[step].wallMs += performance.now() - t0;
  const c = process.cpuUsage(cpu0);
  t[step].cpuMs += (c.user + c.system) / 1000;
}

async function oneFax(accountId: string, t: Totals): Promise<void> {
  const job = jobFixture(accountId);
  await timed(t, 'intake', async () => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await insertJob(c, job, [{ fileName: 'corpus.pdf', fileUrl: null, content: pdf }]);
      await c.query('COMMIT');
    } finally {
      c.release();
    }
  });
  const store = new PgDocumentStore(pool);
  await timed(t, 'prepare', async () => {
    const docs = await store.get(job.id);
    if (docs[0]!.content!.length !== pdf.length) throw new Error('document changed');
    await saveRender(pool, accountId, {
      jobId: job.id,
      quality: 'standard',
      pageCount: fax.pageCount,
      pageBytes: fax.pageBytes,
      cover: null,
      tiff,
    });
  });
  await timed(t, 'call', async () => {
    if ((await getRender(pool, job.id))!.tiff.length !== tiff.length) throw new Error('image changed');
  });
  await timed(t, 'download', async () => {
    const size = (await renderSize(pool, job.id))!;
    let n = 0;
    for (let o = 0; o < size; o += 1 << 20)
      n += (await readRenderRange(pool, job.id, o, Math.min(1 << 20, size - o)))!.length;
    if (n !== tiff.length) throw new Error('download changed');
  });
}

try {
  const accounts = (
    await pool.query<{ id: string }>(
      `INSERT INTO accounts (name) SELECT 'bench ' || g FROM generate_series(1, 2) g RETURNING id`,
    )
  ).rows.map((r) => r.id);
  // Warm-up: both variants once (data key made and unwrapped, statements planned).
  for (const mode of ['on', 'off'] as const) {
    installEncryption(mode === 'on' ? ring : null);
    await oneFax(accounts[mode === 'on' ? 0 : 1]!, zero());
  }
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const);
    for (const mode of order) {
      installEncryption(mode === 'on' ? ring : null);
      for (let i = 0; i < FAXES; i++) await oneFax(accounts[mode === 'on' ? 0 : 1]!, acc[mode]);
      faxes = { ...faxes, [mode]: faxes[mode] + FAXES };
    }
    console.error(`round ${r + 1}/${ROUNDS} done`);
  }
} finally {
  installEncryption(null);
  await pool.end();
  await db.drop();
}

const per = (mode: 'on' | 'off', step: Step) => ({
  wallMs: round(acc[mode][step].wallMs / faxes[mode]),
  cpuMs: round(acc[mode][step].cpuMs / faxes[mode]),
});
const results = steps.map((step) => {
  const off = per('off', step);
  const on = per('on', step);
  return {
    step,
    off,
    on,
    extraCpuMs: round(on.cpuMs - off.cpuMs),
    extraWallMs: round(on.wallMs - off.wallMs),
  };
});
const total = (mode: 'on' | 'off') => ({
  wallMs: round(steps.reduce((n, s) => n + per(mode, s).wallMs, 0)),
  cpuMs: round(steps.reduce((n, s) => n + per(mode, s).cpuMs, 0)),
});
const totals = { off: total('off'), on: total('on') };

const at = new Date().toISOString();
const stamp = at.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
const meta = {
  at,
  machine: `${cpus().length} × ${cpus()[0]?.model.trim() ?? 'CPU'}`,
  node: process.version,
  faxes: FAXES,
  rounds: ROUNDS,
  pages: PAGES,
  documentBytes: pdf.length,
  imageBytes: tiff.length,
  corpus: FIXTURES,
};
writeFileSync(
  new URL(`./results/encryption-${stamp}.json`, import.meta.url),
  JSON.stringify({ ...meta, results, totals }, null, 2) + '\n',
);
const md = [
  '# Encryption at rest benchmark',
  '',
  `${at}, ${meta.machine}, Node ${meta.node} (\`npm run bench:encryption\`). ${FAXES} faxes per variant and round, ` +
    `${ROUNDS} rounds alternating on and off; document ${pdf.length} bytes (${PAGES} pages of ${FIXTURES.join(', ')}), ` +
    `image ${tiff.length} bytes (standard quality). Per fax; CPU is this process's (sealing and opening run here).`,
  '',
  '| step | CPU ms off | CPU ms on | extra CPU ms | wall ms off | wall ms on | extra wall ms |',
  '|---|---|---|---|---|---|---|',
  ...results.map(
    (r) =>
      `| ${r.step} | ${r.off.cpuMs} | ${r.on.cpuMs} | ${r.extraCpuMs} | ${r.off.wallMs} | ${r.on.wallMs} | ${r.extraWallMs} |`,
  ),
  `| **all** | ${totals.off.cpuMs} | ${totals.on.cpuMs} | ${round(totals.on.cpuMs - totals.off.cpuMs)} | ${totals.off.wallMs} | ${totals.on.wallMs} | ${round(totals.on.wallMs - totals.off.wallMs)} |`,
  '',
].join('\n');
writeFileSync(new URL(`./results/encryption-${stamp}.md`, import.meta.url), md);
console.log(md);
