// Benchmark: simultaneous real-time fax calls held by ONE sending process through faxline's SIP line
// (SipLine.transmit, BACKEND=sip), with real SIP signalling on loopback: T38_CALLS calls that the
// far end re-INVITEs to T.38 (UDPTL) and AUDIO_CALLS calls that stay on G.711 audio (RTP). The far
// end is faxline's own answering line (SipLine.answer) in a separate child process
// (bench/sip-calls-answer.ts), so its CPU is not counted here. Direct user agent to user agent: no
// Kamailio or other proxy in the path. Reports for the sending process: CPU seconds per call
// (process.cpuUsage, which counts every thread of the process, the media engine's threads included),
// media send jitter p99 (the engine's native histogram), event-loop lag p99 (monitorEventLoopDelay),
// calls ok/failed, and whether every received TIFF is identical to the one sent (libtiff's tiffcmp).
// Run: npm run bench:sip-calls   (env: T38_CALLS=200 AUDIO_CALLS=100 PAGES=1 STAGGER_MS=10000
//      REALTIME=1) → bench/results/sip-calls-<time>.{json,md}
// Ports: SIP 36000-36001 (sender) and 36010-36011 (answerer), RTP/UDPTL 33000-33999 (sender) and
// 34000-34999 (answerer), all on 127.0.0.1.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import type { Outcome, PreparedFax } from '../src/transmission/backend.ts';
import { SipLine, type ReceivedFax } from '../src/transmission/sip/line.ts';
import { loadFaxmedia, NativeMediaEngine } from '../src/transmission/sip/media-engine.ts';
import { makeFaxTiff, sameImages } from '../test/support/faxtiff.ts';

if (!loadFaxmedia()) {
  console.error(
    'bench:sip-calls needs the addon: apt-get install libspandsp-dev libtiff-dev && npm run build:native',
  );
  process.exit(1);
}
const num = (name: string, def: number) => {
  const v = Number(process.env[name] ?? def);
  if (!Number.isFinite(v) || v < 0) throw new Error(`${name} must be a non-negative number`);
  return v;
};
const T38_CALLS = num('T38_CALLS', 200);
const AUDIO_CALLS = num('AUDIO_CALLS', 100);
const PAGES = Math.max(1, num('PAGES', 1));
const STAGGER_MS = num('STAGGER_MS', 10_000);
const realtime = process.env.REALTIME !== '0';
const host = '127.0.0.1';
const SIP = { sendT38: 36000, sendAudio: 36001, answerT38: 36010, answerAudio: 36011 };
const RTP = { send: [33000, 33999], answer: [34000, 34999] } as const;
const CALL_LIMIT_MS = 300_000;

const tif = makeFaxTiff(PAGES, 'standard');
const tiff = readFileSync(tif);
const dir = mkdtempSync(join(tmpdir(), 'faxline-bench-sipcalls-'));

// The answering side: a child process; one JSON line per received call.
const child = spawn(
  process.execPath,
  [
    new URL('./sip-calls-answer.ts', import.meta.url).pathname,
    String(SIP.answerT38),
    String(SIP.answerAudio),
    dir,
    String(RTP.answer[0]),
    String(RTP.answer[1]),
  ],
  { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env } },
);
const received = new Map<string, ReceivedFax>();
let onReceived = () => {};
const listening = new Promise<void>((resolve, reject) => {
  const t = setTimeout(() => reject(new Error('the answering process did not listen within 20 s')), 20_000);
  child.once('exit', (code) => reject(new Error(`the answering process exited (${code})`)));
  createInterface({ input: child.stdout }).on('line', (l) => {
    let m: { listening?: number[]; received?: ReceivedFax };
    try {
      m = JSON.parse(l) as typeof m;
    } catch {
      return;
    }
    if (m.listening) {
      clearTimeout(t);
      resolve();
    }
    if (m.received) {
      received.set(m.received.callId, m.received);
      onReceived();
    }
  });
});
const stopChild = () => {
  if (child.exitCode === null) child.kill('SIGTERM');
};
process.on('exit', stopChild);
await listening;

const media = new NativeMediaEngine({ realtime });
const mid = Math.floor((RTP.send[0] + RTP.send[1]) / 2);
const mkLine = (listenPort: number, farPort: number, min: number, max: number) =>
  new SipLine({
    trunk: `sip:${host}:${farPort};transport=udp`,
    listen: { host, port: listenPort },
    t38: 'accept',
    rtpPorts: { min, max },
    ringTimeoutMs: 30_000,
    media,
  });
