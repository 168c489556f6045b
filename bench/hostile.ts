// Hostile-input benchmark (issue 16; not a test): account B sends the hostile PDFs, each
// HOSTILE_REPEAT times as a fax and as many times to the preview, while account A sends normal
// one-page faxes. The whole pipeline runs as separate processes (API, send worker(s), scheduler,
// cancel worker, event relay) on a fresh database and queue prefix, with the simulated line sped up.
//   a. baseline: A alone at HOSTILE_RATE faxes/s for HOSTILE_BASELINE_S s;
//   b. hostile: the same load from A while B sends (at least HOSTILE_MIN_S s, until every hostile
//      fax is closed and every preview answered, at most HOSTILE_MAX_S s);
//   c. drain: until everything accepted is closed, at most HOSTILE_DRAIN_S s.
// Every HOSTILE_SAMPLE_MS the RSS of every service process and of all its descendants is read from
// /proc; peaks per process kind and per pod (a root process plus its descendants) are compared
// with the memory limits of deploy/k8s/base. A process past HOSTILE_STOP_RSS_MB ends the hostile
// phase (recorded); one past HOSTILE_KILL_RSS_MB is killed to protect the shared machine (recorded).
// Criteria, each PASS or FAIL in the summary (the process exits 0 either way: the lead reads it):
//   memory: every pod's peak under its limit; latency: A's accept -> delivered p50 and p95 in the
//   hostile phase within 20 % of the baseline; reasons: every hostile fax failed with a code naming
//   its cause (and every hostile preview answered 422 with such a code); ledger: all of A's delivered.
// Then (issue 27) the attack phases of bench/hostile-attacks.ts on the same processes: a 39 MB JSON
// body of 3,000,000 keys (json) and ten concurrent 1000-recipient broadcasts (burst), each with A's
// latency alone and during, and the API's RSS. HOSTILE_PHASES (comma-separated, default
// `pdf,json,burst`) chooses; without `pdf` only the attack phases run.
// Run: npm run bench:hostile   Writes bench/results/hostile-<UTC>.md/.json and hostile.md/.json
// (with HOSTILE_LABEL=before also hostile-before-<UTC>.md/.json), and the attack phases to
// hostile-attacks-<UTC>.md/.json and hostile-attacks.md/.json (with a label, also
// hostile-attacks-<label>-<UTC>.md/.json).
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { parseAllDocuments } from 'yaml';
import { terminalStates } from '../src/domain/states.ts';
import { seedAccount, tokenFor } from '../test/support/client.ts';
import { chainedFlateBombPdf, fillHeavyPdf, noisePdf } from '../test/fixtures/hostile/build.ts';
import {
  AMQP_URL,
  createDatabase,
  deleteTopology,
  uniqueName,
  type TestService,
} from '../test/support/harness.ts';
import { readLedger, ledgerLine, type Ledger } from '../test/support/ledger.ts';
import { makePdfBase64 } from '../test/support/pdf.ts';
import { startProcess, type Proc } from '../test/support/process.ts';
import { RssSampler, type RssPeaks } from './proc-rss.ts';
import { ATTACK, attackTable, runAttack, type AttackName, type AttackResult } from './hostile-attacks.ts';

