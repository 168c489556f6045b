// What an idle service costs (not a test): a faxline service with every component (API, workers,
// scheduler, event relay, webhook deliverer, mail gateway, line caller) on its own database and queue
// prefix, receiving nothing, for IDLE_SECONDS. Reported per minute: the service process's CPU, the
// CPU of its PostgreSQL backends, and the transactions PostgreSQL counted for its database (each
// statement outside a transaction is one).
//
// With `before=<checkout>` (another faxline tree, e.g. a worktree of an earlier commit, with
// node_modules), that tree's service is measured in the same run, alternating with this one
// (after, before, after, before, …), so both see the same machine. Each tree runs in a child
// process of its own. Two settings profiles: `default` (every default) and `tests` (the quick polls
// the test suite used: LINE_POLL_MS=20, EVENTS_POLL_MS=50).
//
//   npm run bench:idle [-- before=<checkout>] [seconds=60] [rounds=2]
// Writes bench/results/idle-<time>.json and .md.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = Object.fromEntries(
  process.argv.slice(2).flatMap((a) => {
    const i = a.indexOf('=');
    return i > 0 ? [[a.slice(0, i), a.slice(i + 1)]] : [];
  }),
) as Record<string, string | undefined>;
const SECONDS = Math.min(Math.max(Number(args.seconds ?? process.env.IDLE_SECONDS ?? 60), 5), 600);
const ROUNDS = Math.min(Math.max(Number(args.rounds ?? 2), 1), 10);
const HERE = resolve(new URL('..', import.meta.url).pathname);
const BEFORE = args.before ? resolve(args.before) : undefined;
const profiles: Record<string, Record<string, string>> = {
  default: {},
  tests: { LINE_POLL_MS: '20', EVENTS_POLL_MS: '50' },
};

interface Sample {
  own_cpu_s_per_min: number;
  pg_cpu_s_per_min: number;
  xacts_per_min: number;
}

// The child: starts the tree's service through its test harness (its own database and prefix),
// lets it settle for 3 s, then measures SECONDS of idleness and prints one JSON line.
const child = (tree: string, env: Record<string, string>, seconds: number) => `
import fs from 'node:fs';
import pg from 'pg';
const { startService } = await import(${JSON.stringify(pathToFileURL(`${tree}/test/support/harness.ts`).href)});
const s = await startService({ env: ${JSON.stringify(env)} });
await new Promise((r) => setTimeout(r, 3000));
const c = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
await c.connect();
const db = new URL(s.cfg.DATABASE_URL).pathname.slice(1);
const backends = async () => {
  const r = await c.query('SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [db]);
  let t = 0;
  for (const { pid } of r.rows) {
    try {
      const st = fs.readFileSync('/proc/' + pid + '/stat', 'latin1');
      const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
      t += (Number(f[11]) + Number(f[12])) / 100;
    } catch {}
  }
  return t;
};
const xacts = async () =>
  Number((await c.query('SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1', [db])).rows[0].n);
const u0 = process.cpuUsage(); const b0 = await backends(); const x0 = await xacts();
await new Promise((r) => setTimeout(r, ${seconds * 1000}));
const u1 = process.cpuUsage(u0); const b1 = await backends(); const x1 = await xacts();
const per = 60 / ${seconds};
console.log('IDLE ' + JSON.stringify({
  own_cpu_s_per_min: +(((u1.user + u1.system) / 1e6) * per).toFixed(3),
  pg_cpu_s_per_min: +((b1 - b0) * per).toFixed(3),
  xacts_per_min: Math.round((x1 - x0 - 2) * per),
}));
await c.end();
await s.dropAll();
process.exit(0);
`;

function measure(tree: string, env: Record<string, string>): Promise<Sample> {
  return new Promise((ok, fail) => {
    const p = spawn(process.execPath, ['--input-type=module', '-e', child(tree, env, SECONDS)], {
      cwd: tree,
      env: { ...process.env, LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const bound = setTimeout(() => p.kill('SIGKILL'), (SECONDS + 120) * 1000);
    p.on('exit', (code) => {
      clearTimeout(bound);
      const line = out.split('\n').find((l) => l.startsWith('IDLE '));
      if (code === 0 && line) ok(JSON.parse(line.slice(5)) as Sample);
      else fail(new Error(`${tree}: exit ${code}; ${out.slice(-500)}`));
    });
  });
}

const trees: [string, string][] = [
  ['after', HERE],
  ...(BEFORE ? [['before', BEFORE] as [string, string]] : []),
];
const samples: Record<string, Record<string, Sample[]>> = {};
for (let r = 0; r < ROUNDS; r++)
  for (const [profile, env] of Object.entries(profiles))
    for (const [name, tree] of trees) {
      const m = await measure(tree, env);
      ((samples[profile] ??= {})[name] ??= []).push(m);
      console.log(`round ${r + 1} ${profile} ${name}: ${JSON.stringify(m)}`);
    }

const mean = (xs: number[]) => Number((xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(2));
const summary = Object.entries(samples).flatMap(([profile, byTree]) =>
  Object.entries(byTree).map(([tree, xs]) => ({
    profile,
    tree,
    own_cpu_s_per_min: mean(xs.map((x) => x.own_cpu_s_per_min)),
    pg_cpu_s_per_min: mean(xs.map((x) => x.pg_cpu_s_per_min)),
    xacts_per_min: Math.round(mean(xs.map((x) => x.xacts_per_min))),
  })),
);
const stamp = new Date()
  .toISOString()
  .replace(/:\d\d\.\d+Z$/, 'Z')
  .replace(':', '');
const machine = `${cpus().length} cores (${cpus()[0]?.model ?? '?'}), load average ${loadavg()
  .map((l) => l.toFixed(1))
  .join(' ')} at the end`;
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
const base = new URL(`./results/idle-${stamp}`, import.meta.url).pathname;
writeFileSync(
  `${base}.json`,
  `${JSON.stringify({ seconds: SECONDS, rounds: ROUNDS, before: BEFORE ?? null, machine, profiles, summary, samples }, null, 2)}\n`,
);
writeFileSync(
  `${base}.md`,
  [
    `# An idle service, per minute`,
    '',
    `${stamp}, ${machine}; ${ROUNDS} rounds of ${SECONDS} s per tree and profile, alternating${BEFORE ? `; "before" = ${BEFORE}` : ''}.`,
    '',
    '| profile | tree | service CPU s/min | PostgreSQL CPU s/min | transactions/min |',
    '| --- | --- | ---: | ---: | ---: |',
    ...summary.map(
      (s) =>
        `| ${s.profile} | ${s.tree} | ${s.own_cpu_s_per_min} | ${s.pg_cpu_s_per_min} | ${s.xacts_per_min} |`,
    ),
    '',
  ].join('\n'),
);
console.log(`wrote ${base}.json and .md`);
