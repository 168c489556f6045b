// Preparation throughput benchmark (not a test; issue 33 item 5). Starts the all-in-one service in
// this process on its own database and queue prefix (real PostgreSQL and RabbitMQ on loopback, the
// simulated line with no line time, the request rate limit off, every other setting at its default
// unless BENCH_ENV adds some), then:
//   1. Ghostscript's `tiffg4` pages per second of a real text page (test/fixtures/letter-text-2p.pdf,
//      page 1, repeated), one gs process per core: the anchor. Measured before and after the fax
//      phases, so both see the same machine. Ghostscript is a measuring tool here, never a dependency.
//   2. One account alone: BENCH_FAXES one-page faxes of that page with a cover page, sent from
//      BENCH_CLIENTS clients at once; faxes delivered per second (first accepted to last delivered,
//      from fax_job_transitions), time in `accepted` (accepted → preparing) percentiles, preparation
//      time, and the most preparations in progress at once.
//   3. Two accounts competing: each sends BENCH_FAXES / 2 faxes from BENCH_CLIENTS / 2 clients, at
//      the same moment; each account's delivered per second while both had faxes waiting, and the
//      order in which their preparations started (a = first account, b = second).
// BENCH_DISTINCT=1 makes every fax's document different bytes (the same page, its own title), so
// that no send reuses the pages of an earlier one (docs/documents-rendering.md, "Repeated
// documents"): the cost of a fax whose document is new.
// Every phase is bounded by BENCH_PHASE_SECONDS. Writes bench/results/pipeline-<label>-<time>.json
// and .md (BENCH_LABEL, default "run").
//
//   npm run bench:pipeline     (BENCH_FAXES=1500 BENCH_CLIENTS=50 BENCH_PHASE_SECONDS=900)
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PDFDocument } from 'pdf-lib';
import pg from 'pg';
import { call, seedAccount, tokenFor } from '../test/support/client.ts';
import { startService } from '../test/support/harness.ts';

const N = Math.min(Math.max(Number(process.env.BENCH_FAXES ?? 1500), 2), 5000);
const CLIENTS = Math.min(Math.max(Number(process.env.BENCH_CLIENTS ?? 50), 2), 200);
const PHASE_SECONDS = Number(process.env.BENCH_PHASE_SECONDS ?? 900);
const LABEL = process.env.BENCH_LABEL ?? 'run';
const DISTINCT = process.env.BENCH_DISTINCT === '1';
const GS_PAGES = 40; // pages of the document each gs process renders
const GS_ROUNDS = 3;

const round = (x: number, d = 1) => Number(x.toFixed(d));
const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const median = (xs: number[]) => pct(xs, 50);

const TICK = 100; // clock ticks per second in /proc (getconf CLK_TCK on Linux)
/** Fields after the command name of /proc/<pid>/stat (field 3 is index 0). */
const statOf = (pid: number | 'self'): string[] | null => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return s.slice(s.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
};
/** CPU seconds used by children that have exited (and were waited for): gs, recycled processes. */
const exitedChildrenCpu = () => {
  const f = statOf('self')!;
  return (Number(f[13]) + Number(f[14])) / TICK;
};
/**
 * CPU seconds of this process (the all-in-one service runs in it), its live children (render and
 * PDF check processes) and its children that have exited: the whole service's CPU, taken as a
 * difference between two moments.
 */
function serviceCpu(): { main: number; children: number } {
  const self = statOf('self')!;
  const main = (Number(self[11]) + Number(self[12])) / TICK;
  let children = (Number(self[13]) + Number(self[14])) / TICK;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const f = statOf(Number(d));
    if (f && Number(f[1]) === process.pid) children += (Number(f[11]) + Number(f[12])) / TICK;
  }
  return { main, children };
}

/**
 * CPU seconds of the servers beside the service: PostgreSQL (every live process of the cluster, and
 * what its postmaster collected from backends that have exited) and RabbitMQ (its Erlang VM and
 * helpers); and the whole machine's busy time (/proc/stat: all but idle and iowait), which also
 * counts this bench's clients and anything else running. Differences between two moments.
 */
