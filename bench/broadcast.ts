// Broadcast benchmark (not a test): one POST /v1/faxes/send with N recipients against a baseline of
// N single sends of the same document in the same run, on one service started in this process
// (real PostgreSQL and RabbitMQ, the simulated line with no line time, a cover page per fax). For
// each: recipients accepted per second (from the first request to the last answer), seconds until
// every job is terminal (delivered), and document renders (the send worker's count: a single send
// renders its documents for every job; a broadcast once). Alternates the two BENCH_ROUNDS times and
// reports each round and the medians. Writes bench/results/broadcast.json and broadcast.md.
//
//   npm run bench:broadcast      (BENCH_RECIPIENTS=200 BENCH_ROUNDS=3 BENCH_PAGES=3 BENCH_CONCURRENCY=16)
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import pg from 'pg';
import { parseExposition, sumOf } from '../src/metrics/exposition.ts';
import { call, seedAccount, tokenFor } from '../test/support/client.ts';
import { eventually, startService } from '../test/support/harness.ts';
import { makePdfBase64 } from '../test/support/pdf.ts';

const N = Number(process.env.BENCH_RECIPIENTS ?? 200);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const PAGES = Number(process.env.BENCH_PAGES ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);

interface Round {
  mode: 'broadcast' | 'single sends';
  round: number;
  recipients: number;
  accept_seconds: number;
  recipients_accepted_per_second: number;
  seconds_to_all_delivered: number;
  document_renders: number;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

async function main(): Promise<void> {
  const s = await startService({
    env: {
      SIM_SPEEDUP: '0',
      LINES: '64',
      LINE_POLL_MS: '50',
      LOG_LEVEL: 'warn',
      BROADCAST_MAX_RECIPIENTS: '10000',
    },
  });
  const owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
  await owner.connect();
  try {
    const seed = await seedAccount(s, { cover: true });
    const token = await tokenFor(s.url, seed.api_key);
    const pdf = await makePdfBase64(PAGES);
    const fax_data = [{ file_name: 'notice.pdf', file_data: pdf }];
    const metrics = async () => parseExposition(await (await fetch(`${s.url}/metrics`)).text());
    // Document renders: every preparation of a single send renders its documents; a broadcast's
    // preparations render them only when faxline_broadcast_renders_total says "rendered".
    const renders = async () => {
      const m = await metrics();
      const prepared = sumOf(m, 'faxline_document_preparation_seconds_count');
      const reused = sumOf(m, 'faxline_broadcast_renders_total', { outcome: 'reused' });
      return prepared - reused;
    };
    const allDelivered = (ids: string[]) =>
      eventually(
        async () => {
          const r = await owner.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM fax_jobs WHERE id = ANY($1::uuid[]) AND state = 'delivered'`,
            [ids],
          );
          return r.rows[0]!.n === ids.length;
        },
        600_000,
        100,
      );
    let base = 5_550_300_000;
    const numbers = () => Array.from({ length: N }, () => `+1${base++}`);

    const rounds: Round[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      for (const mode of ['single sends', 'broadcast'] as const) {
        const to = numbers();
        const r0 = await renders();
        const t0 = performance.now();
        let ids: string[];
        if (mode === 'broadcast') {
          const r = await call(s.url, 'POST', '/v1/faxes/send', {
            token,
            body: { recipients: to.map((fax_number) => ({ fax_number })), fax_data },
          });
          if (r.http !== 200) throw new Error(`broadcast refused: ${JSON.stringify(r.body)}`);
          ids = r.body.data.job_ids as string[];
        } else {
          ids = [];
          let next = 0;
          await Promise.all(
            Array.from({ length: CONCURRENCY }, async () => {
              while (next < to.length) {
                const fax_number = to[next++]!;
                const r = await call(s.url, 'POST', '/v1/faxes/send', {
                  token,
                  body: { fax_number, fax_data },
                });
                if (r.http !== 200) throw new Error(`send refused: ${JSON.stringify(r.body)}`);
                ids.push(r.body.data.job_id as string);
              }
            }),
          );
        }
        const accepted = (performance.now() - t0) / 1000;
        await allDelivered(ids);
        const delivered = (performance.now() - t0) / 1000;
        const row: Round = {
          mode,
          round,
          recipients: N,
          accept_seconds: Number(accepted.toFixed(3)),
          recipients_accepted_per_second: Math.round(N / accepted),
          seconds_to_all_delivered: Number(delivered.toFixed(2)),
          document_renders: (await renders()) - r0,
        };
        rounds.push(row);
        console.log(JSON.stringify(row));
      }
    }

    const summary = (['single sends', 'broadcast'] as const).map((mode) => {
      const rs = rounds.filter((r) => r.mode === mode);
      return {
        mode,
        recipients_accepted_per_second: median(rs.map((r) => r.recipients_accepted_per_second)),
        seconds_to_all_delivered: median(rs.map((r) => r.seconds_to_all_delivered)),
        document_renders: median(rs.map((r) => r.document_renders)),
      };
    });
    const at = new Date().toISOString();
    const machine = { cpus: cpus().length, model: cpus()[0]?.model ?? '', loadavg_at_start: loadavg() };
    const out = {
      at,
      recipients: N,
      rounds: ROUNDS,
      document_pages: PAGES,
      single_send_concurrency: CONCURRENCY,
      machine,
      summary,
      per_round: rounds,
    };
    writeFileSync('bench/results/broadcast.json', `${JSON.stringify(out, null, 2)}\n`);
    const [single, bcast] = summary;
    const md = [
      '# Broadcast benchmark',
      '',
      `\`npm run bench:broadcast\` at ${at}: ${N} recipients, a ${PAGES}-page PDF with a cover page per fax, ` +
        `${ROUNDS} rounds alternating ${N} single sends (${CONCURRENCY} requests in flight) and one broadcast ` +
        `of ${N}, on one service in one process (real PostgreSQL and RabbitMQ on loopback, simulated line ` +
        `with no line time, 64 lines). Machine: ${machine.cpus} CPUs (${machine.model}), load ${machine.loadavg_at_start.map((x) => x.toFixed(2)).join(' ')} at start, shared with other work.`,
      '',
      '| mode | recipients accepted / s | s until all delivered | document renders |',
      '| --- | ---: | ---: | ---: |',
      ...summary.map(
        (x) =>
          `| ${x.mode} (median) | ${x.recipients_accepted_per_second} | ${x.seconds_to_all_delivered} | ${x.document_renders} |`,
      ),
      '',
      `Broadcast against single sends: ${(bcast!.recipients_accepted_per_second / single!.recipients_accepted_per_second).toFixed(1)}× the recipients accepted per second, ` +
        `${(single!.seconds_to_all_delivered / bcast!.seconds_to_all_delivered).toFixed(1)}× faster to all delivered, ` +
        `${bcast!.document_renders} document render(s) instead of ${single!.document_renders}.`,
      '',
      'Each round:',
      '',
      '| round | mode | accepted in s | recipients accepted / s | s until all delivered | document renders |',
      '| ---: | --- | ---: | ---: | ---: | ---: |',
      ...rounds.map(
        (r) =>
          `| ${r.round} | ${r.mode} | ${r.accept_seconds} | ${r.recipients_accepted_per_second} | ${r.seconds_to_all_delivered} | ${r.document_renders} |`,
      ),
      '',
    ].join('\n');
    writeFileSync('bench/results/broadcast.md', md);
    console.log(md);
  } finally {
    await owner.end();
    await s.dropAll();
  }
}

await main();
