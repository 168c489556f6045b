// Receiving over SIP on loopback (issue 20 with issue 18's engine): one SIP line sends a real fax to
// another SIP line that answers with src/receive/ (routing, sink). Both use the native media engine;
// the received fax is read back through the customer API of the number's account.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import client from 'prom-client';
import { createLogger } from '../src/log.ts';
import { answeringHooks, sipAnswering } from '../src/receive/answering.ts';
import { createReceiving } from '../src/receive/component.ts';
import type { StoredReception } from '../src/receive/sink.ts';
import type { Outcome, PreparedFax } from '../src/transmission/backend.ts';
import { SipLine } from '../src/transmission/sip/line.ts';
import { loadMediaEngine } from '../src/transmission/sip/media-engine.ts';
import { assertRefused, twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { makeFaxTiff, sameImages } from './support/faxtiff.ts';
import { eventually } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';
import { skipUnless } from './support/skips.ts';
import { portBlock, sipPort } from './support/telephony/ports.ts';

const media = loadMediaEngine();
const needsMedia = skipUnless(!media && 'the SIP media engine is not built (npm run build:native)');
// Ports from the telephony tests' claimed ranges (test/support/telephony/ports.ts): pid-based ones in
// the kernel's ephemeral range once met a client connection's port (EADDRINUSE in CI).
const rtp = async () => {
  const min = await portBlock('rtp', 16, { align: 16 });
  return { min, max: min + 15 };
};

describe('receiving over SIP on loopback', { timeout: 240_000 }, () => {
  let t: TwoAccounts;
  let pool: pg.Pool;
  let rx: SipLine;
  let tx: SipLine;
  const stored: (StoredReception | null)[] = [];
  const registry = new client.Registry();

  before(async () => {
    if (!media) return;
    t = await twoAccounts();
    pool = new pg.Pool({ connectionString: t.s.cfg.DATABASE_URL, max: 4 });
    const log = createLogger('silent');
    const rxPort = await sipPort();
    rx = new SipLine({
      trunk: 'sip:127.0.0.1:9;transport=udp',
      listen: { host: '127.0.0.1', port: rxPort },
      publicAddress: '127.0.0.1',
      t38: 'accept',
      rtpPorts: await rtp(),
      ringTimeoutMs: 15_000,
      media: media!,
    });
    const receiving = await createReceiving({
      db: pool,
      log,
      registry,
      trunk: '',
      cfg: { SIP_INBOUND_ALLOW: '127.0.0.1', SIP_INBOUND_COUNTRY_CODE: '', INBOUND_LINES: 4 },
    });
    await rx.answer(sipAnswering(await answeringHooks(receiving), log, { onStored: (s) => stored.push(s) }));
    tx = new SipLine({
      trunk: `sip:127.0.0.1:${rxPort};transport=udp`,
      listen: { host: '127.0.0.1', port: await sipPort() },
      publicAddress: '127.0.0.1',
      t38: 'prefer',
      rtpPorts: await rtp(),
      ringTimeoutMs: 15_000,
      media: media!,
    });
  });
  after(async () => {
    await tx?.close();
    await rx?.close();
    await pool?.end();
    await t?.close();
  });

  const send = (to: string, tiff: string, pages: number): Promise<Outcome> => {
    const fax: PreparedFax = {
      jobId: `job-${Math.random().toString(36).slice(2)}`,
      attempt: 1,
      faxNumber: to,
      callerId: '+15550001111',
      quality: 'standard',
      pageBytes: Array.from({ length: pages }, () => 15_000),
      tiff: readFileSync(tiff),
    };
    return tx.transmit(fax, {
      signal: new AbortController().signal,
      deadline: new Date(Date.now() + 180_000),
      onProgress: () => undefined,
    });
  };

  it(
    'a 2-page fax sent over SIP (T.38) to another account of the installation is stored for it, identical',
    needsMedia,
    async () => {
      const to = t.b.numbers[0]!;
      const tiff = makeFaxTiff(2, 'standard');
      const outcome = await send(to, tiff, 2);
      assert.ok(outcome.ok, JSON.stringify(outcome));
      const s = await eventually(async () => stored.find((x) => x?.status === 'received') ?? null, 20_000);
      assert.equal(s.pages, 2);
      const list = await t.api('GET', '/v1/received-faxes', t.tokenB);
      assert.deepEqual(
        (list.body.data as { id: string }[]).map((x) => x.id),
        [s.id],
      );
      const f = list.body.data[0];
      assert.deepEqual(
        [f.to, f.from, f.status, f.pages, f.remote_csid],
        [to, '+15550001111', 'received', 2, '+15550001111'],
      );
      assert.ok(['t38', 'audio'].includes(f.transport));
      assert.match(f.call_id, /.+/);
      const dl = await fetch(`${t.s.url}/v1/received-faxes/${s.id}/tiff`, {
        headers: { authorization: `Bearer ${t.tokenB}` },
      });
      const dir = mkdtempSync(join(tmpdir(), 'faxline-sip-rx-'));
      writeFileSync(join(dir, 'rx.tif'), Buffer.from(await dl.arrayBuffer()));
      const cmp = sameImages(tiff, join(dir, 'rx.tif'));
      assert.ok(cmp.same, cmp.output);
      const pdf = await fetch(`${t.s.url}/v1/received-faxes/${s.id}/pdf`, {
        headers: { authorization: `Bearer ${t.tokenB}` },
      });
      assert.equal(pdf.headers.get('content-type'), 'application/pdf');
      assert.ok((await pdf.arrayBuffer()).byteLength > 1000);
      assertRefused(
        await t.api('GET', `/v1/received-faxes/${s.id}`, t.tokenA),
        404,
        'Received fax not found',
      );
      assert.match(await registry.metrics(), /faxline_inbound_calls_answered_total 1/);
    },
  );

  it(
    'over G.711 audio (no T.38 on either side), a 1-page hd fax is stored identical with transport audio',
    needsMedia,
    async () => {
      const audio = new SipLine({
        trunk: tx.options.trunk,
        listen: { host: '127.0.0.1', port: await sipPort() },
        publicAddress: '127.0.0.1',
        t38: 'off',
        rtpPorts: await rtp(),
        ringTimeoutMs: 15_000,
        media: media!,
      });
      try {
        const to = t.b.numbers[5]!;
        const tiff = makeFaxTiff(1, 'hd');
        const fax: PreparedFax = {
          jobId: 'audio-hd',
          attempt: 1,
          faxNumber: to,
          callerId: '+15550001111',
          quality: 'hd',
          pageBytes: [25_000],
          tiff: readFileSync(tiff),
        };
        const outcome = await audio.transmit(fax, {
          signal: new AbortController().signal,
          deadline: new Date(Date.now() + 180_000),
          onProgress: () => undefined,
        });
        assert.ok(outcome.ok, JSON.stringify(outcome));
        const rec = await eventually(async () => {
          const l = await t.api('GET', `/v1/received-faxes?number=${encodeURIComponent(to)}`, t.tokenB);
          return l.body.data?.[0] ?? null;
        }, 20_000);
        assert.deepEqual(
          [rec.status, rec.transport, rec.resolution, rec.pages],
          ['received', 'audio', 'hd', 1],
        );
        const dl = await fetch(`${t.s.url}/v1/received-faxes/${rec.id}/tiff`, {
          headers: { authorization: `Bearer ${t.tokenB}` },
        });
        const dir = mkdtempSync(join(tmpdir(), 'faxline-sip-audio-'));
        writeFileSync(join(dir, 'rx.tif'), Buffer.from(await dl.arrayBuffer()));
        const cmp = sameImages(tiff, join(dir, 'rx.tif'));
        assert.ok(cmp.same, cmp.output);
      } finally {
        await audio.close();
      }
    },
  );
  it(
    'an unknown number is refused 404 (invalid_number), receiving off 480 (no_answer); nothing stored, each counted',
    needsMedia,
    async () => {
      const tiff = makeFaxTiff(1, 'low');
      const unknown = await send('+19995550000', tiff, 1);
      assert.deepEqual([unknown.ok, !unknown.ok && unknown.type], [false, 'invalid_number']);
      const off = t.b.numbers[1]!;
      await t.owner.query('UPDATE numbers SET receive = false WHERE number = $1', [off]);
      const refused = await send(off, tiff, 1);
      assert.deepEqual([refused.ok, !refused.ok && refused.type], [false, 'no_answer']);
      const text = await registry.metrics();
      assert.match(text, /faxline_inbound_calls_refused_total\{cause="unknown_number"\} 1/);
      assert.match(text, /faxline_inbound_calls_refused_total\{cause="receiving_off"\} 1/);
      const n = await t.owner.query(
        `SELECT count(*)::int AS n FROM received_faxes WHERE to_number = ANY($1)`,
        [['+19995550000', off]],
      );
      assert.equal(n.rows[0].n, 0);
    },
  );
  it(
    'a caller not on SIP_INBOUND_ALLOW is refused 403 (backend_error), one over INBOUND_LINES 486 (busy); nothing stored, counted',
    needsMedia,
    async () => {
      const log = createLogger('silent');
      const reg = new client.Registry();
      const receiving = await createReceiving({
        db: pool,
        log,
        registry: reg,
        trunk: '',
        cfg: { SIP_INBOUND_ALLOW: '127.0.0.1', SIP_INBOUND_COUNTRY_CODE: '', INBOUND_LINES: 1 },
      });
      const hooks = await answeringHooks(receiving);
      const port = await sipPort();
      const busyLine = new SipLine({
        trunk: 'sip:127.0.0.1:9;transport=udp',
        listen: { host: '127.0.0.1', port },
        publicAddress: '127.0.0.1',
        t38: 'accept',
        rtpPorts: await rtp(),
        ringTimeoutMs: 15_000,
        media: media!,
      });
      await busyLine.answer(sipAnswering(hooks, log));
      const caller = async (host: string) =>
        new SipLine({
          trunk: `sip:127.0.0.1:${port};transport=udp`,
          listen: { host, port: await sipPort() },
          publicAddress: host,
          t38: 'accept',
          rtpPorts: await rtp(),
          ringTimeoutMs: 15_000,
          media: media!,
        });
      const outsider = await caller('127.0.0.2');
      const insider = await caller('127.0.0.1');
      try {
        const to = t.b.numbers[4]!;
        const prepared = (): PreparedFax => ({
          jobId: `job-${Math.random().toString(36).slice(2)}`,
          attempt: 1,
          faxNumber: to,
          callerId: '+15550001111',
          quality: 'low',
          pageBytes: [10_000],
          tiff: readFileSync(makeFaxTiff(1, 'low')),
        });
        const ctl = () => ({
          signal: new AbortController().signal,
          deadline: new Date(Date.now() + 60_000),
          onProgress: () => undefined,
        });
        const refused = await outsider.transmit(prepared(), ctl());
        assert.deepEqual([refused.ok, !refused.ok && refused.type], [false, 'backend_error']);
        // The one line taken by a call being decided: the next INVITE is busy.
        const held = await hooks.decide({
          callId: 'held',
          requestUri: `sip:${to}@127.0.0.1`,
          toUri: `sip:${to}@127.0.0.1`,
          fromUri: 'sip:+15550001111@127.0.0.1',
          source: '127.0.0.1',
        });
        assert.ok(held.answer);
        const busy = await insider.transmit(prepared(), ctl());
        assert.deepEqual([busy.ok, !busy.ok && busy.type], [false, 'busy']);
        await hooks.finished({ callId: 'held', result: undefined, reason: 'test', startedAt: Date.now() });
        const text = await reg.metrics();
        assert.match(text, /faxline_inbound_calls_refused_total\{cause="source_not_allowed"\} 1/);
        assert.match(text, /faxline_inbound_calls_refused_total\{cause="over_line_limit"\} 1/);
        const n = await t.owner.query(
          `SELECT count(*)::int AS n FROM received_faxes WHERE to_number = $1 AND call_id <> 'held'`,
          [to],
        );
        assert.equal(n.rows[0].n, 0);
      } finally {
        await Promise.all([outsider.close(), insider.close(), busyLine.close()]);
      }
    },
  );
});

describe(
  'receiving through the whole service: HTTP send, SIP call to itself, stored, webhook',
  { timeout: 240_000 },
  () => {
    it(
      'account A sends 2 pages to a number of account B; B lists it, downloads TIFF (identical to the image transmitted) and PDF',
      needsMedia,
      async () => {
        const sip = await sipPort();
        const rtpPorts = await rtp();
        const t = await twoAccounts({
          BACKEND: 'sip',
          SIP_RECEIVE: 'true',
          SIP_LISTEN: `127.0.0.1:${sip}`,
          SIP_PUBLIC_ADDRESS: '127.0.0.1',
          SIP_TRUNK: `sip:127.0.0.1:${sip};transport=udp`,
          SIP_INBOUND_ALLOW: '127.0.0.1',
          SIP_T38: 'prefer',
          RTP_PORTS: `${rtpPorts.min}-${rtpPorts.max}`,
          EVENTS_POLL_MS: '50',
        });
        try {
          const to = t.b.numbers[3]!;
          const sent = await t.api('POST', '/v1/faxes/send', t.tokenA, {
            fax_number: to,
            fax_data: [{ file_name: 'two.pdf', file_data: await makePdfBase64(2) }],
          });
          assert.equal(sent.http, 200, JSON.stringify(sent.body));
          const jobId = sent.body.data.job_id as string;
          const job = await eventually(
            async () => {
              const j = await t.api('GET', `/v1/faxes/${jobId}`, t.tokenA);
              return ['delivered', 'failed'].includes(j.body.data?.state) ? j.body.data : null;
            },
            150_000,
            500,
          );
          assert.equal(job.state, 'delivered', JSON.stringify(job));
          const rec = await eventually(async () => {
            const l = await t.api('GET', '/v1/received-faxes?status=received', t.tokenB);
            return l.body.data?.[0] ?? null;
          }, 20_000);
          assert.deepEqual([rec.to, rec.from, rec.pages, rec.transport], [to, t.a.numbers[0], 2, 't38']);
          assert.deepEqual(
            (await t.api('GET', '/v1/received-faxes', t.tokenA)).body.data,
            [],
            'not the sender’s',
          );
          const get = (path: string, token: string) =>
            fetch(`${t.s.url}${path}`, { headers: { authorization: `Bearer ${token}` } }).then(async (r) =>
              Buffer.from(await r.arrayBuffer()),
            );
          const dir = mkdtempSync(join(tmpdir(), 'faxline-sip-e2e-'));
          writeFileSync(join(dir, 'sent.tif'), await get(`/v1/faxes/${jobId}/image?format=tiff`, t.tokenA));
          writeFileSync(join(dir, 'rx.tif'), await get(`/v1/received-faxes/${rec.id}/tiff`, t.tokenB));
          const cmp = sameImages(join(dir, 'sent.tif'), join(dir, 'rx.tif'));
          assert.ok(cmp.same, cmp.output);
          const pdf = await get(`/v1/received-faxes/${rec.id}/pdf`, t.tokenB);
          assert.equal(pdf.subarray(0, 5).toString(), '%PDF-');
          const metrics = await (await fetch(`${t.s.url}/metrics`)).text();
          assert.match(metrics, /faxline_inbound_calls_answered_total\{[^}]*\} 1/);
          assert.match(metrics, /faxline_received_faxes_stored_total\{[^}]*status="received"[^}]*\} 1/);
        } finally {
          await t.close();
        }
      },
    );
  },
);
