// Receiving over SIP when the far end misbehaves (issue 20, "bad input"): a faxline answering line
// (src/receive/ over SipLine.answer) is called by a raw SIP caller written here on a UDP socket, which
// goes through the INVITE/200/ACK dance offering T.38 and then sends what it likes from the very port
// it signalled, so the media engine cannot drop it by source.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import client from 'prom-client';
import { createLogger } from '../../src/log.ts';
import { answeringHooks, sipAnswering } from '../../src/receive/answering.ts';
import { createReceiving } from '../../src/receive/component.ts';
import { housekeepingPass } from '../../src/receive/housekeeping.ts';
import type { StoredReception } from '../../src/receive/sink.ts';
import type { Outcome, Progress } from '../../src/transmission/backend.ts';
import { SipLine } from '../../src/transmission/sip/line.ts';
import { loadMediaEngine } from '../../src/transmission/sip/media-engine.ts';
import { twoAccounts, type TwoAccounts } from '../support/accounts.ts';
import { makeFaxTiff } from '../support/faxtiff.ts';
import { eventually } from '../support/harness.ts';
import { startProcess } from '../support/process.ts';
import { skipUnless } from '../support/skips.ts';
import { portBlock, sipPort } from '../support/telephony/ports.ts';

const media = loadMediaEngine();
const needsMedia = skipUnless(!media && 'the SIP media engine is not built (npm run build:native)');

/** A bare SIP caller on one UDP socket, and a second socket that is its signalled media port. */
class RawCaller {
  readonly sip: Socket = createSocket('udp4');
  readonly media: Socket = createSocket('udp4');
  private readonly inbox: string[] = [];
  readonly callId = `raw-${randomBytes(6).toString('hex')}`;
  private toTag = '';
  private cseq = 1;
  private readonly target: number;
  constructor(target: number) {
    this.target = target;
    this.sip.on('message', (m) => this.inbox.push(m.toString('utf8')));
  }
  async bind(): Promise<void> {
    await new Promise<void>((r) => this.sip.bind(0, '127.0.0.1', r));
    await new Promise<void>((r) => this.media.bind(0, '127.0.0.1', r));
  }
  get port() {
    return this.sip.address().port;
  }
  get mediaPort() {
    return this.media.address().port;
  }
  private send(text: string) {
    this.sip.send(Buffer.from(text), this.target, '127.0.0.1');
  }
  private headers(method: string, to: string, cseq: number, branch: string, withTag: boolean) {
    return [
      `Via: SIP/2.0/UDP 127.0.0.1:${this.port};branch=z9hG4bK${branch};rport`,
      'Max-Forwards: 70',
      `From: <sip:+15550001111@127.0.0.1>;tag=rawfrom`,
      `To: <sip:${to}@127.0.0.1>${withTag && this.toTag ? `;tag=${this.toTag}` : ''}`,
      `Call-ID: ${this.callId}`,
      `CSeq: ${cseq} ${method}`,
      `Contact: <sip:raw@127.0.0.1:${this.port}>`,
    ];
  }
  /** INVITE offering T.38 only; resolves with the answer's UDPTL port once 200 OK came (ACKed). */
  async invite(to: string): Promise<number> {
    const sdp = [
      'v=0',
      'o=- 1 1 IN IP4 127.0.0.1',
      's=-',
      'c=IN IP4 127.0.0.1',
      't=0 0',
      `m=image ${this.mediaPort} udptl t38`,
      'a=T38FaxVersion:0',
      'a=T38MaxBitRate:14400',
      'a=T38FaxRateManagement:transferredTCF',
      'a=T38FaxMaxBuffer:1800',
      'a=T38FaxMaxDatagram:400',
      'a=T38FaxUdpEC:t38UDPRedundancy',
      '',
    ].join('\r\n');
    const cseq = this.cseq++;
    const msg = [
      `INVITE sip:${to}@127.0.0.1:${this.target} SIP/2.0`,
      ...this.headers('INVITE', to, cseq, 'inv1', false),
      'Content-Type: application/sdp',
      `Content-Length: ${Buffer.byteLength(sdp)}`,
      '',
      sdp,
    ].join('\r\n');
    this.send(msg);
    const ok = await eventually(
      async () => this.inbox.find((m) => m.startsWith('SIP/2.0 200')) ?? null,
      10_000,
    );
    this.toTag = /^To:.*;tag=([^;\s]+)/im.exec(ok)?.[1] ?? '';
    const port = /^m=image (\d+) udptl/m.exec(ok)?.[1];
    assert.ok(port, `200 OK without UDPTL: ${ok}`);
    this.send(
      [
        `ACK sip:${to}@127.0.0.1:${this.target} SIP/2.0`,
        ...this.headers('ACK', to, cseq, 'ack1', true),
        'Content-Length: 0',
        '',
        '',
      ].join('\r\n'),
    );
    return Number(port);
  }
  bye(to: string): void {
    const cseq = this.cseq++;
    this.send(
      [
        `BYE sip:${to}@127.0.0.1:${this.target} SIP/2.0`,
        ...this.headers('BYE', to, cseq, `bye${cseq}`, true),
        'Content-Length: 0',
        '',
        '',
      ].join('\r\n'),
    );
  }
  close(): void {
    this.sip.close();
    this.media.close();
  }
}

