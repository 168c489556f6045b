// Helpers for the transmission tests: send faxes over the customer API, wait for final states,
// read transitions straight from the service's database.
import pg from 'pg';
import { call } from './client.ts';
import { eventually, type TestService } from './harness.ts';
import { makePdfBase64 } from './pdf.ts';

/** Fast settings: the simulated line 1000x faster, retries after 50 ms, small dial/try limits. */
export const fastLineEnv: Record<string, string> = {
  SIM_SPEEDUP: '1000',
  LINE_POLL_MS: '100',
  LINES: '20',
  RETRY_BUSY_SECONDS: '0.05',
  RETRY_NO_ANSWER_SECONDS: '0.05',
  RETRY_PROTOCOL_SECONDS: '0.05',
  RETRY_OTHER_SECONDS: '0.05',
  MAX_DIALS: '3',
  MAX_TRIES: '2',
  LINE_LEASE_SECONDS: '5',
};

const pdfs = new Map<number, string>();

export async function sendFax(
  s: Pick<TestService, 'url'>,
  token: string,
  faxNumber: string,
  o: { pages?: number; priority?: 'high' | 'regular' } = {},
): Promise<string> {
  const pages = o.pages ?? 1;
  let file_data = pdfs.get(pages);
  if (!file_data) {
    file_data = await makePdfBase64(pages);
    pdfs.set(pages, file_data);
  }
  const r = await call(s.url, 'POST', '/v1/faxes/send', {
    token,
    body: {
      fax_number: faxNumber,
      fax_data: [{ file_name: 'doc.pdf', file_data }],
      ...(o.priority ? { fax_priority: o.priority } : {}),
    },
  });
  if (r.http !== 200 || r.body.status !== 1) throw new Error(`send refused: ${JSON.stringify(r.body)}`);
  return r.body.data.job_id as string;
}

const terminal = new Set(['delivered', 'failed', 'cancelled', 'rejected', 'unknown']);

/** GET /v1/faxes/{id} once its state is terminal. */
export async function waitFinal(
  s: Pick<TestService, 'url'>,
  token: string,
  jobId: string,
  timeoutMs = 20_000,
) {
  return eventually(async () => {
    const r = await call(s.url, 'GET', `/v1/faxes/${jobId}`, { token });
    return terminal.has(r.body.data?.state) ? r.body.data : null;
  }, timeoutMs);
}

export async function query<R extends pg.QueryResultRow>(
  databaseUrl: string,
  text: string,
  values: unknown[] = [],
): Promise<R[]> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    return (await c.query<R>(text, values)).rows;
  } finally {
    await c.end();
  }
}

/** First time each job reached `state` (ms since epoch), from the recorded transitions. */
export async function firstReached(
  databaseUrl: string,
  ids: string[],
  state: string,
): Promise<Map<string, number>> {
  const rows = await query<{ job_id: string; at: Date }>(
    databaseUrl,
    `SELECT job_id, min(at) AS at FROM fax_job_transitions
      WHERE job_id = ANY($1::uuid[]) AND to_state = $2 GROUP BY job_id`,
    [ids, state],
  );
  return new Map(rows.map((r) => [r.job_id, r.at.getTime()]));
}

/** Order in which jobs were first dialled (by transition id, which is commit-ordered enough here). */
export async function dialOrder(databaseUrl: string, ids: string[]): Promise<string[]> {
  const rows = await query<{ job_id: string }>(
    databaseUrl,
    `SELECT job_id FROM fax_job_transitions WHERE job_id = ANY($1::uuid[]) AND to_state = 'dialling'
      AND attempt = 1 ORDER BY id`,
    [ids],
  );
  return rows.map((r) => r.job_id);
}
