// Benchmark: simultaneous real-time fax calls held by one process through the SIP media engine
// (native/spandsp/faxmedia.c), on loopback: T38_PAIRS pairs over UDPTL/T.38 and AUDIO_PAIRS pairs
// over RTP/G.711, each pair a sender and a receiver session of this same process, so every call is
// counted twice in packets and CPU (both ends). Reports the process's CPU per call, the media
// packets' send-time deviation p99 (native histogram), the event loop's delay p99, and whether every
// received TIFF is identical to the one sent (tiffcmp).
// Run: npm run bench:sip-media   (env: T38_PAIRS=200 AUDIO_PAIRS=100 PAGES=1 STAGGER_MS=10000
//      THREADS=<media threads> REALTIME=1 PORT_MIN=34000 PORT_MAX=35999) → bench/results/sip-media-<time>.{json,md}
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { MediaResult, MediaSession, T38Params } from '../src/transmission/sip/media.ts';
import { loadFaxmedia, NativeMediaEngine } from '../src/transmission/sip/media-engine.ts';
import { makeFaxTiff, sameImages } from '../test/support/faxtiff.ts';

if (!loadFaxmedia()) {
  console.error(
    'bench:sip-media needs the addon: apt-get install libspandsp-dev libtiff-dev && npm run build:native',
  );
  process.exit(1);
}
const num = (name: string, def: number) => {
  const v = Number(process.env[name] ?? def);
  if (!Number.isFinite(v) || v < 0) throw new Error(`${name} must be a non-negative number`);
  return v;
};
const T38_PAIRS = num('T38_PAIRS', 200);
const AUDIO_PAIRS = num('AUDIO_PAIRS', 100);
const PAGES = num('PAGES', 1);
const STAGGER_MS = num('STAGGER_MS', 10_000);
const PORT_MIN = num('PORT_MIN', 34000);
const PORT_MAX = num('PORT_MAX', 35999);
const threads = process.env.THREADS ? num('THREADS', 2) : undefined;
const realtime = process.env.REALTIME !== '0';
const host = '127.0.0.1';
const t38: T38Params = {
  version: 0,
  maxBitRate: 14400,
  rateManagement: 'transferredTCF',
  maxDatagram: 400,
  errorCorrection: 'redundancy',
  fillBitRemoval: false,
};

const engine = new NativeMediaEngine(threads === undefined ? { realtime } : { threads, realtime });
const tif = makeFaxTiff(PAGES, 'standard');
const dir = mkdtempSync(join(tmpdir(), 'faxline-bench-media-'));

interface Call {
  transport: 'audio' | 't38';
  tx: MediaSession;
  rx: MediaSession;
  rxFile: string;
  results: Promise<[MediaResult, MediaResult]>;
}

function run(session: MediaSession, o: Parameters<MediaSession['start']>[0]): Promise<MediaResult> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no done within 5 minutes')), 300_000);
    session.start(o, (e) => {
      if (e.type !== 'done') return;
      clearTimeout(timer);
      resolve(e.result);
    });
  });
}

function call(i: number, transport: 'audio' | 't38'): Call {
  const tx = engine.open({ address: host, portMin: PORT_MIN, portMax: PORT_MAX });
  const rx = engine.open({ address: host, portMin: PORT_MIN, portMax: PORT_MAX });
  const rxFile = join(dir, `${transport}-${i}.tif`);
  const common = { ecm: true, transport, payloadType: 0, t38, maxMs: 240_000 } as const;
  const results = Promise.all([
    run(tx, {
      role: 'send',
      file: tif,
      ident: `tx${i}`,
      remote: { address: host, port: rx.port },
      ...common,
    }),
    run(rx, {
      role: 'receive',
      file: rxFile,
      ident: `rx${i}`,
      remote: { address: host, port: tx.port },
      ...common,
    }),
  ]);
  return { transport, tx, rx, rxFile, results };
}