const num = (name: string, def: number) => {
  const v = Number(process.env[name] ?? def);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} must be a positive number`);
  return v;
};
const RATE = num('HOSTILE_RATE', 1); // A's faxes per second
const BASELINE_S = num('HOSTILE_BASELINE_S', 60);
const MIN_S = num('HOSTILE_MIN_S', 60);
const MAX_S = num('HOSTILE_MAX_S', 240);
const DRAIN_S = num('HOSTILE_DRAIN_S', 90);
const REPEAT = Math.round(num('HOSTILE_REPEAT', 10));
const B_RATE = num('HOSTILE_B_RATE', 1); // B's faxes per second, and as many previews per second
const SPEEDUP = num('HOSTILE_SPEEDUP', 16); // a one-page fax takes about 1.5 s of simulated line
const SEND_WORKERS = Math.round(num('HOSTILE_SEND_WORKERS', 1));
const SAMPLE_MS = num('HOSTILE_SAMPLE_MS', 200);
const STOP_RSS_MB = num('HOSTILE_STOP_RSS_MB', 4096);
const KILL_RSS_MB = num('HOSTILE_KILL_RSS_MB', 6144);
const LATENCY_TOLERANCE = 0.2;
const LABEL = process.env.HOSTILE_LABEL ?? '';
const PHASES = (process.env.HOSTILE_PHASES ?? 'pdf,json,burst').split(',').filter(Boolean);
for (const p of PHASES)
  if (!['pdf', 'json', 'burst'].includes(p))
    throw new Error(`HOSTILE_PHASES: unknown phase ${p} (pdf, json, burst)`);
const LINES = 32;
const MAX_IN_FLIGHT = 32; // A's HTTP requests outstanding at once
const PREVIEW_IN_FLIGHT = 8; // B's previews outstanding at once
const REQUEST_TIMEOUT_MS = 120_000;
const MAX_ERROR_LINES = 40; // per process, kept for the results

const ROOT = join(import.meta.dirname, '..');
const ENTRIES: [role: string, entry: string, manifest: string][] = [
  ['api', 'src/api-main.ts', 'api.yaml'],
  ...Array.from({ length: SEND_WORKERS }, (_, i): [string, string, string] => [
    `send${i + 1}`,
    'workers/send.ts',
    'send-worker.yaml',
  ]),
  ['scheduler', 'workers/scheduler.ts', 'scheduler.yaml'],
  ['cancel', 'workers/cancel.ts', 'cancel-worker.yaml'],
  ['events', 'workers/events.ts', 'events.yaml'],
];

/**
 * The hostile inputs, and what a good ending names. `expect` is matched against the failure code
 * (of the fax, or `data.code` of a 422 preview); `generic` codes never count, even if they match.
 */
interface Hostile {
  name: string;
  what: string;
  pdf: Buffer;
  expect: RegExp;
  cause: string;
  /** The preview of page 1 may legitimately succeed (a single noise page is a valid page). */
  previewMayRender: boolean;
}
const GENERIC =
  /^(render_failed|internal_error|prepare_timeout|job_timeout|timeout|outcome_unknown|pdf_check_timeout|url_timeout)$/;
function hostileInputs(): Hostile[] {
  const all: Hostile[] = [
    {
      name: 'flate2-600m',
      what: 'double-Flate content stream, 600 MiB decoded',
      pdf: chainedFlateBombPdf({ decodedBytes: 600 * 2 ** 20, chain: ['flate', 'flate'] }),
      expect: /bomb|decompress|decoded|inflat/,
      cause: 'decompression bomb',
      previewMayRender: false,
    },
    {
      name: 'flate2-1g',
      what: 'double-Flate content stream, 1 GiB decoded',
      pdf: chainedFlateBombPdf({ decodedBytes: 2 ** 30, chain: ['flate', 'flate'] }),
      expect: /bomb|decompress|decoded|inflat/,
      cause: 'decompression bomb',
      previewMayRender: false,
    },
    {
      name: 'fill-heavy',
      what: 'one page of nested form XObjects with large clipped fills',
      pdf: fillHeavyPdf(),
      expect: /time|cpu|slow/, // a whole-job timeout is in GENERIC and never counts
      cause: 'render time',
      previewMayRender: false,
    },
    {
      name: 'noise-100p',
      what: '100 pages of gray noise images',
      pdf: noisePdf(100),
      expect: /tiff|image_size|fax_too_large|too_large|size/,
      cause: 'fax image size',
      previewMayRender: true,
    },
  ];
  // HOSTILE_KINDS (comma-separated names) runs a subset, e.g. for a quick try of the harness.
  const only = (process.env.HOSTILE_KINDS ?? '').split(',').filter(Boolean);
  const chosen = only.length ? all.filter((h) => only.includes(h.name)) : all;
  if (chosen.length === 0)
    throw new Error(`HOSTILE_KINDS matches none of ${all.map((h) => h.name).join(', ')}`);
  return chosen;
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;
const r1 = (x: number) => Math.round(x * 10) / 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** `512Mi`, `1Gi`, `1G`, `536870912` -> MiB. */
function quantityMb(q: string): number {
  const m = /^([0-9.]+)(Ki|Mi|Gi|Ti|K|M|G|T)?$/.exec(q.trim());
  if (!m) throw new Error(`unreadable memory quantity ${q}`);
  const unit: Record<string, number> = {
    '': 1,
    Ki: 1024,
    Mi: 1024 ** 2,
    Gi: 1024 ** 3,
    Ti: 1024 ** 4,
    K: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
  };
  return (Number(m[1]) * unit[m[2] ?? '']!) / 1048576;
}

/** The memory limit of the first container of the Deployment in a base manifest, MiB. */
function k8sMemoryLimitMb(manifest: string): number | null {
  const text = readFileSync(join(ROOT, 'deploy', 'k8s', 'base', manifest), 'utf8');
  for (const doc of parseAllDocuments(text)) {
    const o = doc.toJS() as {
      kind?: string;
      spec?: { template?: { spec?: { containers?: { resources?: { limits?: { memory?: string } } }[] } } };
    } | null;
    if (o?.kind !== 'Deployment') continue;
    const mem = o.spec?.template?.spec?.containers?.[0]?.resources?.limits?.memory;
    return mem ? quantityMb(String(mem)) : null;
  }
  return null;
}

/**
 * The literal env values of a manifest's container that size its child processes and queues
 * (PDF_CHECK_*, RENDER_*, SEND_PREFETCH, PREPARE_*): the pods are measured with the settings they
 * are deployed with, against the limits above.
 */
function k8sEnv(manifest: string): Record<string, string> {
  const text = readFileSync(join(ROOT, 'deploy', 'k8s', 'base', manifest), 'utf8');
  const out: Record<string, string> = {};
  for (const doc of parseAllDocuments(text)) {
    const o = doc.toJS() as {
      kind?: string;
      spec?: { template?: { spec?: { containers?: { env?: { name: string; value?: unknown }[] }[] } } };
    } | null;
    if (o?.kind !== 'Deployment') continue;
    for (const e of o.spec?.template?.spec?.containers?.[0]?.env ?? [])
      if (e.value !== undefined && /^(PDF_CHECK_|RENDER_|SEND_PREFETCH$|PREPARE_)/.test(e.name))
        out[e.name] = String(e.value);
  }
  return out;
}

interface Answer {
  http: number;
  body: { status?: number; message?: string; data?: any };
  ms: number;
}
async function post(base: string, path: string, token: string, body: unknown): Promise<Answer> {
  const t = performance.now();
  try {
    const res = await fetch(base + path, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    const text = await res.text();
    let parsed: Answer['body'];
    try {
      parsed = JSON.parse(text) as Answer['body'];
    } catch {
      parsed = { message: `non-JSON body: ${text.slice(0, 200)}` };
    }
    return { http: res.status, body: parsed, ms: performance.now() - t };
  } catch (err) {
    return { http: 0, body: { message: `request failed: ${String(err)}` }, ms: performance.now() - t };
  }
}

/** A log line shortened for the summary: its message and error message when it is pino JSON. */
function errorSummary(line: string): string {
  let s: string;
  try {
    const o = JSON.parse(line) as {
      msg?: string;
      component?: string;
      err?: { type?: string; message?: string };
    };
    s = [o.component, o.msg, o.err?.type, o.err?.message].filter(Boolean).join(': ');
  } catch {
    s = line;
  }
  return s.replace(/`/g, "'").slice(0, 200);
}

