// Benchmark: simultaneous receptions over SIP, stored (issue 20). This process is the receiving
// worker: one SIP line answering with src/receive/ (routing, sink, PostgreSQL). The callers are a
// child process of this same script (ROLE=send) placing CALLS calls to it, their starts spread over
// STAGGER_MS, on loopback, every call a real-time fax through the native media engine; their CPU is
// not counted. Reports received pages per CPU-second of the receiving process, the receptions it
// held at once, its media send jitter and event-loop lag, and whether every fax was stored as
// received with its pages.
// Run: npm run bench:receive-sip   (env: CALLS=20 PAGES=1 TRANSPORT=t38|audio STAGGER_MS=10000; or
// T38_CALLS and AUDIO_CALLS for both at once, as bench:sip-calls does) → bench/results/receive-sip-<transport>-<time>.json
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import pg from 'pg';
import client from 'prom-client';
import { migrate } from '../src/db/migrate.ts';
import { createLogger } from '../src/log.ts';
import { answeringHooks, sipAnswering } from '../src/receive/answering.ts';
import { createReceiving } from '../src/receive/component.ts';
import type { StoredReception } from '../src/receive/sink.ts';
import { SipLine } from '../src/transmission/sip/line.ts';
import { loadMediaEngine } from '../src/transmission/sip/media-engine.ts';
import { makeFaxTiff } from '../test/support/faxtiff.ts';
import { createDatabase } from '../test/support/harness.ts';

const media = loadMediaEngine();
if (!media) {
  console.error('needs the SIP media engine: npm run build:native');
  process.exit(1);
}
const CALLS = Number(process.env.CALLS ?? 20);
const PAGES = Number(process.env.PAGES ?? 1);
const TRANSPORT = process.env.TRANSPORT === 'audio' ? 'audio' : 't38';
const STAGGER_MS = Number(process.env.STAGGER_MS ?? 10_000);
const mixed = process.env.T38_CALLS !== undefined || process.env.AUDIO_CALLS !== undefined;
const T38_CALLS = mixed ? Number(process.env.T38_CALLS ?? 0) : TRANSPORT === 't38' ? CALLS : 0;
const AUDIO_CALLS = mixed ? Number(process.env.AUDIO_CALLS ?? 0) : TRANSPORT === 'audio' ? CALLS : 0;
const TOTAL = T38_CALLS + AUDIO_CALLS;
const LABEL = mixed ? 'mixed' : TRANSPORT;
// Media ports: the receiver 40000-43999 (2,000 sessions), the callers 44000-45999 (T.38) and
// 46000-47999 (audio): room for runs beyond the 200 + 100 of issue 20.
const RX_SIP = 38_500;
const TX_SIP = 38_502;

if (process.env.ROLE === 'send') {
  // The callers: one line asking for T.38, one staying on G.711; the calls of both interleaved, their
  // starts spread over STAGGER_MS.
  const line = (t38: 'prefer' | 'off', port: number, rtp: number) =>
    new SipLine({
      trunk: `sip:127.0.0.1:${RX_SIP};transport=udp`,
      listen: { host: '127.0.0.1', port },
      publicAddress: '127.0.0.1',
      t38,
      rtpPorts: { min: rtp, max: rtp + 1999 },
      ringTimeoutMs: 30_000,
      media,
    });
  const txT38 = line('prefer', TX_SIP, 44_000);
  const txAudio = line('off', TX_SIP + 2, 46_000);
  const order = [
    ...Array.from({ length: T38_CALLS }, (_, k) => ({ at: k / T38_CALLS, tx: txT38 })),
    ...Array.from({ length: AUDIO_CALLS }, (_, k) => ({ at: (k + 0.5) / AUDIO_CALLS, tx: txAudio })),
  ].sort((a, b) => a.at - b.at);
  const tiff = readFileSync(makeFaxTiff(PAGES, 'standard'));
  const cpu0 = process.cpuUsage();
  const outcomes = await Promise.all(
    order.map(async ({ tx }, i) => {
      await new Promise((r) => setTimeout(r, (STAGGER_MS * i) / TOTAL));
      return tx.transmit(
        {
          jobId: `bench-${i}`,
          attempt: 1,
          faxNumber: '+15550009999',
          callerId: '+15550001111',
          quality: 'standard',
          pageBytes: Array.from({ length: PAGES }, () => 15_000),
          tiff,
        },
        {
          signal: new AbortController().signal,
          deadline: new Date(Date.now() + 600_000),
          onProgress: () => undefined,
        },
      );
    }),
  );
  const c = process.cpuUsage(cpu0);
  await txT38.close();
  await txAudio.close();
  console.log(
    JSON.stringify({
      sent_ok: outcomes.filter((o) => o.ok).length,
      failed: outcomes.filter((o) => !o.ok).map((o) => (o.ok ? '' : `${o.code}: ${o.message}`)),
      cpu_s: (c.user + c.system) / 1e6,
    }),
  );
  process.exit(0);
}

