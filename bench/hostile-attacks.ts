// Two more attack phases of the hostile-input benchmark (issue 27; run by bench/hostile.ts, not a
// test), each measured the same way: account A probes the API for HOSTILE_ATTACK_ALONE_S seconds
// alone, then while account B attacks, and the two are compared.
//   json:  B posts HOSTILE_JSON_REQUESTS bodies of HOSTILE_JSON_KEYS small top-level keys (about
//          39 MB at the default 3,000,000; a valid send otherwise) to POST /v1/faxes/send, one after
//          the other (finding 1).
//   burst: B posts HOSTILE_BURST_BROADCASTS broadcasts of HOSTILE_BURST_RECIPIENTS recipients at
//          once (finding 2), and again every HOSTILE_BURST_EVERY_S seconds while the phase lasts
//          (at least HOSTILE_ATTACK_MIN_S seconds).
// A's probe, at HOSTILE_ATTACK_RATE per second (at most 8 outstanding): a one-page POST
// /v1/faxes/send and a GET /v1/workspace. Reported per phase: each one's latency p50/p95/max, the
// time from accepted to queued of A's faxes (fax_job_transitions), and the API process's RSS
// (largest sample, and at the end), read from /proc every 100 ms.
import { readFileSync } from 'node:fs';
import type pg from 'pg';