function serverCpu(): { postgres: number; rabbitmq: number; machine: number } {
  let postgres = 0;
  let rabbitmq = 0;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let comm: string;
    try {
      comm = readFileSync(`/proc/${d}/comm`, 'latin1').trim();
    } catch {
      continue;
    }
    const f = statOf(Number(d));
    if (!f) continue;
    const own = (Number(f[11]) + Number(f[12])) / TICK;
    if (comm === 'postgres') {
      postgres += own;
      // The postmaster (its parent is not a postgres process) holds exited backends' time.
      const parent = Number(f[1]);
      let parentComm = '';
      try {
        parentComm = readFileSync(`/proc/${parent}/comm`, 'latin1').trim();
      } catch {
        // its parent is gone: counted as a postmaster's would be
      }
      if (parentComm !== 'postgres') postgres += (Number(f[13]) + Number(f[14])) / TICK;
    } else if (comm === 'beam.smp' || comm === 'erl_child_setup' || comm === 'epmd') rabbitmq += own;
  }
  const cpu = readFileSync('/proc/stat', 'latin1').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal
  const machine = (cpu[0]! + cpu[1]! + cpu[2]! + cpu[5]! + cpu[6]! + cpu[7]!) / TICK;
  return { postgres, rabbitmq, machine };
}

/**
 * What PostgreSQL counted for the service's database (pg_stat_database): transactions committed and
 * rolled back, rows inserted, updated and deleted, rows read. Differences between two moments, per
 * fax, say how much database work a fax costs (issue 33); the counters are flushed by each backend
 * at most once a second, so the second moment is taken after a pause (pg_stat_force_next_flush for
 * this connection's own).
 */
async function dbWork(db: pg.Client): Promise<Record<string, number>> {
  await db.query('SELECT pg_stat_force_next_flush()');
  await new Promise((r) => setTimeout(r, 1_500));
  const r = await db.query<Record<string, string>>(
    `SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, tup_fetched
       FROM pg_stat_database WHERE datname = current_database()`,
  );
  return Object.fromEntries(Object.entries(r.rows[0]!).map(([k, v]) => [k, Number(v)]));
}

function requireGhostscript(): void {
  const r = spawnSync('gs', ['--version'], { encoding: 'utf8' });
  if (r.status !== 0) {
    console.error(
      'bench:pipeline measures Ghostscript (`gs`) as its anchor and did not find it.\n' +
        'Install it (Debian/Ubuntu: `sudo apt-get install ghostscript`) and run it again.',
    );
    process.exit(2);
  }
}

/** Page 1 of a real text PDF alone, and that page repeated GS_PAGES times (for gs). */
async function documents(): Promise<{ one: Buffer; many: Buffer }> {
  const src = await PDFDocument.load(readFileSync('test/fixtures/letter-text-2p.pdf'));
  const one = await PDFDocument.create();
  const [p] = await one.copyPages(src, [0]);
  one.addPage(p!);
  const many = await PDFDocument.create();
  const copies = await many.copyPages(
    src,
    Array.from({ length: GS_PAGES }, () => 0),
  );
  for (const c of copies) many.addPage(c);
  return { one: Buffer.from(await one.save()), many: Buffer.from(await many.save()) };
}

/** Pages per second of Ghostscript's tiffg4 at 204x196, one gs process per core, median of rounds. */
async function ghostscript(
  pdf: string,
  dir: string,
): Promise<{ pages_per_second: number; rounds: number[]; cpu_ms_per_page: number }> {
  const procs = cpus().length;
  const rounds: number[] = [];
  const cpu0 = exitedChildrenCpu();
  for (let r = 0; r < GS_ROUNDS; r++) {
    const t0 = performance.now();
    await Promise.all(
      Array.from(
        { length: procs },
        (_, i) =>
          new Promise<void>((resolve, reject) => {
            const gs = spawn(
              'gs',
              [
                '-q',
                '-dSAFER',
                '-dBATCH',
                '-dNOPAUSE',
                '-sDEVICE=tiffg4',
                '-r204x196',
                `-sOutputFile=${join(dir, `gs-${i}.tif`)}`,
                pdf,
              ],
              { stdio: 'ignore' },
            );
            const kill = setTimeout(() => gs.kill('SIGKILL'), 300_000);
            gs.on('exit', (code) => {
              clearTimeout(kill);
              if (code === 0) resolve();
              else reject(new Error(`gs exited with ${code}`));
            });
          }),
      ),
    );
    rounds.push(round((procs * GS_PAGES) / ((performance.now() - t0) / 1000)));
  }
  const cpuMsPerPage = ((exitedChildrenCpu() - cpu0) * 1000) / (GS_ROUNDS * procs * GS_PAGES);
  return { pages_per_second: median(rounds), rounds, cpu_ms_per_page: round(cpuMsPerPage) };
}

