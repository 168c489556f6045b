// Measurement: what an over-long page and very many pages cost the receiving side (issue 20, "bad
// input"). The answering side (test/support/telephony/receive-sip-child.ts: SipLine.answer with
// src/receive/) runs in a child process whose RSS is sampled from /proc every 100 ms; faxline's own
// SIP line sends to it over T.38 from this process. Each scenario runs with the limits off
// (MAX_PAGE_MM=0, MAX_PAGES=0: the behaviour before INBOUND_MAX_PAGE_MM / INBOUND_MAX_PAGES) and
// with the defaults, and reports the stored row and the receiver's RSS before and at its peak.
// Run: npm run bench:receive-bad   (env SCENARIOS=long-ecm,long-noecm,many-pages)
//   → bench/results/receive-bad-<time>.json
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { migrate } from '../src/db/migrate.ts';
import { SipLine } from '../src/transmission/sip/line.ts';
import { loadMediaEngine } from '../src/transmission/sip/media-engine.ts';
import { makeLongPageTiff } from '../test/support/faxtiff.ts';
import { createDatabase } from '../test/support/harness.ts';
import { startProcess } from '../test/support/process.ts';

const media = loadMediaEngine();
if (!media) {
  console.error('needs the SIP media engine: npm run build:native');
  process.exit(1);
}

/** `n` pages of `mm` millimetres each, white with one black bar, at 196 lines per inch. */
function shortPages(n: number, mm: number): string {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-tif-'));
  const rows = Math.round((mm / 25.4) * 196);
  const parts = Array.from({ length: n }, (_, p) => {
    const img = Buffer.alloc(216 * rows);
    img.fill(0xff, 216 * Math.floor(rows / 2) + 20, 216 * Math.floor(rows / 2) + 40 + (p % 100));
    const src = join(dir, `p${p}.pbm`);
    const tif = join(dir, `p${p}.tif`);
    writeFileSync(src, Buffer.concat([Buffer.from(`P4\n1728 ${rows}\n`), img]));
    execFileSync('ppm2tiff', ['-c', 'g4', '-R', '204', src, tif]);
    execFileSync('tiffset', ['-s', '283', '196', tif]);
    return tif;
  });
  const out = join(dir, 'fax.tif');
  execFileSync('tiffcp', ['-c', 'g4', ...parts, out]);
  return out;
}

const rssOf = (pid: number) =>
  Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;

const scenarios: Record<
  string,
  { what: string; env: Record<string, string>; tiff: () => string; pages: number }
> = {
  'long-ecm': {
    what: 'one 100 m page (772,000 rows at 196 lines/inch), white with a bar every 200 rows, ECM (T.6)',
    env: {},
    tiff: () => makeLongPageTiff(0, 100_000, 'standard', 200),
    pages: 1,
  },
  'long-noecm': {
    what: 'one 10 m page (77,200 rows), white with a bar every 200 rows, the receiver without ECM (T.4 2-D)',
    env: { ECM: '0' },
    tiff: () => makeLongPageTiff(0, 10_000, 'standard', 200),
    pages: 1,
  },
  'many-pages': {
    what: '40 pages of 30 mm each',
    env: {},
    tiff: () => shortPages(40, 30),
    pages: 40,
  },
};

const db = await createDatabase();
const pool = new pg.Pool({ connectionString: db.url, max: 2 });
const results: unknown[] = [];
try {
  await migrate(pool);
  const acc = await pool.query<{ id: string }>(`INSERT INTO accounts (name) VALUES ('bench') RETURNING id`);
  await pool.query(`INSERT INTO numbers (account_id, number, receive) VALUES ($1, '+15550009990', true)`, [
    acc.rows[0]!.id,
  ]);
  const wanted = (process.env.SCENARIOS ?? Object.keys(scenarios).join(',')).split(',');
  for (const name of wanted) {
    const sc = scenarios[name];
    if (!sc) throw new Error(`unknown scenario ${name}`);
    const tiff = sc.tiff();
    for (const limits of ['off', 'default'] as const) {
      const child = startProcess('test/support/telephony/receive-sip-child.ts', {
        DATABASE_URL: db.url,
        SIP_PORT: '38520',
        RTP_MIN: '38530',
        RTP_MAX: '38537',
        ...sc.env,
        ...(limits === 'off' ? { MAX_PAGE_MM: '0', MAX_PAGES: '0' } : {}),
      });
      const tx = new SipLine({
        trunk: 'sip:127.0.0.1:38520;transport=udp',
        listen: { host: '127.0.0.1', port: 38_522 },
        publicAddress: '127.0.0.1',
        t38: 'prefer',
        rtpPorts: { min: 38_540, max: 38_547 },
        ringTimeoutMs: 15_000,
        media,
      });
      try {
        await child.waitFor(/"listening"/, 30_000);
        const pid = child.child.pid!;
        const before = rssOf(pid);
        let peak = before;
        const sampler = setInterval(() => (peak = Math.max(peak, rssOf(pid))), 100);
        const t0 = performance.now();
        const outcome = await tx.transmit(
          {
            jobId: `bad-${name}-${limits}`,
            attempt: 1,
            faxNumber: '+15550009990',
            callerId: '+15550001111',
            quality: 'standard',
            pageBytes: Array.from({ length: sc.pages }, () => 15_000),
            tiff: readFileSync(tiff),
          },
          {
            signal: new AbortController().signal,
            deadline: new Date(Date.now() + 900_000),
            onProgress: () => undefined,
          },
        );
        await child.waitFor(/received fax stored|could not be stored/, 120_000).catch(() => '');
        clearInterval(sampler);
        peak = Math.max(peak, rssOf(pid));
        const row = await pool.query(
          `SELECT status, pages, result_text, octet_length(tiff) AS tiff_bytes, pdf IS NOT NULL AS pdf
             FROM received_faxes ORDER BY created_at DESC LIMIT 1`,
        );
        const r = {
          scenario: name,
          what: sc.what,
          limits: limits === 'off' ? 'off (MAX_PAGE_MM=0, MAX_PAGES=0)' : 'defaults (1000 mm, 500 pages)',
          call_s: +((performance.now() - t0) / 1000).toFixed(1),
          sender: outcome.ok ? `ok, ${outcome.pages} pages` : `${outcome.code}: ${outcome.message}`,
          stored: row.rows[0],
          receiver_rss_before_mib: +(before / 2 ** 20).toFixed(1),
          receiver_rss_peak_mib: +(peak / 2 ** 20).toFixed(1),
          receiver_rss_growth_mib: +((peak - before) / 2 ** 20).toFixed(1),
          load_average: loadavg().map((l) => +l.toFixed(2)),
        };
        console.log(r);
        results.push(r);
      } finally {
        child.child.kill('SIGKILL');
        await child.exited;
        await tx.close();
      }
    }
  }
  const date = new Date().toISOString();
  const stamp = date.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
  writeFileSync(
    new URL(`./results/receive-bad-${stamp}.json`, import.meta.url),
    JSON.stringify({ date, results }, null, 2) + '\n',
  );
} finally {
  await pool.end();
  await db.drop();
}
