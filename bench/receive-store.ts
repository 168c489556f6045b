// Benchmark: the storage side of receiving (issue 20), without SIP: CPU per received page of
// complete() (reading the TIFF, wrapping it as PDF, the one-statement store with its event) on a
// real PostgreSQL, for genuine receptions made by the SpanDSP loopback, next to the loopback's own
// CPU per received page (the T.30 receiver's share is about half of an exchange).
// Run: node bench/receive-store.ts   → bench/results/receive-store.json
import { mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { migrate } from '../src/db/migrate.ts';
import { createLogger } from '../src/log.ts';
import { buildRecord, PgReceivedFaxSink } from '../src/receive/sink.ts';
import { loadFaxloop } from '../src/transmission/spandsp/addon.ts';
import { makeFaxTiff } from '../test/support/faxtiff.ts';
import { createDatabase } from '../test/support/harness.ts';

const addon = loadFaxloop();
if (!addon) {
  console.error('needs the SpanDSP addon: npm run build:native');
  process.exit(1);
}
const PAGES = 10;
const RUNS = Number(process.env.RUNS ?? 20);
const db = await createDatabase();
const pool = new pg.Pool({ connectionString: db.url, max: 4 });
try {
  await migrate(pool);
  const acc = await pool.query<{ id: string }>(`INSERT INTO accounts (name) VALUES ('bench') RETURNING id`);
  const accountId = acc.rows[0]!.id;
  const sink = new PgReceivedFaxSink({ db: pool, log: createLogger('silent') });
  const dir = mkdtempSync(join(tmpdir(), 'faxline-bench-rx-'));
  const results: Record<string, unknown>[] = [];
  for (const quality of ['standard', 'hd'] as const) {
    const tx = makeFaxTiff(PAGES, quality);
    const rx = join(dir, `rx-${quality}.tif`);
    const c0 = process.cpuUsage();
    const r = await addon.run({ txFile: tx, rxFile: rx, t38: true, ecm: true });
    const ex = process.cpuUsage(c0);
    if (!r.ok || r.pagesReceived !== PAGES) throw new Error(`reception failed: ${r.receiverText}`);
    const result = {
      ok: true,
      code: 0,
      text: 'OK',
      pages: PAGES,
      bitRate: r.bitRate,
      ecm: r.ecm,
      remoteIdent: 'bench',
      transport: 't38' as const,
      durationMs: r.lineTimeMs,
    };
    // Wrapping alone (TIFF read + PDF), then the whole complete() with begin() and the database;
    // one untimed round of each first (JIT warm-up).
    await buildRecord(result, rx, 1 << 30);
    const warm = await sink.begin({
      accountId,
      numberId: null,
      to: '+15550000000',
      from: null,
      stationId: 'x',
      callId: null,
    });
    await warm.complete(result, rx);
    const w0 = process.cpuUsage();
    const wt = performance.now();
    let pdfBytes = 0;
    for (let i = 0; i < RUNS; i++) pdfBytes = (await buildRecord(result, rx, 1 << 30)).pdf!.length;
    const wrap = process.cpuUsage(w0);
    const wrapWall = performance.now() - wt;
    const s0 = process.cpuUsage();
    const st = performance.now();
    for (let i = 0; i < RUNS; i++) {
      const rec = await sink.begin({
        accountId,
        numberId: null,
        to: '+15550000000',
        from: null,
        stationId: 'x',
        callId: null,
      });
      await rec.complete(result, rx);
    }
    const store = process.cpuUsage(s0);
    const storeWall = performance.now() - st;
    const cpuS = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1e6;
    const pages = RUNS * PAGES;
    results.push({
      quality,
      tiff_bytes_per_page: Math.round(statSync(rx).size / PAGES),
      pdf_bytes_per_page: Math.round(pdfBytes / PAGES),
      wrap_pages_per_cpu_second: Math.round(pages / cpuS(wrap)),
      wrap_ms_per_page_wall: +(wrapWall / pages).toFixed(3),
      store_pages_per_cpu_second: Math.round(pages / cpuS(store)),
      store_ms_per_page_wall: +(storeWall / pages).toFixed(3),
      loopback_exchange_cpu_s_per_page: +(cpuS(ex) / PAGES).toFixed(4),
    });
  }
  const out = { date: new Date().toISOString(), runs: RUNS, pages_per_fax: PAGES, results };
  writeFileSync(
    new URL('./results/receive-store.json', import.meta.url),
    JSON.stringify(out, null, 2) + '\n',
  );
  console.table(results);
} finally {
  await pool.end();
  await db.drop();
}