describe('receiving over SIP: a far end that sends garbage or stops', { timeout: 180_000 }, () => {
  let t: TwoAccounts;
  let pool: pg.Pool;
  let rx: SipLine;
  let rxPort: number;
  let rtpMin: number;
  const stored: (StoredReception | null)[] = [];
  const registry = new client.Registry();
  let hook: http.Server;
  const hooked: { type: string; received_fax_id: string; data?: { pages?: number } }[] = [];

  before(async () => {
    if (!media) return;
    hook = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        hooked.push(JSON.parse(Buffer.concat(chunks).toString()));
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
    const hookPort = (hook.address() as AddressInfo).port;
    t = await twoAccounts({ WEBHOOK_ALLOW: `127.0.0.1:${hookPort}`, EVENTS_POLL_MS: '50' });
    const made = await t.api('POST', '/v1/webhooks', t.tokenB, {
      url: `http://127.0.0.1:${hookPort}/hook`,
      event_types: ['fax.receiving', 'fax.received', 'fax.receive_failed'],
    });
    assert.equal(made.http, 200, JSON.stringify(made.body));
    pool = new pg.Pool({ connectionString: t.s.cfg.DATABASE_URL, max: 4 });
    const log = createLogger('silent');
    rxPort = await sipPort();
    rtpMin = await portBlock('rtp', 16, { align: 16 });
    rx = new SipLine({
      trunk: 'sip:127.0.0.1:9;transport=udp',
      listen: { host: '127.0.0.1', port: rxPort },
      publicAddress: '127.0.0.1',
      t38: 'accept',
      rtpPorts: { min: rtpMin, max: rtpMin + 7 },
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
  });
  after(async () => {
    await rx?.close();
    await pool?.end();
    await t?.close();
    await new Promise((r) => hook?.close(r));
  });

  it(
    'garbage UDPTL from the signalled port for 6 s: the call ends failed with a clear result, nothing complete, RSS bounded',
    needsMedia,
    async () => {
      const to = t.b.numbers[0]!;
      const caller = new RawCaller(rxPort);
      await caller.bind();
      try {
        const udptl = await caller.invite(to);
        const rss0 = process.memoryUsage().rss;
        let peak = rss0;
        // 6 s of datagrams of random length and content (some shaped like UDPTL: a sequence number,
        // then nonsense IFP lengths), 2 every ms tick of 5 ms: about 2,400 datagrams. On a busy
        // machine a tick takes longer: the garbage goes on past the 6 s until 1,200 are sent
        // (670 in 6 s once, beside other test files on a machine at load 25), for 60 s at most.
        const deadline = Date.now() + 6_000;
        const lastChance = Date.now() + 60_000;
        let sent = 0;
        for (
          let i = 0;
          i < 2_000 && (Date.now() < deadline || (sent < 1_200 && Date.now() < lastChance));
          i++
        ) {
          for (let k = 0; k < 2; k++) {
            const len = 1 + Math.floor(Math.random() * 600);
            const b = randomBytes(len);
            if (k === 1 && len > 4) {
              b.writeUInt16BE(i & 0xffff, 0);
              b[2] = 0xff; // an IFP length far beyond the datagram
            }
            caller.media.send(b, udptl, '127.0.0.1');
            sent++;
          }
          await new Promise((r) => setTimeout(r, 5));
          if (i % 50 === 0) peak = Math.max(peak, process.memoryUsage().rss);
        }
        assert.ok(sent > 1_000, `only ${sent} datagrams sent`);
        caller.bye(to);
        const s = await eventually(async () => stored.find((x) => x !== null) ?? null, 30_000);
        peak = Math.max(peak, process.memoryUsage().rss);
        const growth = peak - rss0;
        assert.ok(growth < 64 * 1024 * 1024, `RSS grew by ${growth} bytes under garbage`);
        assert.deepEqual([s.status, s.pages, s.stored], ['failed', 0, true]);
        const row = await t.owner.query(
          `SELECT status, pages, result_text, tiff IS NULL AS no_tiff, pdf IS NULL AS no_pdf
             FROM received_faxes WHERE id = $1`,
          [s.id],
        );
        assert.equal(row.rows[0].status, 'failed');
        assert.equal(row.rows[0].pages, 0);
        assert.ok(row.rows[0].no_tiff && row.rows[0].no_pdf, 'no image kept');
        assert.match(row.rows[0].result_text, /\S/);
        // The API shows it as failed, never received.
        const got = await t.api('GET', `/v1/received-faxes/${s.id}`, t.tokenB);
        assert.equal(got.body.data.status, 'failed');
        const none = await t.api('GET', '/v1/received-faxes?status=received', t.tokenB);
        assert.deepEqual(none.body.data, []);
        console.log(
          `garbage: ${sent} datagrams, RSS ${Math.round(rss0 / 2 ** 20)} → peak ${Math.round(peak / 2 ** 20)} MiB, result "${row.rows[0].result_text}"`,
        );
      } finally {
        caller.close();
      }
    },
  );

  it(
    'a sender that stops in the middle of page 3 of 5: partial, the 2 pages that arrived kept and announced',
    needsMedia,
    async () => {
      const to = t.b.numbers[1]!;
      const tx = new SipLine({
        trunk: `sip:127.0.0.1:${rxPort};transport=udp`,
        listen: { host: '127.0.0.1', port: await sipPort() },
        publicAddress: '127.0.0.1',
        t38: 'prefer',
        rtpPorts: { min: rtpMin + 8, max: rtpMin + 15 },
        ringTimeoutMs: 15_000,
        media: media!,
      });
      const stop = new AbortController();
      const progress: Progress[] = [];
      let outcome: Outcome;
      try {
        outcome = await tx.transmit(
          {
            jobId: 'stops-mid-page',
            attempt: 1,
            faxNumber: to,
            callerId: '+15550002222',
            quality: 'standard',
            pageBytes: Array.from({ length: 5 }, () => 15_000),
            tiff: readFileSync(makeFaxTiff(5, 'standard')),
          },
          {
            signal: stop.signal,
            deadline: new Date(Date.now() + 120_000),
            onProgress: (p) => {
              progress.push(p);
              // Page 2 confirmed: page 3 starts; the sender stops part-way through it.
              if (p.type === 'page_sent' && p.page === 2) setTimeout(() => stop.abort(), 1_500);
            },
          },
        );
      } finally {
        await tx.close();
      }
      assert.equal(outcome.ok, false, JSON.stringify(outcome));
      assert.deepEqual(
        progress.flatMap((p) => (p.type === 'page_sent' ? [p.page] : [])),
        [1, 2],
        'the sender confirmed 2 pages, no more',
      );
      const s = await eventually(async () => stored.find((x) => x !== null && x.pages > 0) ?? null, 30_000);
      assert.deepEqual([s.status, s.pages, s.stored], ['partial', 2, true]);
      const got = await t.api('GET', `/v1/received-faxes/${s.id}`, t.tokenB);
      assert.deepEqual([got.body.data.status, got.body.data.pages], ['partial', 2]);
      assert.match(got.body.data.result_text ?? '', /2 pages kept/);
      const tiff = await fetch(`${t.s.url}/v1/received-faxes/${s.id}/tiff`, {
        headers: { authorization: `Bearer ${t.tokenB}` },
      });
      assert.equal(tiff.status, 200);
      assert.ok((await tiff.arrayBuffer()).byteLength > 1000);
      // Announced: the account's webhook got fax.receiving, then fax.receive_failed saying 2 pages.
      const events = await eventually(async () => {
        const mine = hooked.filter((e) => e.received_fax_id === s.id);
        return mine.length >= 2 ? mine : null;
      }, 20_000);
      assert.deepEqual(
        events.map((e) => e.type),
        ['fax.receiving', 'fax.receive_failed'],
      );
      console.log(`stops mid-page: ${JSON.stringify(events[1])}`);
    },
  );

  it(
    'kill -9 of the receiving process mid-reception: the half-received fax is never complete; the sweep fails it, announced once',
    needsMedia,
    async () => {
      const to = t.b.numbers[2]!;
      const childPort = await sipPort();
      const childRtp = await portBlock('rtp', 8, { align: 8 });
      const child = startProcess('test/support/telephony/receive-sip-child.ts', {
        DATABASE_URL: t.s.cfg.DATABASE_URL,
        SIP_PORT: String(childPort),
        RTP_MIN: String(childRtp),
        RTP_MAX: String(childRtp + 7),
      });
      const tx = new SipLine({
        trunk: `sip:127.0.0.1:${childPort};transport=udp`,
        listen: { host: '127.0.0.1', port: await sipPort() },
        publicAddress: '127.0.0.1',
        t38: 'prefer',
        rtpPorts: { min: rtpMin + 8, max: rtpMin + 15 },
        ringTimeoutMs: 15_000,
        media: media!,
      });
      let outcome: Outcome;
      try {
        await child.waitFor(/"listening"/);
        outcome = await tx.transmit(
          {
            jobId: 'rx-killed',
            attempt: 1,
            faxNumber: to,
            callerId: '+15550003333',
            quality: 'standard',
            pageBytes: Array.from({ length: 4 }, () => 15_000),
            tiff: readFileSync(makeFaxTiff(4, 'standard')),
          },
          {
            signal: new AbortController().signal,
            // The dead far end says nothing more: the sender ends at its deadline.
            deadline: new Date(Date.now() + 45_000),
            onProgress: (p) => {
              // Page 1 arrived, page 2 on its way: the receiving process dies.
              if (p.type === 'page_sent' && p.page === 1) child.child.kill('SIGKILL');
            },
          },
        );
        assert.equal((await child.exited).signal, 'SIGKILL');
      } finally {
        child.child.kill('SIGKILL');
        await tx.close();
      }
      assert.equal(outcome.ok, false, JSON.stringify(outcome));
      console.log(`receiver killed: the sender's outcome ${JSON.stringify(outcome)}`);
      assert.ok(
        child.lines.some((l) => /inbound fax call answered/.test(l)),
        'the child answered the call',
      );
      assert.ok(!child.lines.some((l) => /received fax stored/.test(l)), 'the child never stored it');
      const rows = await t.owner.query(
        `SELECT id, status, pages, tiff IS NULL AS no_tiff, pdf IS NULL AS no_pdf
           FROM received_faxes WHERE to_number = $1`,
        [to],
      );
      assert.equal(rows.rows.length, 1);
      const r = rows.rows[0];
      assert.deepEqual([r.status, r.pages, r.no_tiff, r.no_pdf], ['receiving', 0, true, true]);
      // Before the sweep: shown as receiving, no image, not among the received ones.
      const pdf = await t.api('GET', `/v1/received-faxes/${r.id}/pdf`, t.tokenB);
      assert.equal(pdf.http, 409, JSON.stringify(pdf.body));
      assert.deepEqual(
        (await t.api('GET', `/v1/received-faxes?status=received&number=${encodeURIComponent(to)}`, t.tokenB))
          .body.data,
        [],
      );
      // The sweep as a later process runs it (INBOUND_MAX_CALL_SECONDS 0, past its minute of slack).
      const pass = await housekeepingPass({
        db: pool,
        retentionDays: 0,
        maxCallSeconds: 0,
        now: () => new Date(Date.now() + 61_000),
      });
      assert.equal(pass.failed, 1);
      const after = await t.api('GET', `/v1/received-faxes/${r.id}`, t.tokenB);
      assert.deepEqual([after.body.data.status, after.body.data.pages], ['failed', 0]);
      assert.match(after.body.data.result_text, /receiving process ended/);
      // Ledger: fax.receiving then exactly one final event, fax.receive_failed.
      const events = await eventually(async () => {
        const mine = hooked.filter((e) => e.received_fax_id === r.id);
        return mine.length >= 2 ? mine : null;
      }, 20_000);
      // No third one on its way: nothing of this fax is left in the outbox or waits for delivery
      // (the relay moves outbox rows to deliveries in one transaction; a delivery is marked done
      // after the hook above has its body), and the deliveries made for it were exactly two.
      await eventually(async () => {
        const q = await t.owner.query(
          `SELECT (SELECT count(*) FROM received_fax_outbox WHERE received_fax_id = $1)::int AS outbox,
                  (SELECT count(*) FROM webhook_deliveries WHERE job_id = $1 AND state = 'pending')::int AS pending`,
          [r.id],
        );
        return q.rows[0].outbox === 0 && q.rows[0].pending === 0;
      }, 20_000);
      const made = await t.owner.query(
        'SELECT count(*)::int AS n FROM webhook_deliveries WHERE job_id = $1',
        [r.id],
      );
      assert.equal(made.rows[0].n, 2, 'two deliveries made for the fax');
      assert.deepEqual(
        hooked.filter((e) => e.received_fax_id === r.id).map((e) => e.type),
        ['fax.receiving', 'fax.receive_failed'],
      );
      assert.equal(events.length, 2);
      // A second sweep finds nothing left.
      assert.equal(
        (
          await housekeepingPass({
            db: pool,
            retentionDays: 0,
            maxCallSeconds: 0,
            now: () => new Date(Date.now() + 61_000),
          })
        ).failed,
        0,
      );
    },
  );
});
