// faxline sends to faxline over SIP: the send worker's real SIP line (BACKEND=sip, from the service's
// own configuration) dials through Kamailio, which demands digest authentication and record-routes,
// to faxline user agents answering with the same engine (SipLine.answer). Real PDFs rendered at all
// three qualities, several pages each; T.38 (the answering side asks for it with a re-INVITE) and
// G.711 audio with and without ECM; every received TIFF is compared with the stored render by
// libtiff's tiffcmp. The calls run at once (each is real time, a minute or more).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { getRender } from '../../src/documents/render/store.ts';
import {
  loadFaxmedia,
  mediaUnavailableMessage,
  NativeMediaEngine,
} from '../../src/transmission/sip/media-engine.ts';
import { SipLine, type ReceivedFax, type T38Mode } from '../../src/transmission/sip/line.ts';
import { call, seedAccount, tokenFor } from '../support/client.ts';
import { eventually, startService } from '../support/harness.ts';
import { skipUnless } from '../support/skips.ts';
import { fixturePdf, tiffDifferences } from '../support/telephony/fax-files.ts';
import { startKamailio, type Kamailio } from '../support/telephony/kamailio.ts';
import { portBlock, sipPort } from '../support/telephony/ports.ts';
import { missingTools } from '../support/telephony/tools.ts';

const needs = skipUnless(
  missingTools('kamailio', 'tiffcmp') || (!loadFaxmedia() && mediaUnavailableMessage),
  'spandsp',
);
const CRED = { username: 'faxline-out', password: 'Trunk-Secret-18' };
// A block of the RTP range claimed for this file (96 ports), never the whole range: a session here
// took ports that another file had claimed for a process not yet bound to them, and that process
// then had "no media port free (RTP_PORTS)" (CI of 2026-12-07, r9; likely r5 too).
const rtpBase = await portBlock('rtp', 96, { align: 8 });
const RTP_PORTS = `${rtpBase}-${rtpBase + 95}`;

/** A faxline user agent answering calls into `dir`, one result per call. */
async function answeringLine(o: { t38: T38Mode; ecm: boolean; dir: string }) {
  const port = await sipPort();
  const results: ReceivedFax[] = [];
  const line = new SipLine({
    // It only answers (calls come to SIP_LISTEN through the trunk); it never dials this URI.
    trunk: 'sip:127.0.0.1:5060;transport=udp',
    listen: { host: '127.0.0.1', port },
    t38: o.t38,
    rtpPorts: { min: rtpBase, max: rtpBase + 95 },
    ringTimeoutMs: 30_000,
    media: new NativeMediaEngine({ threads: 2 }),
  });
  await line.answer({
    ecm: o.ecm,
    decide: ({ callId, to }) => ({
      file: join(o.dir, `${/sip:([^@;>]+)@/.exec(to)?.[1] ?? 'unknown'}-${callId.replace(/\W/g, '_')}.tif`),
      ident: 'FAXLINE RX',
    }),
    onResult: (r) => results.push(r),
  });
  return { port, results, line };
}

