// Steady customer load for the cluster fault cases: a few senders post faxes one after another,
// every `scheduleEvery`-th one scheduled a few seconds ahead (pg-boss's near tier), and every answer
// is recorded with its time. A refusal must be a 503 in the envelope (never a success that is not
// true); a sender backs off briefly after one, as a client would. The figures of a case come from
// these records and from the jobs' recorded transitions.
import pg from 'pg';
import { call } from '../client.ts';
import { eventually } from '../wait.ts';
import { readLedger, type Ledger } from '../ledger.ts';

/** The longest a send may go unanswered. */
const ANSWER_MS = 30_000;

export interface Answer {
  start: number;
  end: number;
  http: number;
  jobId?: string;
  scheduled: boolean;
}

export interface Load {
  readonly answers: Answer[];
  /** Answers that were not a 503 refusal in the envelope nor a success (must stay empty). */
  readonly wrong: string[];
  accepted(from?: number): string[];
  refused(from?: number): number;
  stop(): Promise<void>;
}

export function startLoad(
  base: string,
  token: string,
  fileData: string,
  o: { senders?: number; periodMs?: number; scheduleEvery?: number; scheduleAheadMs?: number } = {},
): Load {
  const answers: Answer[] = [];
  const wrong: string[] = [];
  let stopped = false;
  let n = 0;
  const sender = async () => {
    while (!stopped) {
      const scheduled = o.scheduleEvery !== undefined && ++n % o.scheduleEvery === 0;
      const body = {
        // Many destinations: the line caller places one call per destination at a time.
        fax_number: `+1555${String(Math.floor(Math.random() * 1e7)).padStart(7, '0')}`,
        fax_data: [{ file_name: 'f.pdf', file_data: fileData }],
        ...(scheduled
          ? { scheduled_date: new Date(Date.now() + (o.scheduleAheadMs ?? 4000)).toISOString() }
          : {}),
      };
      const start = Date.now();
      let timer: NodeJS.Timeout | undefined;
      // A request the service never answers is a finding too: bounded, recorded, and the sender goes on.
      const r = await Promise.race([
        call(base, 'POST', '/v1/faxes/send', { token, body }).catch(() => null),
        new Promise<'late'>((res) => (timer = setTimeout(() => res('late'), ANSWER_MS))),
      ]);
      clearTimeout(timer);
      if (r === 'late') {
        wrong.push(`no answer within ${ANSWER_MS} ms (sent at ${new Date(start).toISOString()})`);
        answers.push({ start, end: Date.now(), http: 0, scheduled });
        continue;
      }
      const a: Answer = { start, end: Date.now(), http: r?.http ?? 0, scheduled };
      if (r?.http === 200) a.jobId = r.body.data.job_id as string;
      else if (!r || r.http !== 503 || r.body.status !== 0)
        wrong.push(`${r?.http ?? 'no answer'}: ${JSON.stringify(r?.body ?? null).slice(0, 300)}`);
      answers.push(a);
      // A steady rate (one send per `periodMs` per sender), and a client backing off after a
      // refusal: pacing, not a wait for anything.
      const pause = a.http !== 200 ? 100 : Math.max(0, start + (o.periodMs ?? 200) - Date.now());
      if (pause > 0) await new Promise((res) => setTimeout(res, pause));
    }
  };
  const running = Array.from({ length: o.senders ?? 2 }, () => sender());
  return {
    answers,
    wrong,
    accepted: (from = 0) => answers.filter((a) => a.start >= from && a.jobId).map((a) => a.jobId!),
    refused: (from = 0) => answers.filter((a) => a.start >= from && a.http !== 200).length,
    stop: async () => {
      stopped = true;
      await Promise.all(running);
    },
  };
}

/** Waits (bounded) until `n` more faxes were accepted from `from` on; throws with the counts if not. */
export async function acceptedAtLeast(load: Load, from: number, n: number, timeoutMs: number, what: string) {
  await eventually(async () => load.accepted(from).length >= n, timeoutMs, 100).catch(() => {
    throw new Error(
      `${what}: ${n} faxes not accepted within ${timeoutMs} ms (accepted ${load.accepted(from).length}, refused ${load.refused(from)})`,
    );
  });
}

/** Waits (bounded) until `n` refusals were answered from `from` on. */
export async function refusedAtLeast(load: Load, from: number, n: number, timeoutMs: number, what: string) {
  await eventually(async () => load.refused(from) >= n, timeoutMs, 100).catch(() => {
    throw new Error(
      `${what}: ${n} refusals not seen within ${timeoutMs} ms (accepted ${load.accepted(from).length}, refused ${load.refused(from)})`,
    );
  });
}