const num = (name: string, def: number) => {
  const v = Number(process.env[name] ?? def);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} must be a positive number`);
  return v;
};
export const ATTACK = {
  aloneS: num('HOSTILE_ATTACK_ALONE_S', 20),
  minS: num('HOSTILE_ATTACK_MIN_S', 20),
  maxS: num('HOSTILE_ATTACK_MAX_S', 240),
  rate: num('HOSTILE_ATTACK_RATE', 5),
  jsonKeys: Math.round(num('HOSTILE_JSON_KEYS', 3_000_000)),
  jsonRequests: Math.round(num('HOSTILE_JSON_REQUESTS', 4)),
  broadcasts: Math.round(num('HOSTILE_BURST_BROADCASTS', 10)),
  recipients: Math.round(num('HOSTILE_BURST_RECIPIENTS', 1000)),
  everyS: num('HOSTILE_BURST_EVERY_S', 30),
};
const IN_FLIGHT = 8;
const REQUEST_TIMEOUT_MS = 120_000;

export type AttackName = 'json' | 'burst';

interface Timed {
  http: number;
  ms: number;
  body: { status?: number; message?: string; data?: any };
  headers?: Headers;
}

async function request(
  base: string,
  method: string,
  path: string,
  token: string,
  body?: string,
): Promise<Timed> {
  const t = performance.now();
  try {
    const res = await fetch(base + path, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body } : {}),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    const text = await res.text();
    let parsed: Timed['body'];
    try {
      parsed = JSON.parse(text) as Timed['body'];
    } catch {
      parsed = { message: `non-JSON body: ${text.slice(0, 200)}` };
    }
    return { http: res.status, ms: performance.now() - t, body: parsed, headers: res.headers };
  } catch (err) {
    return { http: 0, ms: performance.now() - t, body: { message: `request failed: ${String(err)}` } };
  }
}

const r1 = (x: number) => Math.round(x * 10) / 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
function stats(xs: number[]): { n: number; p50: number | null; p95: number | null; max: number | null } {
  const s = [...xs].sort((a, b) => a - b);
  const at = (p: number) =>
    s.length ? r1(s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!) : null;
  return { n: s.length, p50: at(50), p95: at(95), max: s.length ? r1(s[s.length - 1]!) : null };
}

/** RSS of one process in MiB, from /proc (0 when it is gone). */
function rssMb(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

export interface PhaseStats {
  seconds: number;
  send: ReturnType<typeof stats> & { refused: number };
  workspace: ReturnType<typeof stats> & { refused: number };
  /** A's faxes of this phase: accepted -> queued, ms (those not queued within the wait are counted). */
  queued: ReturnType<typeof stats> & { notQueued: number };
  apiRss: { maxMb: number; endMb: number };
}

export interface AttackResult {
  name: AttackName;
  what: string;
  alone: PhaseStats;
  during: PhaseStats;
  /** B's requests: HTTP status -> count, with the first message of each, and their times. */
  b: { answers: Record<string, { n: number; message: string }>; ms: ReturnType<typeof stats>; jobs: number };
}

export interface AttackContext {
  api: string;
  apiPid: number;
  tokenA: string;
  tokenB: string;
  accountB: string;
  /** A one-page PDF, Base64. */
  pdf: string;
  pgc: pg.Client;
}

/** A's probe until `until()`: sends and workspace reads, paced, with at most IN_FLIGHT outstanding. */
async function probeA(c: AttackContext, until: () => boolean, seq: { n: number }) {
  const send: number[] = [];
  const workspace: number[] = [];
  const ids: string[] = [];
  let refused = { send: 0, workspace: 0 };
  let inFlight = 0;
  const start = Date.now();
  const apiRss = { maxMb: 0, endMb: 0 };
  const rssTimer = setInterval(() => (apiRss.maxMb = Math.max(apiRss.maxMb, rssMb(c.apiPid))), 100);
  const pending = new Set<Promise<void>>();
  for (let i = 0; !until(); i++) {
    const wait = start + (i * 1000) / ATTACK.rate - Date.now();
    if (wait > 0) await sleep(wait);
    if (inFlight >= IN_FLIGHT) continue;
    inFlight++;
    const n = seq.n++;
    const p = Promise.all([
      request(
        c.api,
        'POST',
        '/v1/faxes/send',
        c.tokenA,
        JSON.stringify({
          fax_number: `+1555444${String(n % 10_000).padStart(4, '0')}`,
          fax_data: [{ file_name: 'a.pdf', file_data: c.pdf }],
        }),
      ).then((r) => {
        if (r.http === 200) {
          send.push(r.ms);
          ids.push(r.body.data.job_id as string);
        } else refused.send++;
      }),
      request(c.api, 'GET', '/v1/workspace', c.tokenA).then((r) => {
        if (r.http === 200) workspace.push(r.ms);
        else refused.workspace++;
      }),
    ]).then(() => {
      inFlight--;
    });
    const tracked = p.finally(() => pending.delete(tracked));
    pending.add(tracked);
  }
  await Promise.all(pending);
  clearInterval(rssTimer);
  apiRss.maxMb = r1(Math.max(apiRss.maxMb, rssMb(c.apiPid)));
  apiRss.endMb = r1(rssMb(c.apiPid));
  refused = { ...refused };
  return { send, workspace, ids, refused, seconds: r1((Date.now() - start) / 1000), apiRss };
}

/** accepted -> queued of each job, waiting (bounded) until every one is queued or further. */
async function queuedMs(pgc: pg.Client, ids: string[], boundS: number): Promise<PhaseStats['queued']> {
  const until = Date.now() + boundS * 1000;
  let rows: { ms: number | null }[] = [];
  while (Date.now() < until) {
    rows = (
      await pgc.query<{ ms: number | null }>(
        `SELECT 1000 * extract(epoch FROM
                  (SELECT min(at) FROM fax_job_transitions x WHERE x.job_id = j.id AND x.to_state = 'queued')
                - (SELECT min(at) FROM fax_job_transitions x WHERE x.job_id = j.id AND x.to_state = 'accepted'))::float8 AS ms
           FROM fax_jobs j WHERE j.id = ANY($1::uuid[])`,
        [ids],
      )
    ).rows;
    if (rows.every((r) => r.ms !== null)) break;
    await sleep(1000);
  }
  const done = rows.filter((r) => r.ms !== null).map((r) => Number(r.ms));
  return { ...stats(done), notQueued: ids.length - done.length };
}

function phaseStats(p: Awaited<ReturnType<typeof probeA>>, queued: PhaseStats['queued']): PhaseStats {
  return {
    seconds: p.seconds,
    send: { ...stats(p.send), refused: p.refused.send },
    workspace: { ...stats(p.workspace), refused: p.refused.workspace },
    queued,
    apiRss: p.apiRss,
  };
}

/** B's JSON body: a valid one-page send with `keys` more small top-level keys. */
function bigJsonBody(pdf: string, keys: number): string {
  const parts: string[] = [];
  for (let i = 0; i < keys; i++) parts.push(`"k${i}":${i % 10}`);
  return `{"fax_number":"+15554450000","fax_data":[{"file_name":"b.pdf","file_data":"${pdf}"}],${parts.join(',')}}`;
}

/** Runs one attack phase (A alone, then A beside B) on the started service. */
export async function runAttack(
  c: AttackContext,
  name: AttackName,
  seq: { n: number },
): Promise<AttackResult> {
  const aloneEnd = Date.now() + ATTACK.aloneS * 1000;
  const alone = await probeA(c, () => Date.now() >= aloneEnd, seq);
  const aloneQueued = await queuedMs(c.pgc, alone.ids, 120);

  const bAnswers: Timed[] = [];
  let bDone = false;
  const start = Date.now();
  const jobsBefore = await bJobs(c);
  let what: string;
  let attack: Promise<void>;
  if (name === 'json') {
    const body = bigJsonBody(c.pdf, ATTACK.jsonKeys);
    what = `${ATTACK.jsonRequests} × POST /v1/faxes/send of ${r1(body.length / 2 ** 20)} MiB, ${ATTACK.jsonKeys} top-level keys, one after the other`;
    attack = (async () => {
      for (let i = 0; i < ATTACK.jsonRequests && Date.now() - start < ATTACK.maxS * 1000; i++)
        bAnswers.push(await request(c.api, 'POST', '/v1/faxes/send', c.tokenB, body));
    })();
  } else {
    what =
      `${ATTACK.broadcasts} concurrent broadcasts of ${ATTACK.recipients} recipients, ` +
      `again every ${ATTACK.everyS} s while the phase lasts`;
    const bodies = Array.from({ length: ATTACK.broadcasts }, (_, k) =>
      JSON.stringify({
        recipients: Array.from({ length: ATTACK.recipients }, (_, i) => ({
          fax_number: `+1${5560000000 + k * 10_000 + i}`,
        })),
        fax_data: [{ file_name: 'b.pdf', file_data: c.pdf }],
      }),
    );
    attack = (async () => {
      let round = 0;
      do {
        const at = start + round * ATTACK.everyS * 1000;
        if (at > Date.now()) await sleep(at - Date.now());
        bAnswers.push(
          ...(await Promise.all(bodies.map((b) => request(c.api, 'POST', '/v1/faxes/send', c.tokenB, b)))),
        );
        round++;
      } while (Date.now() - start + ATTACK.everyS * 1000 < ATTACK.minS * 1000);
    })();
  }
  void attack.finally(() => (bDone = true));
  const during = await probeA(
    c,
    () => Date.now() - start >= ATTACK.maxS * 1000 || (bDone && Date.now() - start >= ATTACK.minS * 1000),
    seq,
  );
  await attack;
  const duringQueued = await queuedMs(c.pgc, during.ids, 300);
  const answers: AttackResult['b']['answers'] = {};
  for (const a of bAnswers) {
    const k = String(a.http);
    answers[k] ??= { n: 0, message: String(a.body.message ?? '').slice(0, 200) };
    answers[k].n++;
  }
  return {
    name,
    what,
    alone: phaseStats(alone, aloneQueued),
    during: phaseStats(during, duringQueued),
    b: { answers, ms: stats(bAnswers.map((a) => a.ms)), jobs: (await bJobs(c)) - jobsBefore },
  };
}

async function bJobs(c: AttackContext): Promise<number> {
  const r = await c.pgc.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM fax_jobs WHERE account_id = $1',
    [c.accountB],
  );
  return r.rows[0]!.n;
}

/** The Markdown table of the attack phases. */
export function attackTable(results: AttackResult[]): string[] {
  const f = (x: number | null) => (x === null ? '–' : String(Math.round(x)));
  const row = (r: AttackResult, phase: 'alone' | 'during') => {
    const p = r[phase];
    return (
      `| ${r.name} | ${phase} | ${p.send.n} | ${f(p.send.p50)} / ${f(p.send.p95)} / ${f(p.send.max)} | ` +
      `${f(p.workspace.p50)} / ${f(p.workspace.p95)} / ${f(p.workspace.max)} | ` +
      `${f(p.queued.p50)} / ${f(p.queued.p95)} / ${f(p.queued.max)}${p.queued.notQueued ? ` (${p.queued.notQueued} not queued)` : ''} | ` +
      `${f(p.apiRss.maxMb)} / ${f(p.apiRss.endMb)} |`
    );
  };
  return [
    "| attack | A's phase | A's sends | send accept ms p50 / p95 / max | GET /v1/workspace ms p50 / p95 / max | A's accepted → queued ms p50 / p95 / max | API RSS MiB max / end |",
    '| --- | --- | --- | --- | --- | --- | --- |',
    ...results.flatMap((r) => [row(r, 'alone'), row(r, 'during')]),
    '',
    ...results.map(
      (r) =>
        `- **${r.name}**: ${r.what}. B's answers: ${Object.entries(r.b.answers)
          .map(([http, a]) => `${a.n} × ${http} (${a.message.replace(/\|/g, '/')})`)
          .join(
            '; ',
          )}; B's request time p50 ${f(r.b.ms.p50)} ms, max ${f(r.b.ms.max)} ms; B's jobs written: ${r.b.jobs}.`,
    ),
  ];
}