interface Sender {
  token: string;
  tag: string;
}

/** Sends `count` faxes of `fax_data` from `clients` clients; the ids in order of acceptance. */
async function send(
  url: string,
  who: Sender,
  count: number,
  clients: number,
  fax_data: () => unknown,
  numbers: () => string,
  until: number,
): Promise<{ ids: string[]; seconds: number }> {
  const ids: string[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (next < count && Date.now() < until) {
        next++;
        const r = await call(url, 'POST', '/v1/faxes/send', {
          token: who.token,
          body: { fax_number: numbers(), fax_data: fax_data() },
        });
        if (r.http !== 200) throw new Error(`send refused: ${r.http} ${JSON.stringify(r.body)}`);
        ids.push(r.body.data.job_id as string);
      }
    }),
  );
  return { ids, seconds: (performance.now() - t0) / 1000 };
}

/** Faxes that did not end delivered, by state and failure code (e.g. `failed internal_error`). */
async function notDelivered(db: pg.Client, ids: string[]): Promise<Record<string, number>> {
  const r = await db.query<{ k: string; n: number }>(
    `SELECT state || coalesce(' ' || failure_code, '') AS k, count(*)::int AS n FROM fax_jobs
      WHERE id = ANY($1::uuid[]) AND state <> 'delivered' GROUP BY 1`,
    [ids],
  );
  return Object.fromEntries(r.rows.map((x) => [x.k, x.n]));
}

interface JobTimes {
  id: string;
  account_id: string;
  accepted: number;
  preparing: number | null;
  queued: number | null;
  delivered: number | null;
}

async function times(db: pg.Client, ids: string[]): Promise<JobTimes[]> {
  const r = await db.query<JobTimes>(
    `SELECT j.id, j.account_id,
            extract(epoch FROM min(t.at) FILTER (WHERE t.to_state = 'accepted')) * 1000 AS accepted,
            extract(epoch FROM min(t.at) FILTER (WHERE t.to_state = 'preparing')) * 1000 AS preparing,
            extract(epoch FROM min(t.at) FILTER (WHERE t.to_state = 'queued')) * 1000 AS queued,
            extract(epoch FROM min(t.at) FILTER (WHERE t.to_state = 'delivered')) * 1000 AS delivered
       FROM fax_jobs j JOIN fax_job_transitions t ON t.job_id = j.id
      WHERE j.id = ANY($1::uuid[])
      GROUP BY j.id, j.account_id`,
    [ids],
  );
  return r.rows.map((x) => ({
    ...x,
    accepted: Number(x.accepted),
    preparing: x.preparing === null ? null : Number(x.preparing),
    queued: x.queued === null ? null : Number(x.queued),
    delivered: x.delivered === null ? null : Number(x.delivered),
  }));
}

async function waitDelivered(db: pg.Client, ids: string[], until: number): Promise<number> {
  for (;;) {
    const r = await db.query<{ n: number; open: number }>(
      `SELECT count(*) FILTER (WHERE state = 'delivered')::int AS n,
              count(*) FILTER (WHERE state NOT IN ('delivered','failed','cancelled','rejected','unknown'))::int AS open
         FROM fax_jobs WHERE id = ANY($1::uuid[])`,
      [ids],
    );
    const { n, open } = r.rows[0]!;
    if (open === 0 || Date.now() >= until) return n;
    await new Promise((res) => setTimeout(res, 250));
  }
}

/** Most intervals [preparing, queued) open at once. */
function maxOverlap(ts: JobTimes[]): number {
  const ev: [number, number][] = [];
  for (const t of ts)
    if (t.preparing !== null && t.queued !== null) ev.push([t.preparing, 1], [t.queued, -1]);
  ev.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let n = 0;
  let most = 0;
  for (const [, d] of ev) most = Math.max(most, (n += d));
  return most;
}