const lines = {
  t38: mkLine(SIP.sendT38, SIP.answerT38, RTP.send[0], mid),
  audio: mkLine(SIP.sendAudio, SIP.answerAudio, mid + 1, RTP.send[1]),
};
await Promise.all([lines.t38.start(), lines.audio.start()]);

interface Call {
  kind: 'audio' | 't38';
  outcome: Promise<Outcome>;
}
function place(i: number, kind: 'audio' | 't38'): Call {
  const fax: PreparedFax = {
    jobId: `bench-${i}`,
    attempt: 1,
    faxNumber: `+1555010${String(i).padStart(4, '0')}`,
    callerId: '+15550199999',
    quality: 'standard',
    pageBytes: Array.from({ length: PAGES }, () => Math.ceil(tiff.length / PAGES)),
    tiff,
  };
  const deadline = new Date(Date.now() + CALL_LIMIT_MS);
  const signal = AbortSignal.timeout(CALL_LIMIT_MS);
  return { kind, outcome: lines[kind].transmit(fax, { signal, deadline, onProgress: () => {} }) };
}

const total = T38_CALLS + AUDIO_CALLS;
const loadAtStart = loadavg().map((l) => +l.toFixed(2));
console.log(
  `bench:sip-calls: ${T38_CALLS} T.38 + ${AUDIO_CALLS} audio calls over SIP, ${PAGES} page(s), starts spread over ${STAGGER_MS} ms, load ${loadAtStart.join(' ')}`,
);
const lag = monitorEventLoopDelay({ resolution: 10 });
lag.enable();
media.engineStats(true);
const cpu0 = process.cpuUsage();
const t0 = performance.now();
const calls: Call[] = [];
let peak = 0;
const order = Array.from({ length: total }, (_, i) =>
  Math.floor(((i + 1) * T38_CALLS) / total) > Math.floor((i * T38_CALLS) / total)
    ? ('t38' as const)
    : ('audio' as const),
);
const sampler = setInterval(() => (peak = Math.max(peak, media.active())), 250);
for (let i = 0; i < order.length; i++) {
  calls.push(place(i, order[i]!));
  if (STAGGER_MS > 0 && total > 1) await new Promise((r) => setTimeout(r, STAGGER_MS / total));
}
const settled = await Promise.allSettled(calls.map((c) => c.outcome));
clearInterval(sampler);
const wallS = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
lag.disable();
const jitter = media.engineStats();
const cpuS = (cpu.user + cpu.system) / 1e6;
const loadAtEnd = loadavg().map((l) => +l.toFixed(2));

// The receiver reports after its own end of each call: wait for the answered calls' reports (bounded).
const callIds = settled.map((s) =>
  s.status === 'fulfilled' ? (s.value.engine?.sip_call_id as string | undefined) : undefined,
);
const wanted = callIds.filter((id): id is string => id !== undefined);
await new Promise<void>((resolve) => {
  const t = setTimeout(resolve, 30_000);
  const check = () => {
    if (!wanted.every((id) => received.has(id))) return;
    clearTimeout(t);
    resolve();
  };
  onReceived = check;
  check();
});
// the receiver's CPU, for information only (not counted above): utime + stime from /proc
let receiverCpuS: number | undefined;
try {
  const f = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  receiverCpuS = +((Number(f[11]) + Number(f[12])) / 100).toFixed(1);
} catch {
  receiverCpuS = undefined;
}

const byKind = (k: 'audio' | 't38') => {
  let ok = 0;
  let identical = 0;
  let onT38 = 0;
  const failures = new Set<string>();
  const durations: number[] = [];
  calls.forEach((c, i) => {
    if (c.kind !== k) return;
    const s = settled[i]!;
    if (s.status === 'rejected') return void failures.add(String(s.reason));
    const o = s.value;
    if (o.engine?.transport === 't38') onT38++;
    if (!o.ok) return void failures.add(`${o.type}: ${o.message}`);
    ok++;
    durations.push(o.durationMs);
    const r = received.get(callIds[i]!);
    if (!r) return void failures.add('sent, but the receiver never reported the call');
    if (!r.ok) return void failures.add(`receiver: ${r.reason}`);
    const cmp = sameImages(tif, r.file);
    if (cmp.same) identical++;
    else failures.add(`received TIFF differs (tiffcmp): ${cmp.output.trim().slice(0, 200)}`);
  });
  durations.sort((a, b) => a - b);
  const n = calls.filter((c) => c.kind === k).length;
  return {
    calls: n,
    ok,
    failed: n - ok,
    identical,
    carried_on_t38: onT38,
    failures: [...failures].slice(0, 5),
    call_seconds_median: +((durations[Math.floor(durations.length / 2)] ?? 0) / 1000).toFixed(1),
  };
};
const t38Result = byKind('t38');
const audioResult = byKind('audio');
await Promise.all([lines.t38.close(), lines.audio.close()]);
stopChild();
rmSync(dir, { recursive: true, force: true });