const db = await createDatabase();
const pool = new pg.Pool({ connectionString: db.url, max: 8 });
const log = createLogger('warn');
let rx: SipLine | undefined;
try {
  await migrate(pool);
  const acc = await pool.query<{ id: string }>(`INSERT INTO accounts (name) VALUES ('bench') RETURNING id`);
  await pool.query(`INSERT INTO numbers (account_id, number, receive) VALUES ($1, '+15550009999', true)`, [
    acc.rows[0]!.id,
  ]);
  const stored: (StoredReception | null)[] = [];
  rx = new SipLine({
    trunk: 'sip:127.0.0.1:9;transport=udp',
    listen: { host: '127.0.0.1', port: RX_SIP },
    publicAddress: '127.0.0.1',
    t38: T38_CALLS > 0 ? 'accept' : 'off',
    rtpPorts: { min: 40_000, max: 43_999 },
    ringTimeoutMs: 30_000,
    media,
  });
  const receiving = await createReceiving({
    db: pool,
    log,
    registry: new client.Registry(),
    trunk: '',
    cfg: { SIP_INBOUND_ALLOW: '127.0.0.1', SIP_INBOUND_COUNTRY_CODE: '', INBOUND_LINES: TOTAL },
  });
  await rx.answer(sipAnswering(await answeringHooks(receiving), log, { onStored: (s) => stored.push(s) }));
  // Receptions running at once, sampled from the engine every 200 ms.
  let atOnce = 0;
  const sampler = setInterval(() => (atOnce = Math.max(atOnce, media.active())), 200);
  const loadAtStart = loadavg().map((l) => +l.toFixed(2));
  const lag = monitorEventLoopDelay({ resolution: 10 });
  lag.enable();
  media.engineStats(true);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const child = spawn(process.execPath, [new URL(import.meta.url).pathname], {
    env: { ...process.env, ROLE: 'send' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  await new Promise((r) => child.on('exit', r));
  const sender = JSON.parse(out.trim().split('\n').at(-1) ?? '{}') as {
    sent_ok: number;
    failed: string[];
    cpu_s: number;
  };
  // The last stores follow the last calls by a few milliseconds.
  for (let i = 0; i < 200 && stored.length < TOTAL; i++) await new Promise((r) => setTimeout(r, 50));
  const wallS = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(cpu0);
  clearInterval(sampler);
  lag.disable();
  const jitter = media.engineStats();
  const cpuS = (c.user + c.system) / 1e6;
  const received = stored.filter((s) => s?.status === 'received' && s.pages === PAGES).length;
  const pages = stored.reduce((n, s) => n + (s?.pages ?? 0), 0);
  const result = {
    date: new Date().toISOString(),
    transport: LABEL,
    calls: TOTAL,
    t38_calls: T38_CALLS,
    audio_calls: AUDIO_CALLS,
    pages_per_fax: PAGES,
    stagger_ms: STAGGER_MS,
    load_average_start: loadAtStart,
    load_average_end: loadavg().map((l) => +l.toFixed(2)),
    receptions_at_once: atOnce,
    sent_ok: sender.sent_ok,
    sender_failures: sender.failed.slice(0, 5),
    stored_received: received,
    stored_other: stored
      .filter((s) => !(s?.status === 'received' && s.pages === PAGES))
      .map((s) => s?.status),
    pages_received: pages,
    wall_s: +wallS.toFixed(1),
    receiver_cpu_s: +cpuS.toFixed(2),
    sender_cpu_s_not_counted: +sender.cpu_s.toFixed(2),
    received_pages_per_cpu_second: +(pages / cpuS).toFixed(1),
    cpu_ms_per_received_page: +((cpuS * 1000) / Math.max(1, pages)).toFixed(1),
    send_jitter_p99_ms: +(jitter.p99Us / 1000).toFixed(2),
    send_jitter_p999_ms: +(jitter.p999Us / 1000).toFixed(2),
    late_resets: jitter.lateResets,
    realtime: jitter.realtime,
    event_loop_lag_p99_ms: +(lag.percentile(99) / 1e6).toFixed(1),
    event_loop_lag_max_ms: +(lag.max / 1e6).toFixed(1),
  };
  const stamp = result.date.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
  writeFileSync(
    new URL(`./results/receive-sip-${LABEL}-${stamp}.json`, import.meta.url),
    JSON.stringify(result, null, 2) + '\n',
  );
  console.log(result);
} finally {
  await rx?.close();
  await pool.end();
  await db.drop();
}