function stats(ts: JobTimes[]) {
  const delivered = ts.filter((t) => t.delivered !== null);
  const first = Math.min(...ts.map((t) => t.accepted));
  const last = Math.max(...delivered.map((t) => t.delivered!));
  const waits = ts.filter((t) => t.preparing !== null).map((t) => (t.preparing! - t.accepted) / 1000);
  const preps = ts.filter((t) => t.queued !== null).map((t) => t.queued! - t.preparing!);
  const toLine = delivered.filter((t) => t.queued !== null).map((t) => t.delivered! - t.queued!);
  return {
    faxes: ts.length,
    delivered: delivered.length,
    seconds_first_accepted_to_last_delivered: round((last - first) / 1000, 2),
    delivered_per_second: round(delivered.length / ((last - first) / 1000), 2),
    accepted_seconds_p50: round(pct(waits, 50), 2),
    accepted_seconds_p90: round(pct(waits, 90), 2),
    accepted_seconds_p99: round(pct(waits, 99), 2),
    accepted_seconds_max: round(pct(waits, 100), 2),
    preparation_ms_p50: Math.round(pct(preps, 50)),
    preparation_ms_p90: Math.round(pct(preps, 90)),
    queued_to_delivered_ms_p50: Math.round(pct(toLine, 50)),
    most_preparations_at_once: maxOverlap(ts),
  };
}