describe('faxline to faxline over SIP through Kamailio', needs, () => {
  let dir: string;
  let trunk: Kamailio;
  let receivers: Awaited<ReturnType<typeof answeringLine>>[] = [];
  let svc: Awaited<ReturnType<typeof startService>> | undefined;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'faxline-sipcalls-'));
  });

  after(async () => {
    await svc?.dropAll();
    for (const r of receivers) await r.line.close();
    await trunk?.stop();
    if (dir && !process.env.KEEP_RX) rmSync(dir, { recursive: true, force: true });
  });

  it('low, standard and hd over T.38, over audio with ECM and over audio without ECM: all received pixel-identical', async () => {
    const trunkUri = () => `sip:127.0.0.1:${trunk.port};transport=udp`;
    // T.38: the answering side re-INVITEs to image/t38 (SIP_T38=prefer), the sender accepts.
    const t38 = await answeringLine({ t38: 'prefer', ecm: true, dir });
    const audioEcm = await answeringLine({ t38: 'off', ecm: true, dir });
    const audioPlain = await answeringLine({ t38: 'off', ecm: false, dir });
    receivers = [t38, audioEcm, audioPlain];
    // The whole matrix the issue asks for: each quality over T.38, over audio with ECM and over audio
    // without ECM (T.4 2-D on the line then), all at once.
    const receiverOf = { t38, audioEcm, audioPlain };
    const modes = [
      { rx: 't38', transport: 't38', ecm: true },
      { rx: 'audioEcm', transport: 'audio', ecm: true },
      { rx: 'audioPlain', transport: 'audio', ecm: false },
    ] as const;
    const qualities = ['low', 'standard', 'hd'] as const;
    const cases = modes.flatMap((m, i) =>
      qualities.map((quality, j) => ({
        number: `+1555010${i * qualities.length + j + 1}`,
        quality,
        rx: receiverOf[m.rx],
        transport: m.transport,
        ecm: m.ecm,
      })),
    );
    trunk = await startKamailio({
      ...CRED,
      targets: { byNumber: Object.fromEntries(cases.map((c) => [c.number, `127.0.0.1:${c.rx.port}`])) },
    });
    svc = await startService({
      env: {
        BACKEND: 'sip',
        SIP_TRUNK: trunkUri(),
        SIP_USERNAME: CRED.username,
        SIP_PASSWORD: CRED.password,
        SIP_LISTEN: `127.0.0.1:${await sipPort()}`,
        SIP_T38: 'accept',
        RTP_PORTS,
        LINES: String(cases.length),
      },
    });
    const seed = await seedAccount(svc);
    const token = await tokenFor(svc.url, seed.api_key);
    const pdf = fixturePdf('letter-text-2p.pdf').toString('base64');
    const started = Date.now();
    const jobs = await Promise.all(
      cases.map(async (c) => {
        const r = await call(svc!.url, 'POST', '/v1/faxes/send', {
          token,
          body: {
            fax_number: c.number,
            fax_quality: c.quality,
            fax_data: [{ file_name: 'letter-text-2p.pdf', file_data: pdf }],
          },
        });
        assert.equal(r.http, 200, JSON.stringify(r.body));
        return r.body.data.job_id as string;
      }),
    );
    const settled = await Promise.all(
      jobs.map((id) =>
        eventually(
          async () => {
            const r = await call(svc!.url, 'GET', `/v1/faxes/${id}`, { token });
            return ['delivered', 'failed', 'retry_waiting', 'unknown'].includes(r.body.data?.state)
              ? r.body.data
              : null;
          },
          280_000,
          500,
        ),
      ),
    );
    console.log(
      `sip calls: ${cases.length} concurrent faxes settled in ${Math.round((Date.now() - started) / 1000)} s`,
    );

    // Where the media threads' time went, both ends, so that a failed audio call says whether its
    // media thread fell behind: the receivers run in this process, the sender in the service's.
    const rxEngine = loadFaxmedia()!;
    console.log(
      `sip calls: receivers' media engine: ${JSON.stringify(rxEngine.engineStats(false))}; rtp ${JSON.stringify(rxEngine.engineCounters().rtp)}`,
    );
    const metrics = await fetch(`${svc.url}/metrics`).then((r) => r.text());
    console.log(
      `sip calls: sender's media metrics: ${metrics
        .split('\n')
        .filter((l) =>
          /^faxline_media_(clock_resets|slow_work|frames_concealed|packets_(lost|dropped))/.test(l),
        )
        .join('; ')}`,
    );
    // Every case's line first, so one failure does not hide the others.
    for (const [i, c] of cases.entries()) {
      const rx = c.rx.results.filter((r) => r.to.includes(`${c.number}@`));
      const a = settled[i].attempt_history?.at(-1);
      console.log(
        `sip calls: ${c.number} ${c.quality}: job ${settled[i].state}${a?.failure ? ` (${a.failure.code}: ${a.failure.message})` : ''}; ` +
          `received ${rx.map((r) => `${r.ok ? 'ok' : 'failed'} ${r.pages} pages over ${r.result?.transport}, ECM ${r.result?.ecm}: ${r.reason}`).join(' / ') || 'nothing'}`,
      );
    }
    const db = new pg.Client({ connectionString: svc.cfg.DATABASE_URL });
    await db.connect();
    try {
      for (const [i, c] of cases.entries()) {
        const job = settled[i];
        assert.equal(
          job.state,
          'delivered',
          `${c.number} (${c.quality}, ${c.transport}): ${JSON.stringify(job)}`,
        );
        const received = c.rx.results.filter((r) => r.to.includes(`${c.number}@`));
        assert.equal(received.length, 1, `${c.number}: exactly one call reached the receiver`);
        const rx = received[0]!;
        assert.ok(rx.ok && rx.result, `${c.number}: ${rx.reason}`);
        assert.equal(rx.result.transport, c.transport, `${c.number}: transport`);
        assert.equal(rx.result.ecm, c.ecm, `${c.number}: ECM`);
        const sent = join(dir, `sent-${c.number}.tif`);
        writeFileSync(sent, (await getRender(db, jobs[i]!))!.tiff);
        assert.equal(rx.pages, 2, `${c.number}: pages`);
        assert.equal(tiffDifferences(sent, rx.file), '', `${c.number}: received differs from the render`);
        console.log(
          `sip calls: ${c.number} ${c.quality} over ${rx.result.transport}${rx.result.ecm ? ' with ECM' : ''}: ` +
            `${rx.pages} pages at ${rx.result.bitRate} bit/s in ${Math.round(rx.result.durationMs / 1000)} s, identical`,
        );
      }
      const att = await db.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM fax_attempts WHERE job_id = ANY($1::uuid[])',
        [jobs],
      );
      assert.equal(att.rows[0]!.n, cases.length, 'one attempt per fax');
    } finally {
      await db.end();
    }
    // The trunk challenged every call and let each through once, with our credentials.
    const events = trunk.events();
    assert.ok(events.filter((e) => e === 'challenge INVITE').length >= cases.length, events.join('\n'));
    for (const c of cases)
      assert.equal(
        events.filter((e) => e === `authorized INVITE ${CRED.username} to ${c.number}`).length,
        1,
        `${c.number}: one authorized INVITE\n${events.join('\n')}`,
      );
    assert.ok(events.includes('in-dialog BYE'), 'BYE went along the record-route');
  });
});