const result = {
  date: new Date().toISOString(),
  node: process.version,
  cpu: `${cpus()[0]?.model ?? '?'} x${availableParallelism()}`,
  load_average_at_start: loadAtStart,
  load_average_at_end: loadAtEnd,
  setup:
    'one sending process (two SipLine user agents sharing one media engine) → direct UA-to-UA SIP over UDP on 127.0.0.1, no proxy → answering SipLines in a child process',
  settings: {
    T38_CALLS,
    AUDIO_CALLS,
    PAGES,
    STAGGER_MS,
    media_threads: jitter.threads,
    realtime: jitter.realtime,
  },
  tiff_bytes: statSync(tif).size,
  peak_active_media_sessions_sender: peak,
  wall_seconds: +wallS.toFixed(1),
  sender_cpu_seconds: +cpuS.toFixed(1),
  sender_cores_used_average: +(cpuS / wallS).toFixed(2),
  sender_cpu_seconds_per_call: +(cpuS / Math.max(1, total)).toFixed(3),
  receiver_cpu_seconds_not_counted: receiverCpuS,
  send_jitter_us: { p50: jitter.p50Us, p99: jitter.p99Us, p999: jitter.p999Us, samples: jitter.samples },
  late_resets: jitter.lateResets,
  event_loop_lag_ms: {
    p50: +(lag.percentile(50) / 1e6).toFixed(1),
    p99: +(lag.percentile(99) / 1e6).toFixed(1),
    max: +(lag.max / 1e6).toFixed(1),
  },
  t38: t38Result,
  audio: audioResult,
  targets: {
    jitter_p99_under_5ms: jitter.p99Us < 5000,
    lag_p99_under_50ms: lag.percentile(99) / 1e6 < 50,
    all_identical: t38Result.identical === T38_CALLS && audioResult.identical === AUDIO_CALLS,
  },
};
console.log(JSON.stringify(result, null, 2));
const stamp = result.date.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
const out = new URL('./results/', import.meta.url);
mkdirSync(out, { recursive: true });
writeFileSync(new URL(`sip-calls-${stamp}.json`, out), JSON.stringify(result, null, 2) + '\n');
const md = `# SIP calls benchmark ${result.date}

Command: \`T38_CALLS=${T38_CALLS} AUDIO_CALLS=${AUDIO_CALLS} PAGES=${PAGES} STAGGER_MS=${STAGGER_MS}${realtime ? '' : ' REALTIME=0'} npm run bench:sip-calls\`
on ${result.cpu}, load average ${loadAtStart.join(' ')} at the start and ${loadAtEnd.join(' ')} at the end (a machine shared with other work).
One sending process places every call through SipLine.transmit with real SIP signalling over UDP on
loopback, directly to faxline's answering SipLine in a separate child process (no Kamailio or other
proxy). Figures are the sending process's; the receiver's CPU (${receiverCpuS ?? '?'} s) is not counted.

| figure | value | target |
|---|---|---|
| T.38 calls ok / received identical | ${t38Result.ok} / ${t38Result.identical} of ${T38_CALLS} (${t38Result.carried_on_t38} switched to T.38) | all |
| audio calls ok / received identical | ${audioResult.ok} / ${audioResult.identical} of ${AUDIO_CALLS} | all |
| media send jitter p99 (p99.9) | ${(jitter.p99Us / 1000).toFixed(2)} ms (${(jitter.p999Us / 1000).toFixed(2)} ms) | < 5 ms |
| event-loop lag p99 (max) | ${result.event_loop_lag_ms.p99} ms (${result.event_loop_lag_ms.max} ms) | < 50 ms |
| sender CPU | ${result.sender_cpu_seconds} s over ${result.wall_seconds} s (${result.sender_cores_used_average} cores on average) | |
| sender CPU per call | ${result.sender_cpu_seconds_per_call} s | |
| peak media sessions in the sender | ${peak} | |
| median call time T.38 / audio | ${t38Result.call_seconds_median} s / ${audioResult.call_seconds_median} s | |

Media threads: ${jitter.threads}, real-time priority: ${jitter.realtime}. Failures (first few): ${
  [...t38Result.failures, ...audioResult.failures].join('; ') || 'none'
}.
`;
writeFileSync(new URL(`sip-calls-${stamp}.md`, out), md);
console.log(`bench:sip-calls: wrote bench/results/sip-calls-${stamp}.{json,md}`);
process.exit(0);