async function main(): Promise<void> {
  requireGhostscript();
  const dir = mkdtempSync(join(tmpdir(), 'faxline-bench-pipeline-'));
  const extra = Object.fromEntries(
    (process.env.BENCH_ENV ?? '')
      .split(',')
      .filter(Boolean)
      .map((kv) => kv.split('=') as [string, string]),
  );
  const env = {
    SIM_SPEEDUP: '0',
    LOG_LEVEL: 'warn',
    // "Rate limit off": per-account request rate and broadcast recipient rate not in the way.
    RATE_LIMIT_PER_SECOND: '0',
    BROADCAST_RECIPIENTS_PER_SECOND: '0',
    // The harness's test settings back to the service's defaults.
    DB_POOL_SIZE: '10',
    OUTBOX_SWEEP_SECONDS: '10',
    ...extra,
  };
  const s = await startService({ env });
  const db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
  await db.connect();
  try {
    const { one, many } = await documents();
    const manyPath = join(dir, 'text-page-x40.pdf');
    writeFileSync(manyPath, many);
    const load0 = loadavg();
    const gsBefore = await ghostscript(manyPath, dir);
    console.log(`gs tiffg4 before: ${gsBefore.pages_per_second} pages/s (${gsBefore.rounds.join(', ')})`);

    // The same document for every fax, or (BENCH_DISTINCT=1) as many variants as faxes, made here
    // before any phase is timed.
    const variants: string[] = [];
    if (DISTINCT) {
      const doc = await PDFDocument.load(one);
      for (let i = 0; i < 2 * N; i++) {
        doc.setTitle(`letter ${i}`);
        variants.push(Buffer.from(await doc.save()).toString('base64'));
      }
    } else variants.push(one.toString('base64'));
    let made = 0;
    const fax_data = () => [{ file_name: 'letter.pdf', file_data: variants[made++ % variants.length]! }];
    let base = 5_550_400_000;
    const numbers = () => `+1${base++}`;
    const a = await seedAccount(s, { cover: true });
    const b = await seedAccount(s, { cover: true });
    const A: Sender = { token: await tokenFor(s.url, a.api_key), tag: 'a' };
    const B: Sender = { token: await tokenFor(s.url, b.api_key), tag: 'b' };

    // Phase 1: one account alone.
    let until = Date.now() + PHASE_SECONDS * 1000;
    const work0 = await dbWork(db);
    const cpu0 = serviceCpu();
    const srv0 = serverCpu();
    const alone = await send(s.url, A, N, CLIENTS, fax_data, numbers, until);
    await waitDelivered(db, alone.ids, until);
    const cpu1 = serviceCpu();
    const srv1 = serverCpu();
    const work1 = await dbWork(db);
    const cpuAlone = cpu1.main + cpu1.children - cpu0.main - cpu0.children;
    const aloneStats = {
      accepted_per_second: round(alone.ids.length / alone.seconds),
      ...stats(await times(db, alone.ids)),
      not_delivered: await notDelivered(db, alone.ids),
      // The whole service's CPU (HTTP clients of this bench included, PostgreSQL and RabbitMQ not).
      service_cpu_ms_per_fax: Math.round((cpuAlone * 1000) / alone.ids.length),
      // Of it, the service process itself (HTTP, PostgreSQL and RabbitMQ clients, covers) and its
      // child processes (PDF checks, renders).
      main_process_cpu_ms_per_fax: Math.round(((cpu1.main - cpu0.main) * 1000) / alone.ids.length),
      child_processes_cpu_ms_per_fax: Math.round(((cpu1.children - cpu0.children) * 1000) / alone.ids.length),
      // The servers' part, and everything the machine did (all processes, this bench's clients too).
      postgres_cpu_ms_per_fax: Math.round(((srv1.postgres - srv0.postgres) * 1000) / alone.ids.length),
      rabbitmq_cpu_ms_per_fax: Math.round(((srv1.rabbitmq - srv0.rabbitmq) * 1000) / alone.ids.length),
      machine_cpu_ms_per_fax: Math.round(((srv1.machine - srv0.machine) * 1000) / alone.ids.length),
      // The database work per fax (pg_stat_database; this bench's own few queries included).
      database_per_fax: Object.fromEntries(
        Object.keys(work1).map((k) => [k, round((work1[k]! - work0[k]!) / alone.ids.length, 1)]),
      ),
    };
    console.log('alone', JSON.stringify(aloneStats));

    // Phase 2: two accounts at once, half the faxes each.
    until = Date.now() + PHASE_SECONDS * 1000;
    const [sa, sb] = await Promise.all([
      send(s.url, A, Math.floor(N / 2), CLIENTS / 2, fax_data, numbers, until),
      send(s.url, B, Math.floor(N / 2), CLIENTS / 2, fax_data, numbers, until),
    ]);
    await waitDelivered(db, [...sa.ids, ...sb.ids], until);
    const ta = await times(db, sa.ids);
    const tb = await times(db, sb.ids);
    // While both had faxes waiting: from the later first acceptance to the earlier last delivery.
    const lastDelivered = (ts: JobTimes[]) => Math.max(...ts.map((t) => t.delivered ?? Infinity));
    const from = Math.max(Math.min(...ta.map((t) => t.accepted)), Math.min(...tb.map((t) => t.accepted)));
    const to = Math.min(lastDelivered(ta), lastDelivered(tb));
    const within = (ts: JobTimes[]) =>
      ts.filter((t) => t.delivered !== null && t.delivered >= from && t.delivered <= to).length;
    const both = (to - from) / 1000;
    const order = [
      ...ta.map((t) => ({ at: t.preparing ?? Infinity, tag: 'a' })),
      ...tb.map((t) => ({ at: t.preparing ?? Infinity, tag: 'b' })),
    ]
      .sort((x, y) => x.at - y.at)
      .map((x) => x.tag)
      .join('');
    const competing = {
      seconds_both_waiting: round(both, 2),
      a: {
        accepted_per_second: round(sa.ids.length / sa.seconds),
        delivered_per_second_while_both: round(within(ta) / both, 2),
        ...stats(ta),
      },
      b: {
        accepted_per_second: round(sb.ids.length / sb.seconds),
        delivered_per_second_while_both: round(within(tb) / both, 2),
        ...stats(tb),
      },
      not_delivered: await notDelivered(db, [...sa.ids, ...sb.ids]),
      preparation_order_first_120: order.slice(0, 120),
      preparation_order_last_60: order.slice(-60),
    };
    console.log('competing', JSON.stringify(competing));

    const gsAfter = await ghostscript(manyPath, dir);
    console.log(`gs tiffg4 after: ${gsAfter.pages_per_second} pages/s (${gsAfter.rounds.join(', ')})`);
    const gsPps = round((gsBefore.pages_per_second + gsAfter.pages_per_second) / 2);
    const ratio = round(aloneStats.delivered_per_second / gsPps, 3);
    const gsCpuMs = round((gsBefore.cpu_ms_per_page + gsAfter.cpu_ms_per_page) / 2);
    const at = new Date().toISOString();
    const machine = {
      cpus: cpus().length,
      model: cpus()[0]?.model ?? '',
      loadavg_at_start: load0.map((x) => round(x, 2)),
      loadavg_at_end: loadavg().map((x) => round(x, 2)),
    };
    const out = {
      at,
      label: LABEL,
      faxes: N,
      clients: CLIENTS,
      distinct_documents: DISTINCT,
      settings: env,
      machine,
      ghostscript: { before: gsBefore, after: gsAfter, pages_per_second: gsPps, processes: cpus().length },
      alone: aloneStats,
      competing,
      ratio_delivered_per_second_to_gs_pages_per_second: ratio,
      ghostscript_cpu_ms_per_page: gsCpuMs,
    };
    const stamp = at.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
    const name = `bench/results/pipeline-${LABEL}-${stamp}`;
    writeFileSync(`${name}.json`, `${JSON.stringify(out, null, 2)}\n`);
    const row = (label: string, x: ReturnType<typeof stats>) =>
      `| ${label} | ${x.delivered}/${x.faxes} | ${x.delivered_per_second} | ${x.accepted_seconds_p50} / ${x.accepted_seconds_p90} / ${x.accepted_seconds_p99} | ${x.preparation_ms_p50} | ${x.most_preparations_at_once} |`;
    const md = [
      `# Pipeline benchmark (${LABEL})`,
      '',
      `\`npm run bench:pipeline\` at ${at}: ${N} one-page faxes (page 1 of test/fixtures/letter-text-2p.pdf${DISTINCT ? ', each fax its own bytes (BENCH_DISTINCT=1)' : ', the same bytes every time'}) with a cover page, ` +
        `${CLIENTS} clients, all-in-one service, simulated line with no line time, rate limits off. ` +
        `Machine: ${machine.cpus} CPUs (${machine.model}), load ${machine.loadavg_at_start.join(' ')} at start, ${machine.loadavg_at_end.join(' ')} at end (shared).`,
      '',
      `Ghostscript tiffg4 204x196, ${cpus().length} processes: ${gsBefore.pages_per_second} pages/s before, ${gsAfter.pages_per_second} after (mean ${gsPps}); ${gsCpuMs} ms of CPU per page.`,
      '',
      '| phase | delivered | faxes / s | s in accepted p50 / p90 / p99 | preparation ms p50 | most preparations at once |',
      '| --- | ---: | ---: | ---: | ---: | ---: |',
      row('one account alone', aloneStats),
      row('competing: account a', competing.a),
      row('competing: account b', competing.b),
      '',
      `One account alone: accepted at ${aloneStats.accepted_per_second}/s, delivered ${aloneStats.delivered_per_second} faxes/s; ` +
        `**ratio to Ghostscript's pages/s: ${ratio}** (target ≥ 0.5). ` +
        `CPU of the whole service process tree (bench clients included; PostgreSQL and RabbitMQ not): ` +
        `${aloneStats.service_cpu_ms_per_fax} ms per fax (service process ${aloneStats.main_process_cpu_ms_per_fax}, ` +
        `check and render processes ${aloneStats.child_processes_cpu_ms_per_fax}), ` +
        `${round(aloneStats.service_cpu_ms_per_fax / gsCpuMs, 1)}× Ghostscript's CPU per page. ` +
        `Beside it, PostgreSQL ${aloneStats.postgres_cpu_ms_per_fax} ms and RabbitMQ ${aloneStats.rabbitmq_cpu_ms_per_fax} ms per fax; ` +
        `the whole machine was busy ${aloneStats.machine_cpu_ms_per_fax} ms of CPU per fax ` +
        `(${round(aloneStats.machine_cpu_ms_per_fax / gsCpuMs, 1)}× Ghostscript's per page). ` +
        `Database work per fax: ${Object.entries(aloneStats.database_per_fax)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}.`,
      '',
      `Competing, while both waited (${competing.seconds_both_waiting} s): a ${competing.a.delivered_per_second_while_both} faxes/s, ` +
        `b ${competing.b.delivered_per_second_while_both} faxes/s. Order in which preparations started (first 120): \`${competing.preparation_order_first_120}\`.`,
      '',
    ].join('\n');
    writeFileSync(`${name}.md`, md);
    console.log(md);
  } finally {
    await db.end();
    await s.dropAll();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
