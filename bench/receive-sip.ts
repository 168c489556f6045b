// Benchmark: simultaneous receptions over SIP, stored (issue 20). One SIP line answers with
// src/receive/ (routing, sink, PostgreSQL) and another places CALLS calls to it at once, on loopback,
// every call a real-time fax through the native media engine. Both lines run in this process, so
// the CPU is the sender's and the receiver's together (compare with bench:sip-media, which counts
// both ends too). Reports received pages per CPU-second of the process, wall time, and whether every
// fax was stored as received with its pages.
// Run: npm run bench:receive-sip   (env: CALLS=20 PAGES=1 TRANSPORT=t38|audio) → bench/results/receive-sip-<transport>.json
import { readFileSync, writeFileSync } from 'node:fs';
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
const db = await createDatabase();
const pool = new pg.Pool({ connectionString: db.url, max: 8 });
const log = createLogger('warn');
let rx: SipLine | undefined;
let tx: SipLine | undefined;
try {
  await migrate(pool);
  const acc = await pool.query<{ id: string }>(`INSERT INTO accounts (name) VALUES ('bench') RETURNING id`);
  await pool.query(`INSERT INTO numbers (account_id, number, receive) VALUES ($1, '+15550009999', true)`, [
    acc.rows[0]!.id,
  ]);
  const stored: (StoredReception | null)[] = [];
  rx = new SipLine({
    trunk: 'sip:127.0.0.1:9;transport=udp',
    listen: { host: '127.0.0.1', port: 38_500 },
    publicAddress: '127.0.0.1',
    t38: TRANSPORT === 't38' ? 'accept' : 'off',
    rtpPorts: { min: 36_000, max: 36_999 },
    ringTimeoutMs: 30_000,
    media,
  });
  const receiving = await createReceiving({
    db: pool,
    log,
    registry: new client.Registry(),
    trunk: '',
    cfg: { SIP_INBOUND_ALLOW: '127.0.0.1', SIP_INBOUND_COUNTRY_CODE: '', INBOUND_LINES: CALLS },
  });
  await rx.answer(sipAnswering(await answeringHooks(receiving), log, { onStored: (s) => stored.push(s) }));
  tx = new SipLine({
    trunk: 'sip:127.0.0.1:38500;transport=udp',
    listen: { host: '127.0.0.1', port: 38_502 },
    publicAddress: '127.0.0.1',
    t38: TRANSPORT === 't38' ? 'prefer' : 'off',
    rtpPorts: { min: 37_000, max: 37_999 },
    ringTimeoutMs: 30_000,
    media,
  });
  const tiff = readFileSync(makeFaxTiff(PAGES, 'standard'));
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const outcomes = await Promise.all(
    Array.from({ length: CALLS }, (_, i) =>
      tx!.transmit(
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
      ),
    ),
  );
  // The last stores follow the last calls by a few milliseconds.
  for (let i = 0; i < 200 && stored.length < CALLS; i++) await new Promise((r) => setTimeout(r, 50));
  const wallS = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(cpu0);
  const cpuS = (c.user + c.system) / 1e6;
  const received = stored.filter((s) => s?.status === 'received' && s.pages === PAGES).length;
  const pages = stored.reduce((n, s) => n + (s?.pages ?? 0), 0);
  const out = {
    date: new Date().toISOString(),
    transport: TRANSPORT,
    calls_at_once: CALLS,
    pages_per_fax: PAGES,
    sent_ok: outcomes.filter((o) => o.ok).length,
    stored_received: received,
    pages_received: pages,
    wall_s: +wallS.toFixed(1),
    process_cpu_s: +cpuS.toFixed(2),
    received_pages_per_cpu_second_both_ends: +(pages / cpuS).toFixed(1),
    cpu_ms_per_received_page_both_ends: +((cpuS * 1000) / Math.max(1, pages)).toFixed(1),
  };
  writeFileSync(
    new URL(`./results/receive-sip-${TRANSPORT}.json`, import.meta.url),
    JSON.stringify(out, null, 2) + '\n',
  );
  console.log(out);
} finally {
  await tx?.close();
  await rx?.close();
  await pool.end();
  await db.drop();
}