interface LatencyStats {
  /** Percentiles of the delivered ones alone (for reading; the criterion uses the others). */
  deliveredOnly: { p50: number | null; p95: number | null };
  accepted: number;
  delivered: number;
  notDelivered: number;
  p50: number | null;
  p95: number | null;
  max: number | null;
}

async function main(): Promise<void> {
  const inputs = hostileInputs();
  const limits: Record<string, number | null> = {};
  for (const [role, , manifest] of ENTRIES) limits[role] = k8sMemoryLimitMb(manifest);

  const db = await createDatabase();
  const prefix = uniqueName('hostile').toLowerCase();
  const env = {
    DATABASE_URL: db.url,
    AMQP_URL,
    QUEUE_PREFIX: prefix,
    HOST: '127.0.0.1',
    PORT: '0',
    METRICS_PORT: '0',
    SIM_SPEEDUP: String(SPEEDUP),
    LINES: String(LINES),
    LOG_LEVEL: 'info',
  };
  const procs: { role: string; proc: Proc; url: string }[] = [];
  const exits: { role: string; atS: number; code: number | null; signal: string | null }[] = [];
  const killed: { role: string; pid: number; rssMb: number; atS: number }[] = [];
  const sampler = new RssSampler();
  const pgc = new pg.Client({ connectionString: db.url });
  const t0 = Date.now();
  const nowS = () => r1((Date.now() - t0) / 1000);
  const load: number[] = [];
  let stopReason: string | null = null;
  const errorLines: Record<string, string[]> = {};
  const errorCounts: Record<string, Record<string, number>> = {};
  const keepLogs: (() => void)[] = [];

  const startOne = async (role: string, entry: string, manifest: string) => {
    const proc = startProcess(entry, { ...env, ...k8sEnv(manifest) });
    proc.exited
      .then((e) => exits.push({ role, atS: nowS(), code: e.code, signal: e.signal }))
      .catch(() => undefined);
    const line = await proc.waitFor(/"msg":"faxline started"/, 90_000);
    procs.push({ role, proc, url: (JSON.parse(line) as { address: string }).address });
    sampler.addRoot(proc.child.pid!, role);
    // Keep the children's log lines from growing this process's memory, but keep their first
    // errors (pino level 50 and up, or anything not JSON, such as a crash's stack) for the results.
    const keep = () => {
      const list = (errorLines[role] ??= []);
      const counts = (errorCounts[role] ??= {});
      for (const l of proc.lines.splice(0, proc.lines.length)) {
        if (!/"level":(5|6)0/.test(l) && l.startsWith('{')) continue;
        const short = errorSummary(l);
        counts[short] = (counts[short] ?? 0) + 1;
        if (list.length < MAX_ERROR_LINES) list.push(l.slice(0, 2000));
      }
    };
    keepLogs.push(keep);
    setInterval(keep, 2000).unref();
  };

  try {
    await startOne(...ENTRIES[0]!); // the API first: it applies the migrations
    await Promise.all(ENTRIES.slice(1).map(([r, e, m]) => startOne(r, e, m)));
    await pgc.connect();
    const seedA = await seedAccount({ cfg: { DATABASE_URL: db.url } } as TestService);
    const seedB = await seedAccount({ cfg: { DATABASE_URL: db.url } } as TestService);
    const api = procs[0]!.url;
    const tokenA = await tokenFor(api, seedA.api_key);
    const tokenB = await tokenFor(api, seedB.api_key);
    const normal = await makePdfBase64(1);
    // The attack phases (issue 27), after the PDF phases or alone.
    const attacks = async () => {
      const names = PHASES.filter((p): p is AttackName => p === 'json' || p === 'burst');
      if (names.length === 0) return;
      const startedAt = new Date().toISOString();
      const ctx = {
        api,
        apiPid: procs[0]!.proc.child.pid!,
        tokenA,
        tokenB,
        accountB: seedB.account_id,
        pdf: normal,
        pgc,
      };
      const results: AttackResult[] = [];
      const seq = { n: 0 };
      for (const name of names) {
        console.log(`attack phase ${name}: A alone ${ATTACK.aloneS} s, then beside B`);
        results.push(await runAttack(ctx, name, seq));
        console.log(JSON.stringify(results[results.length - 1]));
      }
      const md = [
        `# Hostile-input benchmark, attack phases ${startedAt}${LABEL ? ` (${LABEL})` : ''}`,
        '',
        `Command: \`${LABEL ? `HOSTILE_LABEL=${LABEL} ` : ''}HOSTILE_PHASES=${PHASES.join(',')} npm run bench:hostile\` ` +
          `(HOSTILE_ATTACK_ALONE_S=${ATTACK.aloneS} HOSTILE_ATTACK_MIN_S=${ATTACK.minS} HOSTILE_ATTACK_RATE=${ATTACK.rate} ` +
          `HOSTILE_JSON_KEYS=${ATTACK.jsonKeys} HOSTILE_JSON_REQUESTS=${ATTACK.jsonRequests} ` +
          `HOSTILE_BURST_BROADCASTS=${ATTACK.broadcasts} HOSTILE_BURST_RECIPIENTS=${ATTACK.recipients} HOSTILE_BURST_EVERY_S=${ATTACK.everyS}); ` +
          `processes as in deploy/k8s/base (one API, ${SEND_WORKERS} send worker(s)); ${cpus().length} CPUs, load ${loadavg()[0]!.toFixed(1)} at the end.`,
        '',
        "A probes at HOSTILE_ATTACK_RATE per second: a one-page send and a GET /v1/workspace; 'alone' is A before B starts, 'during' while B attacks.",
        '',
        ...attackTable(results),
        '',
      ].join('\n');
      const stamp = startedAt.replace(/[:]/g, '').replace(/\..*/, 'Z');
      const dir = join(import.meta.dirname, 'results');
      mkdirSync(dir, { recursive: true });
      const out = join(dir, `hostile-attacks-${stamp}`);
      writeFileSync(
        `${out}.json`,
        `${JSON.stringify({ startedAt, label: LABEL || null, attack: ATTACK, results }, null, 2)}\n`,
      );
      writeFileSync(`${out}.md`, md);
      copyFileSync(`${out}.json`, join(dir, 'hostile-attacks.json'));
      copyFileSync(`${out}.md`, join(dir, 'hostile-attacks.md'));
      if (LABEL) {
        copyFileSync(`${out}.json`, join(dir, `hostile-attacks-${LABEL}-${stamp}.json`));
        copyFileSync(`${out}.md`, join(dir, `hostile-attacks-${LABEL}-${stamp}.md`));
      }
      console.log(`\n${md}\nwritten: ${out}.md and .json (and hostile-attacks.md/.json)`);
    };
    if (!PHASES.includes('pdf')) {
      await attacks();
      return;
    }

    let loadSamples = 0;
    sampler.start(SAMPLE_MS, (s) => {
      if (loadSamples++ % Math.max(1, Math.round(2000 / SAMPLE_MS)) === 0) load.push(loadavg()[0]!);
      // Bounds that protect the shared machine.
      if (s.last.maxMb > STOP_RSS_MB && !stopReason) {
        stopReason = `${s.last.role} reached ${Math.round(s.last.maxMb)} MB RSS (> ${STOP_RSS_MB}) at ${nowS()} s`;
        console.log(`STOP: ${stopReason}`);
      }
      if (s.last.maxMb > KILL_RSS_MB && !killed.some((k) => k.pid === s.last.pid)) {
        // Only a process of the service's own tree (a root we started or one of its descendants).
        killed.push({ role: s.last.role, pid: s.last.pid, rssMb: Math.round(s.last.maxMb), atS: nowS() });
        console.log(
          `KILL: ${s.last.role} (pid ${s.last.pid}) at ${Math.round(s.last.maxMb)} MB RSS (> ${KILL_RSS_MB})`,
        );
        try {
          process.kill(s.last.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    });

    // A's load: a drift-free schedule, at most MAX_IN_FLIGHT outstanding; job ids per phase.
    const aIds: Record<'baseline' | 'hostile', string[]> = { baseline: [], hostile: [] };
    let aRefused = 0;
    let aSkipped = 0;
    let aInFlight = 0;
    let seq = 0;
    const runA = async (phase: 'baseline' | 'hostile', until: () => boolean) => {
      const start = Date.now();
      let sent = 0;
      while (!until()) {
        const wait = start + (sent * 1000) / RATE - Date.now();
        if (wait > 0) await sleep(wait);
        sent++;
        if (aInFlight >= MAX_IN_FLIGHT) {
          aSkipped++;
          continue;
        }
        aInFlight++;
        const faxNumber = `+1555222${String(seq++ % 10_000).padStart(4, '0')}`;
        void post(api, '/v1/faxes/send', tokenA, {
          fax_number: faxNumber,
          fax_data: [{ file_name: 'normal.pdf', file_data: normal }],
        })
          .then((r) => {
            if (r.http === 200) aIds[phase].push(r.body.data.job_id as string);
            else aRefused++;
          })
          .finally(() => aInFlight--);
      }
      while (aInFlight > 0) await sleep(50);
    };
    const openCount = async (ids: string[]) =>
      (
        await pgc.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM fax_jobs WHERE id = ANY($1::uuid[]) AND NOT (state = ANY($2::text[]))`,
          [ids, [...terminalStates]],
        )
      ).rows[0]!.n;
    const waitClosed = async (ids: () => string[], boundS: number, also: () => boolean = () => true) => {
      const until = Date.now() + boundS * 1000;
      while (Date.now() < until) {
        if ((await openCount(ids())) === 0 && also()) return true;
        await sleep(500);
      }
      return false;
    };
    const progress = setInterval(() => {
      const pods = Object.entries(sampler.last.podMb)
        .map(([r, mb]) => `${r}=${Math.round(mb)}MB`)
        .join(' ');
      console.log(
        `t=${nowS()}s load=${loadavg()[0]!.toFixed(1)} A: ${aIds.baseline.length}+${aIds.hostile.length} accepted ${pods}`,
      );
    }, 10_000);
    progress.unref();

    console.log(
      `hostile bench: A ${RATE}/s; B ${REPEAT} x ${inputs.length} hostile faxes and previews at ${B_RATE}/s; ` +
        `SIM_SPEEDUP=${SPEEDUP}; db ${db.url.split('/').pop()}, prefix ${prefix}; ` +
        inputs.map((h) => `${h.name} ${h.pdf.length} B`).join(', '),
    );

    // a. Baseline.
    const baselineStart = nowS();
    const bEnd = Date.now() + BASELINE_S * 1000;
    await runA('baseline', () => Date.now() >= bEnd);
    const baselineSettled = await waitClosed(() => aIds.baseline, 60);
    const baselineEnd = nowS();

    // b. Hostile: B's faxes and previews, interleaved by kind, while A keeps sending.
    const hostileStart = nowS();
    const hostileStartMs = Date.now();
    interface BFax {
      kind: string;
      i: number;
      http: number;
      jobId: string | null;
      message: string;
    }
    interface BPreview {
      kind: string;
      i: number;
      http: number;
      status: number | null;
      code: string | null;
      message: string;
      seconds: number;
    }
    const bFaxes: BFax[] = [];
    const bPreviews: BPreview[] = [];
    const order = Array.from({ length: REPEAT }, (_, i) => inputs.map((h) => ({ h, i }))).flat();
    const b64 = new Map(inputs.map((h) => [h.name, h.pdf.toString('base64')]));
    let bDone = false;
    let previewsDone = false;
    const stopped = () => stopReason !== null;
    const body = (h: Hostile, i: number) => ({
      fax_number: `+1555333${String(i * 10 + inputs.indexOf(h)).padStart(4, '0')}`,
      fax_data: [{ file_name: `${h.name}.pdf`, file_data: b64.get(h.name)! }],
    });
    const bFaxLoop = (async () => {
      const pending: Promise<void>[] = [];
      for (const [n, { h, i }] of order.entries()) {
        if (stopped()) break;
        const wait = hostileStartMs + (n * 1000) / B_RATE - Date.now();
        if (wait > 0) await sleep(wait);
        pending.push(
          post(api, '/v1/faxes/send', tokenB, body(h, i)).then((r) => {
            bFaxes.push({
              kind: h.name,
              i,
              http: r.http,
              jobId: r.http === 200 ? (r.body.data.job_id as string) : null,
              message: r.http === 200 ? '' : `${r.body.message ?? ''} ${JSON.stringify(r.body.data ?? null)}`,
            });
          }),
        );
      }
      await Promise.all(pending);
      bDone = true;
    })();
    const bPreviewLoop = (async () => {
      let inFlight = 0;
      const pending: Promise<void>[] = [];
      for (const [n, { h, i }] of order.entries()) {
        if (stopped()) break;
        const wait = hostileStartMs + (n * 1000) / B_RATE - Date.now();
        if (wait > 0) await sleep(wait);
        while (inFlight >= PREVIEW_IN_FLIGHT && !stopped()) await sleep(100);
        inFlight++;
        pending.push(
          post(api, '/v1/faxes/preview?page=1', tokenB, body(h, i))
            .then((r) => {
              bPreviews.push({
                kind: h.name,
                i,
                http: r.http,
                status: typeof r.body.status === 'number' ? r.body.status : null,
                code: (r.body.data as { code?: string } | undefined)?.code ?? null,
                message: String(r.body.message ?? ''),
                seconds: r3(r.ms / 1000),
              });
            })
            .finally(() => inFlight--),
        );
      }
      await Promise.all(pending);
      previewsDone = true;
    })();
    const bJobIds = () => bFaxes.filter((f) => f.jobId).map((f) => f.jobId!);
    let bClosed = false;
    const bWatch = (async () => {
      while (!stopped() && Date.now() - hostileStartMs < MAX_S * 1000) {
        if (bDone && previewsDone && (await openCount(bJobIds())) === 0) {
          bClosed = true;
          return;
        }
        await sleep(1000);
      }
    })();
    await runA(
      'hostile',
      () =>
        stopped() ||
        Date.now() - hostileStartMs >= MAX_S * 1000 ||
        (bClosed && Date.now() - hostileStartMs >= MIN_S * 1000),
    );
    const hostileEnd = nowS();
    const hostileEndedBy = stopReason
      ? 'stopped: memory bound'
      : bClosed
        ? 'every hostile fax closed and preview answered'
        : `time bound (${MAX_S} s)`;

    // c. Drain (bounded): A's and B's jobs closed, B's requests answered.
    const drained = await waitClosed(() => [...aIds.baseline, ...aIds.hostile, ...bJobIds()], DRAIN_S);
    const drainEnd = nowS();
    // Outstanding B requests get at most the request timeout; they are recorded as they stand.
    await Promise.race([Promise.all([bFaxLoop, bPreviewLoop, bWatch]), sleep(5000)]);
    clearInterval(progress);
    sampler.stop();
    sampler.sample();
    for (const keep of keepLogs) keep();

    // Results.
    const latency = async (ids: string[]): Promise<LatencyStats> => {
      const r = await pgc.query<{ state: string; lat: number | null }>(
        `SELECT state, extract(epoch FROM completed_at - created_at)::float8 AS lat FROM fax_jobs WHERE id = ANY($1::uuid[])`,
        [ids],
      );
      // A fax not delivered counts as slower than any delivered one (its latency is unknown but
      // at least the whole run): percentiles are not flattered by leaving it out.
      const lats = r.rows
        .map((x) => (x.state === 'delivered' && x.lat !== null ? x.lat : Infinity))
        .sort((a, b) => a - b);
      const fin = (x: number) => (Number.isFinite(x) ? r3(x) : null);
      const delivered = lats.filter((x) => Number.isFinite(x));
      return {
        deliveredOnly: {
          p50: fin(percentile(delivered, 50)),
          p95: fin(percentile(delivered, 95)),
        },
        accepted: ids.length,
        delivered: r.rows.filter((x) => x.state === 'delivered').length,
        notDelivered: ids.length - r.rows.filter((x) => x.state === 'delivered').length,
        p50: fin(percentile(lats, 50)),
        p95: fin(percentile(lats, 95)),
        max: fin(lats[lats.length - 1] ?? NaN),
      };
    };
    const base = await latency(aIds.baseline);
    const host = await latency(aIds.hostile);
    // Where A's time went: each step between two recorded states (fax_job_transitions), p50 and p95
    // per phase, so that a change in the total can be traced to intake, preparation or the line.
    type Steps = Record<string, { n: number; p50: number; p95: number; max: number }>;
    /** A's slowest faxes (the top 5 %): when each was sent and how long each step took. */
    type Slow = { atS: number; totalS: number; steps: Record<string, number> }[];
    const stages = async (ids: string[]): Promise<{ steps: Steps; slowest: Slow }> => {
      const r = await pgc.query<{ id: string; created: Date; to_state: string; at: Date }>(
        `SELECT j.id, j.created_at AS created, t.to_state, t.at
           FROM fax_jobs j JOIN fax_job_transitions t ON t.job_id = j.id
          WHERE j.id = ANY($1::uuid[]) AND j.state = 'delivered' ORDER BY j.id, t.id`,
        [ids],
      );
      const steps = new Map<string, number[]>();
      const jobs = new Map<string, { created: number; end: number; steps: Record<string, number> }>();
      let from = '';
      let since = 0;
      for (const x of r.rows) {
        let j = jobs.get(x.id);
        if (!j) {
          j = { created: x.created.getTime(), end: 0, steps: {} };
          jobs.set(x.id, j);
          [from, since] = ['created', j.created];
        }
        const key = `${from} -> ${x.to_state}`;
        const d = (x.at.getTime() - since) / 1000;
        steps.set(key, [...(steps.get(key) ?? []), d]);
        j.steps[key] = r3((j.steps[key] ?? 0) + d);
        j.end = x.at.getTime();
        [from, since] = [x.to_state, x.at.getTime()];
      }
      const all = [...jobs.values()].sort((a, b) => b.end - b.created - (a.end - a.created));
      return {
        steps: Object.fromEntries(
          [...steps].map(([k, v]) => {
            v.sort((a, b) => a - b);
            const q = { n: v.length, p50: r3(percentile(v, 50)), p95: r3(percentile(v, 95)) };
            return [k, { ...q, max: r3(v[v.length - 1] ?? 0) }];
          }),
        ),
        slowest: all.slice(0, Math.ceil(all.length / 20)).map((j) => ({
          atS: r3((j.created - t0) / 1000),
          totalS: r3((j.end - j.created) / 1000),
          steps: j.steps,
        })),
      };
    };
    const stageA = { baseline: await stages(aIds.baseline), hostile: await stages(aIds.hostile) };
    const ratio = (a: number | null, b: number | null) =>
      a !== null && b !== null && b > 0 ? r3(a / b) : null;
    const p50Ratio = ratio(host.p50, base.p50);
    const p95Ratio = ratio(host.p95, base.p95);
    const latencyPass =
      p50Ratio !== null &&
      p95Ratio !== null &&
      p50Ratio <= 1 + LATENCY_TOLERANCE &&
      p95Ratio <= 1 + LATENCY_TOLERANCE;

    const bRows = await pgc.query<{
      id: string;
      state: string;
      failure_code: string | null;
      failure_reason: string | null;
      secs: number | null;
    }>(
      `SELECT id, state, failure_code, failure_reason,
              extract(epoch FROM coalesce(completed_at, now()) - created_at)::float8 AS secs
         FROM fax_jobs WHERE id = ANY($1::uuid[])`,
      [bJobIds()],
    );
    const byId = new Map(bRows.rows.map((r) => [r.id, r]));
    const named = (h: Hostile, code: string | null) =>
      code !== null && !GENERIC.test(code) && h.expect.test(code);
    const hostileFaxes = bFaxes
      .sort(
        (a, b) =>
          inputs.findIndex((h) => h.name === a.kind) - inputs.findIndex((h) => h.name === b.kind) ||
          a.i - b.i,
      )
      .map((f) => {
        const h = inputs.find((x) => x.name === f.kind)!;
        const row = f.jobId ? byId.get(f.jobId) : undefined;
        // Refused at intake with a 4xx naming the cause also counts (nothing accepted, nothing lost).
        const refusedNamed = f.http >= 400 && f.http < 500 && h.expect.test(f.message);
        const ok = refusedNamed || (row?.state === 'failed' && named(h, row.failure_code));
        return {
          kind: f.kind,
          i: f.i,
          http: f.http,
          state: row?.state ?? (f.http === 200 ? 'missing' : 'refused'),
          code: row?.failure_code ?? null,
          reason: row?.failure_reason ?? (f.http === 200 ? null : f.message.trim()),
          seconds: row?.secs === null || row?.secs === undefined ? null : r1(row.secs),
          pass: ok,
        };
      });
    const hostilePreviews = bPreviews
      .sort(
        (a, b) =>
          inputs.findIndex((h) => h.name === a.kind) - inputs.findIndex((h) => h.name === b.kind) ||
          a.i - b.i,
      )
      .map((p) => {
        const h = inputs.find((x) => x.name === p.kind)!;
        const ok =
          (p.http === 422 && named(h, p.code)) || (h.previewMayRender && (p.http === 200 || p.http === 422));
        return { ...p, pass: ok };
      });
    const perKind = inputs.map((h) => {
      const f = hostileFaxes.filter((x) => x.kind === h.name);
      const p = hostilePreviews.filter((x) => x.kind === h.name);
      const tally = (xs: (string | null)[]) => {
        const m: Record<string, number> = {};
        for (const x of xs) m[x ?? '-'] = (m[x ?? '-'] ?? 0) + 1;
        return m;
      };
      return {
        kind: h.name,
        what: h.what,
        bytes: h.pdf.length,
        cause: h.cause,
        faxesSent: f.length,
        faxesNamed: f.filter((x) => x.pass).length,
        faxOutcomes: tally(f.map((x) => `${x.state}${x.code ? ` ${x.code}` : ''}`)),
        faxSecondsMax: Math.max(0, ...f.map((x) => x.seconds ?? 0)),
        previewsSent: p.length,
        previewsOk: p.filter((x) => x.pass).length,
        previewOutcomes: tally(p.map((x) => `${x.http}${x.code ? ` ${x.code}` : ''}`)),
        previewSecondsMax: Math.max(0, ...p.map((x) => x.seconds)),
      };
    });
    const expectedHostile = REPEAT * inputs.length;
    const reasonsPass =
      hostileFaxes.length === expectedHostile &&
      hostilePreviews.length === expectedHostile &&
      hostileFaxes.every((x) => x.pass) &&
      hostilePreviews.every((x) => x.pass);

    const peaks: RssPeaks = sampler.peaks();
    const pods = ENTRIES.map(([role]) => {
      const limit = limits[role] ?? null;
      const peak = peaks.perPod[role]?.peakMb ?? null;
      return {
        role,
        peakMb: peak,
        atS: peaks.perPod[role]?.atS ?? null,
        limitMb: limit,
        pass: peak !== null && limit !== null && peak < limit,
      };
    });
    const memoryPass = pods.every((p) => p.pass) && killed.length === 0;

    const ledgerA: Ledger = await readLedger(db.url, [...aIds.baseline, ...aIds.hostile], {
      amqpUrl: AMQP_URL,
      prefix,
    });
    const ledgerPass =
      ledgerA.lost === 0 &&
      ledgerA.duplicates === 0 &&
      ledgerA.delivered === ledgerA.accepted &&
      aRefused === 0;

    const criteria = {
      memory: memoryPass,
      latency: latencyPass,
      reasons: reasonsPass,
      ledger: ledgerPass,
    };
    const startedAt = new Date(t0).toISOString();
    const loadStats = {
      min: r1(Math.min(...load)),
      mean: r1(load.reduce((a, b) => a + b, 0) / Math.max(1, load.length)),
      max: r1(Math.max(...load)),
    };
    const summary = {
      kind: 'hostile',
      label: LABEL || null,
      startedAt,
      settings: {
        ratePerS: RATE,
        baselineS: BASELINE_S,
        hostileMinS: MIN_S,
        hostileMaxS: MAX_S,
        drainS: DRAIN_S,
        repeat: REPEAT,
        bRatePerS: B_RATE,
        simSpeedup: SPEEDUP,
        sendWorkers: SEND_WORKERS,
        sampleMs: SAMPLE_MS,
        stopRssMb: STOP_RSS_MB,
        killRssMb: KILL_RSS_MB,
        latencyTolerance: LATENCY_TOLERANCE,
      },
      machine: { cpus: cpus().length, node: process.version, loadAverage1m: loadStats },
      phases: {
        baseline: { fromS: baselineStart, toS: baselineEnd, settled: baselineSettled },
        hostile: { fromS: hostileStart, toS: hostileEnd, endedBy: hostileEndedBy },
        drain: { toS: drainEnd, drained },
      },
      stopReason,
      killed,
      exits,
      criteria,
      latencyA: { baseline: base, hostile: host, p50Ratio, p95Ratio, stages: stageA },
      a: { refused: aRefused, skippedAtInFlightCap: aSkipped },
      ledgerA,
      ledgerLine: ledgerLine('account A', ledgerA),
      memory: { pods, perKind: peaks.perKind, samples: peaks.samples },
      hostileKinds: perKind,
      hostileFaxes,
      hostilePreviews,
      errorCounts,
      errorLines,
    };

    const pf = (b: boolean) => (b ? 'PASS' : 'FAIL');
    const sec = (x: number | null) => (x === null ? 'not delivered' : `${x} s`);
    const cmd =
      `${LABEL ? `HOSTILE_LABEL=${LABEL} ` : ''}HOSTILE_SPEEDUP=${SPEEDUP} HOSTILE_RATE=${RATE} HOSTILE_BASELINE_S=${BASELINE_S} ` +
      `HOSTILE_REPEAT=${REPEAT}${process.env.HOSTILE_KINDS ? ` HOSTILE_KINDS=${process.env.HOSTILE_KINDS}` : ''} npm run bench:hostile`;
    const md = [
      `# Hostile-input benchmark ${startedAt}${LABEL ? ` (${LABEL})` : ''}`,
      '',
      `Command: \`${cmd}\` (${summary.machine.cpus} CPU cores, Node ${summary.machine.node}; ` +
        `1-minute load average during the run ${loadStats.min}-${loadStats.max}, mean ${loadStats.mean}; ` +
        `API, ${SEND_WORKERS} send worker(s), scheduler, cancel worker and event relay as separate processes; simulated line, SIM_SPEEDUP=${SPEEDUP}).`,
      '',
      `Phases: baseline ${baselineStart}-${baselineEnd} s (A alone), hostile ${hostileStart}-${hostileEnd} s ` +
        `(ended: ${hostileEndedBy}), drain to ${drainEnd} s (${drained ? 'everything closed' : 'NOT everything closed'}).`,
      ...(stopReason ? ['', `**Hostile phase stopped:** ${stopReason}.`] : []),
      ...(killed.length
        ? [
            '',
            `**Killed to protect the machine:** ${killed.map((k) => `${k.role} at ${k.rssMb} MB (${k.atS} s)`).join('; ')}.`,
          ]
        : []),
      ...(exits.length
        ? [
            '',
            `Processes that exited during the run: ${exits.map((e) => `${e.role} at ${e.atS} s (${e.signal ?? `code ${e.code}`})`).join('; ')}.`,
          ]
        : []),
      '',
      '## Criteria',
      '',
      `- memory: ${pf(memoryPass)}: every pod (process + descendants) under its deploy/k8s/base limit${killed.length ? '; a process was killed' : ''}.`,
      `- latency: ${pf(latencyPass)}: A's accept -> delivered, hostile / baseline: p50 ${p50Ratio ?? '-'}, p95 ${p95Ratio ?? '-'} (pass if both <= ${1 + LATENCY_TOLERANCE}).`,
      `- reasons: ${pf(reasonsPass)}: ${hostileFaxes.filter((x) => x.pass).length} of ${expectedHostile} hostile faxes and ` +
        `${hostilePreviews.filter((x) => x.pass).length} of ${expectedHostile} previews ended with a code naming the cause.`,
      `- ledger: ${pf(ledgerPass)}: ${summary.ledgerLine}; A refused ${aRefused}.`,
      '',
      '## Account A (normal one-page faxes)',
      '',
      '| phase | accepted | delivered | not delivered | p50 | p95 | max | p50 / p95 of the delivered alone |',
      '| --- | --: | --: | --: | --: | --: | --: | --: |',
      ...(
        [
          ['baseline', base],
          ['hostile', host],
        ] as const
      ).map(
        ([n, l]) =>
          `| ${n} | ${l.accepted} | ${l.delivered} | ${l.notDelivered} | ${sec(l.p50)} | ${sec(l.p95)} | ${sec(l.max)} | ` +
          `${sec(l.deliveredOnly.p50)} / ${sec(l.deliveredOnly.p95)} |`,
      ),
      '',
      'A fax not delivered by the end of the drain counts as slower than every delivered one, so the ' +
        'percentiles are not flattered by leaving it out; the ledger counts it as lost (stuck in a working state).',
      '',
      "Where A's delivered faxes spent their time, step by step between recorded states (fax_job_transitions):",
      '',
      '| step | baseline p50 | baseline p95 | baseline max | hostile p50 | hostile p95 | hostile max |',
      '| --- | --: | --: | --: | --: | --: | --: |',
      ...Object.keys({ ...stageA.baseline.steps, ...stageA.hostile.steps }).map((k) => {
        const b = stageA.baseline.steps[k];
        const h = stageA.hostile.steps[k];
        const f = (x: number | undefined) => (x === undefined ? '-' : `${x} s`);
        return `| ${k} | ${f(b?.p50)} | ${f(b?.p95)} | ${f(b?.max)} | ${f(h?.p50)} | ${f(h?.p95)} | ${f(h?.max)} |`;
      }),
      '',
      "A's slowest 5 % in the hostile phase (sent at, seconds from the start; each step's time where it was more than 20 ms over the baseline's median):",
      '',
      ...stageA.hostile.slowest.map((j) => {
        const over = Object.entries(j.steps)
          .filter(([k, v]) => v - (stageA.baseline.steps[k]?.p50 ?? 0) > 0.02)
          .map(([k, v]) => `${k} ${v} s`);
        return `- at ${j.atS} s: ${j.totalS} s${over.length ? ` (${over.join(', ')})` : ''}`;
      }),
      '',
      '## Peak RSS',
      '',
      '| pod (process + descendants) | peak MB | at s | k8s limit MB | |',
      '| --- | --: | --: | --: | --- |',
      ...pods.map(
        (p) => `| ${p.role} | ${p.peakMb ?? '-'} | ${p.atS ?? '-'} | ${p.limitMb ?? '-'} | ${pf(p.pass)} |`,
      ),
      '',
      '| process kind | peak MB (one process) | processes seen | most at once |',
      '| --- | --: | --: | --: |',
      ...Object.entries(peaks.perKind).map(([k, v]) => `| ${k} | ${v.peakMb} | ${v.pids} | ${v.maxAtOnce} |`),
      '',
      `RSS of every service process and all its descendants, read from /proc every ${SAMPLE_MS} ms (${peaks.samples} samples).`,
      '',
      '## Hostile inputs (account B)',
      '',
      '| input | size | cause to name | faxes named | fax outcomes | longest fax s | previews ok | preview answers | longest preview s |',
      '| --- | --: | --- | --: | --- | --: | --: | --- | --: |',
      ...perKind.map(
        (k) =>
          `| ${k.kind} (${k.what}) | ${k.bytes} B | ${k.cause} | ${k.faxesNamed}/${k.faxesSent} | ` +
          `${Object.entries(k.faxOutcomes)
            .map(([o, n]) => `${n} × ${o}`)
            .join(', ')} | ${r1(k.faxSecondsMax)} | ` +
          `${k.previewsOk}/${k.previewsSent} | ${Object.entries(k.previewOutcomes)
            .map(([o, n]) => `${n} × ${o}`)
            .join(', ')} | ${r1(k.previewSecondsMax)} |`,
      ),
      '',
      'Reasons seen (first of each kind):',
      '',
      ...inputs.flatMap((h) => {
        const f = hostileFaxes.find((x) => x.kind === h.name);
        const p = hostilePreviews.find((x) => x.kind === h.name);
        return [
          `- ${h.name} fax: ${f ? `${f.state} ${f.code ?? ''} ${JSON.stringify(f.reason ?? '')}` : 'none sent'}`,
          `- ${h.name} preview: ${p ? `${p.http} ${p.code ?? ''} ${JSON.stringify(p.message)}` : 'none sent'}`,
        ];
      }),
      '',
      '## Error lines of the service processes (level error and above, or not JSON), by message',
      '',
      ...(Object.values(errorCounts).every((m) => Object.keys(m).length === 0) ? ['(none)'] : []),
      ...Object.entries(errorCounts).flatMap(([role, m]) =>
        Object.entries(m)
          .sort((a, b) => b[1] - a[1])
          .slice(0, 8)
          .map(([msg, n]) => `- ${role}: ${n} × \`${msg}\``),
      ),
      '',
      `The first ${MAX_ERROR_LINES} lines of each process, every hostile fax and every preview are in the JSON file.`,
      '',
    ].join('\n');

    const stamp = startedAt.replace(/[:]/g, '').replace(/\..*/, 'Z');
    const dir = join(import.meta.dirname, 'results');
    mkdirSync(dir, { recursive: true });
    const base_ = join(dir, `hostile-${stamp}`);
    writeFileSync(`${base_}.json`, `${JSON.stringify(summary, null, 2)}\n`);
    writeFileSync(`${base_}.md`, md);
    copyFileSync(`${base_}.json`, join(dir, 'hostile.json'));
    copyFileSync(`${base_}.md`, join(dir, 'hostile.md'));
    if (LABEL) {
      copyFileSync(`${base_}.json`, join(dir, `hostile-${LABEL}-${stamp}.json`));
      copyFileSync(`${base_}.md`, join(dir, `hostile-${LABEL}-${stamp}.md`));
    }
    console.log(`\n${md}`);
    console.log(
      Object.entries(criteria)
        .map(([k, v]) => `${k}: ${pf(v)}`)
        .join('  '),
    );
    console.log(`written: ${base_}.md and .json (and hostile.md/.json)`);
    await attacks();
  } finally {
    sampler.stop();
    await Promise.all(
      procs.map(async ({ proc }) => {
        if (proc.child.exitCode !== null || proc.child.signalCode !== null) return;
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
