// Soak: faxes at a steady rate through the whole pipeline — the API, send worker(s), scheduler,
// cancel worker and event relay as separate processes on a fresh database and queue prefix, the simulated line at a
// chosen speed-up — for a chosen time. Every SOAK_SAMPLE_SECONDS it records throughput, accept →
// delivered latency percentiles, the backlog, and RSS and heap of each process; at the end the
// ledger and the RSS slope of each process (memory must stay flat).
// Run: npm run soak   (SOAK_RATE=5 SOAK_MINUTES=30 SOAK_SPEEDUP=12 SOAK_SEND_WORKERS=1)
// Writes bench/results/soak-<UTC date-time>.json and .md. Loopback only; the shared servers are
// only used through a new database and a new queue prefix, both removed at the end.
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { call, seedAccount, tokenFor } from '../test/support/client.ts';
import {
  AMQP_URL,
  createDatabase,
  deleteTopology,
  uniqueName,
  type TestService,
} from '../test/support/harness.ts';
import { readLedger, ledgerLine } from '../test/support/ledger.ts';
import { makePdfBase64 } from '../test/support/pdf.ts';
import { startProcess, type Proc } from '../test/support/process.ts';

const num = (name: string, def: number) => {
  const v = Number(process.env[name] ?? def);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} must be a positive number`);
  return v;
};
const RATE = num('SOAK_RATE', 5); // faxes per second
const MINUTES = num('SOAK_MINUTES', 30);
const SPEEDUP = num('SOAK_SPEEDUP', 12); // simulated line time is divided by this
const SEND_WORKERS = Math.round(num('SOAK_SEND_WORKERS', 1));
const SAMPLE_S = num('SOAK_SAMPLE_SECONDS', 10);
const PAGES = Math.round(num('SOAK_PAGES', 1));
// Lines of the installation: enough for the offered load (rate x call time), with headroom.
const LINES = Math.round(num('SOAK_LINES', 32));
// Diagnosis: extra node flags for every child (space-separated), and minutes at which to ask each
// send worker for a heap snapshot (comma-separated; needs --heapsnapshot-signal=SIGUSR2 in the
// flags). A snapshot runs a full GC first, so it holds only what is retained; files are written to
// SOAK_SNAPSHOT_DIR (default bench/results/heap, not committed).
const NODE_FLAGS = (process.env.SOAK_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
const SNAPSHOT_AT_MIN = (process.env.SOAK_SNAPSHOT_AT ?? '')
  .split(',')
  .filter((x) => x.trim() !== '')
  .map(Number)
  .filter((x) => Number.isFinite(x) && x >= 0);
const SNAPSHOT_DIR = process.env.SOAK_SNAPSHOT_DIR ?? join(import.meta.dirname, 'results', 'heap');
const MAX_IN_FLIGHT = 64; // HTTP requests outstanding at once (keeps the load generator bounded)
const DRAIN_S = 120; // after the last send, time allowed for the backlog to finish

const ENTRIES: [string, string][] = [
  ['api', 'src/api-main.ts'],
  ...Array.from({ length: SEND_WORKERS }, (_, i): [string, string] => [`send${i + 1}`, 'workers/send.ts']),
  ['scheduler', 'workers/scheduler.ts'],
  ['cancel', 'workers/cancel.ts'],
  ['events', 'workers/events.ts'],
];

interface ProcSample {
  rssMb: number;
  heapUsedMb: number | null;
  heapTotalMb: number | null;
}
interface Sample {
  t: number; // seconds since the start of the load
  accepted: number; // accepted (200) in this interval
  refused: number; // non-200 or failed requests in this interval
  delivered: number; // delivered in this interval
  throughputPerS: number; // delivered / interval
  latencyS: { p50: number; p90: number; p99: number; max: number } | null; // of those delivered
  backlog: Record<string, number>; // non-terminal jobs by state at the sample time
  procs: Record<string, ProcSample>;
}

const mb = (b: number) => Math.round((b / 1048576) * 10) / 10;
const round = (x: number, d = 3) => Math.round(x * 10 ** d) / 10 ** d;

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Least-squares slope of y over x. */
function slope(xs: number[], ys: number[]): number {
  const n = xs.length;
  if (n < 2) return NaN;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my);
    sxx += (xs[i]! - mx) ** 2;
  }
  return sxx === 0 ? NaN : sxy / sxx;
}

async function processSample(p: Proc, url: string): Promise<ProcSample> {
  const metric = (text: string, name: string) => {
    const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'm').exec(text);
    return m ? Number(m[1]) : null;
  };
  let text = '';
  try {
    const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(3000) });
    text = await res.text();
  } catch {
    // the process is busy or gone: fall back to ps for RSS
  }
  let rss = metric(text, 'faxline_process_resident_memory_bytes');
  if (rss === null) {
    try {
      rss =
        Number(
          execFileSync('ps', ['-o', 'rss=', '-p', String(p.child.pid)])
            .toString()
            .trim(),
        ) * 1024;
    } catch {
      rss = NaN;
    }
  }
  const used = metric(text, 'faxline_nodejs_heap_size_used_bytes');
  const total = metric(text, 'faxline_nodejs_heap_size_total_bytes');
  return {
    rssMb: mb(rss),
    heapUsedMb: used === null ? null : mb(used),
    heapTotalMb: total === null ? null : mb(total),
  };
}

async function main(): Promise<void> {
  const db = await createDatabase();
  const prefix = uniqueName('soak').toLowerCase();
  const env = {
    DATABASE_URL: db.url,
    AMQP_URL,
    QUEUE_PREFIX: prefix,
    HOST: '127.0.0.1',
    PORT: '0',
    METRICS_PORT: '0',
    SIM_SPEEDUP: String(SPEEDUP),
    LINES: String(LINES),
    LOG_LEVEL: 'info', // as in production; the lines are read and dropped
  };
  const procs: { name: string; proc: Proc; url: string }[] = [];
  const pgc = new pg.Client({ connectionString: db.url });
  const startOne = async (name: string, entry: string) => {
    const flags = [...NODE_FLAGS];
    if (SNAPSHOT_AT_MIN.length > 0) {
      mkdirSync(SNAPSHOT_DIR, { recursive: true });
      flags.push(`--diagnostic-dir=${SNAPSHOT_DIR}`);
      if (!flags.some((f) => f.startsWith('--heapsnapshot-signal')))
        flags.push('--heapsnapshot-signal=SIGUSR2');
    }
    const proc = startProcess(entry, env, flags);
    const line = await proc.waitFor(/"msg":"faxline started"/, 60_000);
    procs.push({ name, proc, url: (JSON.parse(line) as { address: string }).address });
    // Keep the child's log lines from growing this process's memory.
    setInterval(() => proc.lines.splice(0, proc.lines.length), 5000).unref();
  };
  try {
    await startOne(...ENTRIES[0]!); // the API first: it applies the migrations
    await Promise.all(ENTRIES.slice(1).map(([n, e]) => startOne(n, e)));
    await pgc.connect();
    const seed = await seedAccount({ cfg: { DATABASE_URL: db.url } } as TestService);
    const api = procs[0]!.url;
    const token = await tokenFor(api, seed.api_key);
    const fileData = await makePdfBase64(PAGES);

    const accepted: string[] = [];
    let refusedTotal = 0;
    let acceptedInterval = 0;
    let refusedInterval = 0;
    let inFlight = 0;
    let skipped = 0;
    // Faxes go to many numbers (one call per destination would otherwise serialise the whole soak).
    let seq = 0;
    const sendOne = async () => {
      inFlight++;
      const faxNumber = `+1555222${String(seq++ % 10_000).padStart(4, '0')}`;
      try {
        const r = await call(api, 'POST', '/v1/faxes/send', {
          token,
          body: { fax_number: faxNumber, fax_data: [{ file_name: 'soak.pdf', file_data: fileData }] },
        });
        if (r.http === 200) {
          accepted.push(r.body.data.job_id as string);
          acceptedInterval++;
        } else {
          refusedTotal++;
          refusedInterval++;
        }
      } catch {
        refusedTotal++;
        refusedInterval++;
      } finally {
        inFlight--;
      }
    };

    const durationMs = MINUTES * 60_000;
    const t0 = Date.now();
    console.log(
      `soak: ${RATE}/s, ${LINES} lines, for ${MINUTES} min, SIM_SPEEDUP=${SPEEDUP}, ${SEND_WORKERS} send worker(s), ` +
        `${PAGES} page(s) per fax, db ${db.url.split('/').pop()}, prefix ${prefix}`,
    );

    // The load: a drift-free schedule of sends, at most MAX_IN_FLIGHT outstanding.
    let sent = 0;
    const loadDone = (async () => {
      while (Date.now() - t0 < durationMs) {
        const due = t0 + (sent * 1000) / RATE;
        const wait = due - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        sent++;
        if (inFlight >= MAX_IN_FLIGHT) skipped++;
        else void sendOne();
      }
    })();

    // Heap snapshots of the send workers at the chosen minutes (the snapshot pauses the worker for a
    // few seconds: latency samples around them are not representative).
    const snapshotTimers = SNAPSHOT_AT_MIN.map((m) =>
      setTimeout(() => {
        for (const p of procs.filter((q) => q.name.startsWith('send'))) {
          console.log(`heap snapshot of ${p.name} (pid ${p.proc.child.pid}) at ${m} min -> ${SNAPSHOT_DIR}`);
          p.proc.child.kill('SIGUSR2');
        }
      }, m * 60_000),
    );

    const samples: Sample[] = [];
    let lastSampleAt = new Date();
    const takeSample = async () => {
      const now = new Date();
      const d = await pgc.query<{ lat: number }>(
        `SELECT extract(epoch FROM completed_at - created_at)::float8 AS lat FROM fax_jobs
          WHERE state = 'delivered' AND completed_at > $1 AND completed_at <= $2`,
        [lastSampleAt, now],
      );
      const b = await pgc.query<{ state: string; n: number }>(
        `SELECT state, count(*)::int AS n FROM fax_jobs
          WHERE state IN ('accepted', 'preparing', 'dialling', 'sending') GROUP BY state`,
      );
      const lats = d.rows.map((r) => r.lat).sort((a, c) => a - c);
      const intervalS = (now.getTime() - lastSampleAt.getTime()) / 1000;
      lastSampleAt = now;
      const ps: Record<string, ProcSample> = {};
      for (const p of procs) ps[p.name] = await processSample(p.proc, p.url);
      const s: Sample = {
        t: round((now.getTime() - t0) / 1000, 1),
        accepted: acceptedInterval,
        refused: refusedInterval,
        delivered: lats.length,
        throughputPerS: round(lats.length / intervalS, 2),
        latencyS: lats.length
          ? {
              p50: round(percentile(lats, 50)),
              p90: round(percentile(lats, 90)),
              p99: round(percentile(lats, 99)),
              max: round(lats[lats.length - 1]!),
            }
          : null,
        backlog: Object.fromEntries(b.rows.map((r) => [r.state, r.n])),
        procs: ps,
      };
      acceptedInterval = 0;
      refusedInterval = 0;
      samples.push(s);
      console.log(
        `t=${s.t}s accepted=${s.accepted} refused=${s.refused} delivered/s=${s.throughputPerS} ` +
          `p50=${s.latencyS?.p50 ?? '-'}s p99=${s.latencyS?.p99 ?? '-'}s backlog=${JSON.stringify(s.backlog)} ` +
          Object.entries(ps)
            .map(([n, v]) => `${n}=${v.rssMb}MB/${v.heapUsedMb ?? '?'}MB`)
            .join(' '),
      );
    };
    const sampler = setInterval(
      () => void takeSample().catch((e: unknown) => console.error(e)),
      SAMPLE_S * 1000,
    );
    await loadDone;
    for (const t of snapshotTimers) clearTimeout(t);
    while (inFlight > 0) await new Promise((r) => setTimeout(r, 50));
    const loadEndedS = (Date.now() - t0) / 1000;

    // Drain: wait (bounded) until nothing accepted is still being worked on.
    const drainUntil = Date.now() + DRAIN_S * 1000;
    for (;;) {
      const r = await pgc.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM fax_jobs WHERE state IN ('accepted', 'preparing', 'dialling', 'sending')`,
      );
      if (r.rows[0]!.n === 0 || Date.now() > drainUntil) break;
      await new Promise((res) => setTimeout(res, 500));
    }
    clearInterval(sampler);
    await takeSample();
    const drainedS = (Date.now() - t0) / 1000;

    const ledger = await readLedger(db.url, accepted, { amqpUrl: AMQP_URL, prefix });
    const all = await pgc.query<{ lat: number }>(
      `SELECT extract(epoch FROM completed_at - created_at)::float8 AS lat FROM fax_jobs WHERE state = 'delivered'`,
    );
    const lats = all.rows.map((r) => r.lat).sort((a, c) => a - c);
    // The call itself (line time reported by the backend), to tell it from what the pipeline adds.
    const callMs = await pgc.query<{ p50: number | null }>(
      `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY (detail->>'duration_ms')::float8) AS p50
         FROM fax_job_transitions WHERE to_state = 'delivered' AND detail ? 'duration_ms'`,
    );
    const callS = callMs.rows[0]?.p50 == null ? null : round(callMs.rows[0].p50 / 1000);

    // Memory: RSS slope per process over the whole run and over its second half (after warm-up).
    const memory: Record<string, Record<string, number>> = {};
    for (const p of procs) {
      const pts = samples.filter((s) => Number.isFinite(s.procs[p.name]?.rssMb));
      const xs = pts.map((s) => s.t / 60);
      const ys = pts.map((s) => s.procs[p.name]!.rssMb);
      const half = Math.floor(pts.length / 2);
      const hs = pts.slice(half).map((s) => s.procs[p.name]!.heapUsedMb ?? NaN);
      // The floor: the lowest value in each minute. Garbage collection makes RSS and heap a saw
      // tooth (a ramp, then a drop at a major GC); a leak shows as a rising floor.
      const floor = (vals: number[]) => {
        const byMin = new Map<number, number>();
        pts.forEach((s, i) => {
          const m = Math.floor(s.t / 60);
          if (Number.isFinite(vals[i]!)) byMin.set(m, Math.min(byMin.get(m) ?? Infinity, vals[i]!));
        });
        // Only whole minutes: a minute with a few samples (the last, after the drain) has no floor.
        const per = new Map<number, number>();
        for (const s of pts) per.set(Math.floor(s.t / 60), (per.get(Math.floor(s.t / 60)) ?? 0) + 1);
        const keys = [...byMin.keys()]
          .filter((k) => (per.get(k) ?? 0) >= Math.max(2, Math.floor(60 / SAMPLE_S / 2)))
          .sort((a, b) => a - b);
        return round(
          slope(
            keys,
            keys.map((k) => byMin.get(k)!),
          ),
        );
      };
      const heap = pts.map((s) => s.procs[p.name]!.heapUsedMb ?? NaN);
      memory[p.name] = {
        rssFloorSlopeMbPerMin: floor(ys),
        heapUsedFloorSlopeMbPerMin: floor(heap),
        rssStartMb: ys[0] ?? NaN,
        rssEndMb: ys[ys.length - 1] ?? NaN,
        rssMaxMb: Math.max(...ys),
        rssSlopeMbPerMin: round(slope(xs, ys)),
        rssSlopeSecondHalfMbPerMin: round(slope(xs.slice(half), ys.slice(half))),
        heapUsedSlopeSecondHalfMbPerMin: round(slope(xs.slice(half), hs)),
      };
    }

    const summary = {
      kind: 'soak',
      startedAt: new Date(t0).toISOString(),
      settings: {
        nodeFlags: NODE_FLAGS,
        snapshotAtMin: SNAPSHOT_AT_MIN,
        ratePerS: RATE,
        minutes: MINUTES,
        simSpeedup: SPEEDUP,
        sendWorkers: SEND_WORKERS,
        pagesPerFax: PAGES,
        sampleSeconds: SAMPLE_S,
        maxInFlight: MAX_IN_FLIGHT,
      },
      machine: { cpus: (await import('node:os')).cpus().length, node: process.version },
      totals: {
        scheduled: sent,
        skippedAtInFlightCap: skipped,
        accepted: accepted.length,
        refused: refusedTotal,
        loadSeconds: round(loadEndedS, 1),
        drainedAfterSeconds: round(drainedS - loadEndedS, 1),
        acceptedPerS: round(accepted.length / loadEndedS, 2),
        deliveredPerS: round(ledger.delivered / drainedS, 2),
      },
      latencyS: {
        p50: round(percentile(lats, 50)),
        p90: round(percentile(lats, 90)),
        p99: round(percentile(lats, 99)),
        max: round(lats[lats.length - 1] ?? NaN),
        callP50: callS,
      },
      ledger,
      ledgerLine: ledgerLine('soak', ledger),
      memory,
      samples,
    };
    const stamp = new Date(t0).toISOString().replace(/[:]/g, '').replace(/\..*/, 'Z');
    const dir = join(import.meta.dirname, 'results');
    mkdirSync(dir, { recursive: true });
    const jsonPath = join(dir, `soak-${stamp}.json`);
    writeFileSync(jsonPath, `${JSON.stringify(summary, null, 2)}\n`);
    const md = [
      `# Soak ${summary.startedAt}`,
      '',
      `Command: \`SOAK_RATE=${RATE} SOAK_MINUTES=${MINUTES} SOAK_SPEEDUP=${SPEEDUP} SOAK_SEND_WORKERS=${SEND_WORKERS} npm run soak\` ` +
        `(${summary.machine.cpus} CPU cores, Node ${summary.machine.node}; API, ${SEND_WORKERS} send worker(s), scheduler, cancel worker and event relay as separate processes).`,
      '',
      ...(NODE_FLAGS.length > 0 || SNAPSHOT_AT_MIN.length > 0
        ? [
            `Diagnosis settings: SOAK_NODE_FLAGS=\`${NODE_FLAGS.join(' ')}\` SOAK_SNAPSHOT_AT=${SNAPSHOT_AT_MIN.join(',')} ` +
              '(a heap snapshot pauses the send worker for a few seconds and runs a full GC).',
            '',
          ]
        : []),
      `- Accepted ${accepted.length} of ${sent} sends (${refusedTotal} refused, ${skipped} skipped at the in-flight cap) ` +
        `in ${summary.totals.loadSeconds} s = ${summary.totals.acceptedPerS}/s; backlog drained ${summary.totals.drainedAfterSeconds} s after the load stopped.`,
      `- Accept → delivered latency: p50 ${summary.latencyS.p50} s, p90 ${summary.latencyS.p90} s, p99 ${summary.latencyS.p99} s, max ${summary.latencyS.max} s ` +
        `(the call itself, as the backend reports it: p50 ${callS ?? '?'} s).`,
      `- ${summary.ledgerLine}`,
      '',
      '| process | RSS start MB | RSS end MB | RSS max MB | RSS slope MB/min (all) | RSS slope MB/min (2nd half) | RSS floor slope MB/min | heap used floor slope MB/min |',
      '| --- | --: | --: | --: | --: | --: | --: | --: |',
      ...Object.entries(memory).map(
        ([n, m]) =>
          `| ${n} | ${m.rssStartMb} | ${m.rssEndMb} | ${m.rssMaxMb} | ${m.rssSlopeMbPerMin} | ${m.rssSlopeSecondHalfMbPerMin} | ${m.rssFloorSlopeMbPerMin} | ${m.heapUsedFloorSlopeMbPerMin} |`,
      ),
      '',
      'Floor: the lowest sample of each minute (garbage collection makes memory a saw tooth; a leak raises the floor).',
      '',
      `Samples every ${SAMPLE_S} s are in \`${jsonPath.split('/').slice(-2).join('/')}\`.`,
      '',
    ].join('\n');
    writeFileSync(jsonPath.replace(/\.json$/, '.md'), md);
    console.log(`\n${md}`);
    console.log(`written: ${jsonPath} and .md`);
    if (ledger.lost > 0 || ledger.duplicates > 0) process.exitCode = 1;
  } finally {
    await Promise.all(
      procs.map(async ({ proc }) => {
        proc.child.kill('SIGTERM');
        const t = setTimeout(() => proc.child.kill('SIGKILL'), 30_000);
        await proc.exited;
        clearTimeout(t);
      }),
    );
    await pgc.end().catch(() => undefined);
    await deleteTopology(prefix).catch(() => undefined);
    await db.drop();
  }
}

await main();