const total = T38_PAIRS + AUDIO_PAIRS;
console.log(
  `bench:sip-media: ${T38_PAIRS} T.38 + ${AUDIO_PAIRS} audio pairs, ${PAGES} page(s), starts spread over ${STAGGER_MS} ms, load ${loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
);
const lag = monitorEventLoopDelay({ resolution: 10 });
lag.enable();
engine.engineStats(true);
const cpu0 = process.cpuUsage();
const t0 = performance.now();
const calls: Call[] = [];
let peak = 0;
// interleave the two kinds evenly so both are running at once through the whole window
const order = Array.from({ length: total }, (_, i) =>
  Math.floor(((i + 1) * T38_PAIRS) / total) > Math.floor((i * T38_PAIRS) / total)
    ? ('t38' as const)
    : ('audio' as const),
);
for (let i = 0; i < order.length; i++) {
  calls.push(call(i, order[i]!));
  peak = Math.max(peak, engine.active());
  if (STAGGER_MS > 0 && total > 1) await new Promise((r) => setTimeout(r, STAGGER_MS / total));
}
const sampler = setInterval(() => (peak = Math.max(peak, engine.active())), 250);
const settled = await Promise.allSettled(calls.map((c) => c.results));
clearInterval(sampler);
const wallS = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
lag.disable();
const jitter = engine.engineStats();
const cpuS = (cpu.user + cpu.system) / 1e6;

const byKind = (k: 'audio' | 't38') => {
  const idx = calls.map((c, i) => i).filter((i) => calls[i]!.transport === k);
  let ok = 0;
  let identical = 0;
  let failures: string[] = [];
  const sessionP99: number[] = [];
  const durations: number[] = [];
  let lost = 0;
  let recovered = 0;
  for (const i of idx) {
    const c = calls[i]!;
    const s = settled[i]!;
    const st = [c.tx.stats(), c.rx.stats()];
    sessionP99.push(...st.map((x) => x.sendJitterP99Us));
    lost += st[0]!.lost + st[1]!.lost;
    recovered += st[0]!.recovered + st[1]!.recovered;
    if (s.status === 'fulfilled' && s.value[0].ok && s.value[1].ok && s.value[1].pages === PAGES) {
      ok++;
      durations.push(s.value[0].durationMs);
      if (sameImages(tif, c.rxFile).same) identical++;
    } else if (failures.length < 5) {
      failures.push(s.status === 'fulfilled' ? `${s.value[0].text} / ${s.value[1].text}` : String(s.reason));
    }
  }
  sessionP99.sort((a, b) => a - b);
  durations.sort((a, b) => a - b);
  failures = [...new Set(failures)];
  return {
    pairs: idx.length,
    ok,
    identical,
    failures,
    session_jitter_p99_us_median: sessionP99[Math.floor(sessionP99.length / 2)] ?? 0,
    session_jitter_p99_us_max: sessionP99.at(-1) ?? 0,
    fax_seconds_median: +((durations[Math.floor(durations.length / 2)] ?? 0) / 1000).toFixed(1),
    lost,
    recovered,
  };
};
const t38Result = byKind('t38');
const audioResult = byKind('audio');
for (const c of calls) {
  c.tx.close();
  c.rx.close();
}
rmSync(dir, { recursive: true, force: true });

const cores = cpuS / wallS;
const result = {
  date: new Date().toISOString(),
  node: process.version,
  cpu: `${cpus()[0]?.model ?? '?'} x${availableParallelism()}`,
  load_average_at_end: loadavg().map((l) => +l.toFixed(2)),
  settings: {
    T38_PAIRS,
    AUDIO_PAIRS,
    PAGES,
    STAGGER_MS,
    media_threads: jitter.threads,
    realtime: jitter.realtime,
  },
  tiff_bytes: statSync(tif).size,
  peak_active_sessions: peak,
  wall_seconds: +wallS.toFixed(1),
  process_cpu_seconds: +cpuS.toFixed(1),
  cores_used_average: +cores.toFixed(2),
  // each call is two sessions here (both ends), so one call of a real gateway costs half of this
  cpu_percent_of_a_core_per_pair_while_running: +((100 * cores) / Math.max(1, total)).toFixed(3),
  cpu_seconds_per_fax_pair: +(cpuS / Math.max(1, total)).toFixed(3),
  send_jitter_us: { p50: jitter.p50Us, p99: jitter.p99Us, p999: jitter.p999Us, samples: jitter.samples },
  late_resets: jitter.lateResets,
  event_loop_lag_ms: {
    p50: +(lag.percentile(50) / 1e6).toFixed(1),
    p99: +(lag.percentile(99) / 1e6).toFixed(1),
  },
  t38: t38Result,
  audio: audioResult,
  targets: {
    jitter_p99_under_5ms: jitter.p99Us < 5000,
    lag_p99_under_50ms: lag.percentile(99) / 1e6 < 50,
    all_identical: t38Result.identical === T38_PAIRS && audioResult.identical === AUDIO_PAIRS,
  },
};
console.log(JSON.stringify(result, null, 2));
const stamp = result.date.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
const out = new URL('./results/', import.meta.url);
mkdirSync(out, { recursive: true });
writeFileSync(new URL(`sip-media-${stamp}.json`, out), JSON.stringify(result, null, 2) + '\n');
const md = `# SIP media engine benchmark ${result.date}

Command: \`T38_PAIRS=${T38_PAIRS} AUDIO_PAIRS=${AUDIO_PAIRS} PAGES=${PAGES} STAGGER_MS=${STAGGER_MS}${realtime ? '' : ' REALTIME=0'} npm run bench:sip-media\`
on ${result.cpu}, load average at the end ${result.load_average_at_end.join(' ')} (a machine shared with other work).
Both ends of every call run in this one process: ${2 * total} sessions, ${result.peak_active_sessions} at once at the peak.

| figure | value | target |
|---|---|---|
| T.38 pairs received identical | ${t38Result.identical} / ${T38_PAIRS} | all |
| audio pairs received identical | ${audioResult.identical} / ${AUDIO_PAIRS} | all |
| send jitter p99 (all media packets) | ${(jitter.p99Us / 1000).toFixed(2)} ms | < 5 ms |
| event-loop lag p99 | ${result.event_loop_lag_ms.p99} ms | < 50 ms |
| process CPU | ${result.cores_used_average} cores on average over ${result.wall_seconds} s | |
| CPU per pair (both ends) | ${result.cpu_percent_of_a_core_per_pair_while_running} % of a core | |
| median fax time T.38 / audio | ${t38Result.fax_seconds_median} s / ${audioResult.fax_seconds_median} s | |

Media threads: ${jitter.threads}, real-time priority: ${jitter.realtime}. Failures (first few): ${
  [...t38Result.failures, ...audioResult.failures].join('; ') || 'none'
}.
`;
writeFileSync(new URL(`sip-media-${stamp}.md`, out), md);
console.log(`bench:sip-media: wrote bench/results/sip-media-${stamp}.{json,md}`);