export interface Figures {
  /**
   * How long intake answered errors: the refused requests' time from send to answer, joined where
   * they overlap or follow within a second (the senders' back-off), summed.
   */
  errorWindowMs: number;
  refused: number;
  /** The longest any accepted fax waited: from acceptance (or its due time) to its final state. */
  oldestWaitMs: number;
  /** Faxes accepted between the first fault step and the last recovery step. */
  acceptedDuringFault: number;
  /** The fax that waited longest: immediate or scheduled, its id and its state history. */
  oldest: string;
}

export async function figures(
  databaseUrl: string,
  load: Load,
  from: number,
  fault: { start: number; end: number },
): Promise<Figures> {
  const inCase = load.answers.filter((a) => a.start >= from);
  const errors = inCase.filter((a) => a.http !== 200);
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    const ids = inCase.filter((a) => a.jobId).map((a) => a.jobId!);
    const r = await c.query<{ id: string; scheduled: boolean; ms: number; history: string }>(
      `SELECT j.id, j.scheduled_at IS NOT NULL AS scheduled,
              extract(epoch FROM fin.at - greatest(acc.at, coalesce(j.scheduled_at, acc.at))) * 1000 AS ms,
              (SELECT string_agg(t.to_state || '@' || to_char(t.at, 'HH24:MI:SS.MS'), ' ' ORDER BY t.id)
                 FROM fax_job_transitions t WHERE t.job_id = j.id) AS history
         FROM fax_jobs j
         JOIN LATERAL (SELECT min(at) AS at FROM fax_job_transitions t
                        WHERE t.job_id = j.id AND t.to_state IN ('accepted', 'scheduled')) acc ON true
         JOIN LATERAL (SELECT max(at) AS at FROM fax_job_transitions t
                        WHERE t.job_id = j.id AND t.to_state IN ('delivered', 'failed', 'cancelled', 'unknown')) fin ON true
        WHERE j.id = ANY($1::uuid[]) AND fin.at IS NOT NULL
        ORDER BY ms DESC LIMIT 1`,
      [ids],
    );
    const oldest = r.rows[0];
    return {
      errorWindowMs: errorTime(errors),
      refused: errors.length,
      oldestWaitMs: Math.round(oldest?.ms ?? 0),
      oldest: oldest ? `${oldest.scheduled ? 'scheduled' : 'immediate'} ${oldest.id}: ${oldest.history}` : '',
      acceptedDuringFault: inCase.filter((a) => a.jobId && a.start >= fault.start && a.start <= fault.end)
        .length,
    };
  } finally {
    await c.end();
  }
}

function errorTime(errors: Answer[]): number {
  const spans = errors.map((a) => [a.start, a.end] as [number, number]).sort((x, y) => x[0] - y[0]);
  let total = 0;
  let cur: [number, number] | undefined;
  for (const sp of spans) {
    if (cur && sp[0] <= cur[1] + 1000) cur[1] = Math.max(cur[1], sp[1]);
    else {
      if (cur) total += cur[1] - cur[0];
      cur = [...sp];
    }
  }
  return total + (cur ? cur[1] - cur[0] : 0);
}

export function figuresLine(name: string, f: Figures): string {
  const s = (ms: number) => (ms / 1000).toFixed(1);
  return (
    `figures ${name}: intake_error_window_s=${s(f.errorWindowMs)} refused=${f.refused} ` +
    `oldest_accepted_wait_s=${s(f.oldestWaitMs)} accepted_during_fault=${f.acceptedDuringFault}\n` +
    `  longest wait: ${f.oldest}`
  );
}

/**
 * Waits until every accepted fax is in a final state (scheduled ones are due within seconds here,
 * so `scheduled` counts as not yet settled), then returns the ledger. It waits as long as the faxes
 * keep moving (a loaded machine prepares and sends them slowly, and the clock is not the judge of
 * that), and gives up, returning the ledger with its unsettled faxes, once no fax changed state for
 * `stallMs`, or after `capMs` in all.
 */
export async function settledLedger(
  databaseUrl: string,
  ids: string[],
  o: { stallMs?: number; capMs?: number } = {},
): Promise<Ledger> {
  const stallMs = o.stallMs ?? 60_000;
  const until = Date.now() + (o.capMs ?? 600_000);
  let seen = '';
  let movedAt = Date.now();
  for (;;) {
    const l = await readLedger(databaseUrl, ids, { pendingStates: [] });
    if (l.delivered + l.failed + l.cancelled + l.unknown === ids.length) return l;
    const now = Date.now();
    const states = JSON.stringify(l.byState);
    if (states !== seen) {
      seen = states;
      movedAt = now;
    }
    if (now - movedAt > stallMs || now > until) {
      console.log(`settledLedger: gave up after ${now - movedAt} ms without a state change (${states})`);
      return l;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}
