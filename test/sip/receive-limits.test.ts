// Receiving over SIP: the per-call limits on what a sender may send (issue 20, "bad input": an
// over-long page, very many pages). The answering side runs in a process of its own
// (test/support/telephony/receive-sip-child.ts) so that its memory is measured alone, from /proc;
// faxline's own SIP line sends to it from this process.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { Outcome, Progress } from '../../src/transmission/backend.ts';
import { SipLine } from '../../src/transmission/sip/line.ts';
import { loadMediaEngine } from '../../src/transmission/sip/media-engine.ts';
import { twoAccounts, type TwoAccounts } from '../support/accounts.ts';
import { makeFaxTiff, makeLongPageTiff } from '../support/faxtiff.ts';
import { startProcess, type Proc } from '../support/process.ts';
import { skipUnless } from '../support/skips.ts';
import { portBlock, sipPort } from '../support/telephony/ports.ts';

const media = loadMediaEngine();
const needsMedia = skipUnless(!media && 'the SIP media engine is not built (npm run build:native)');

/** Resident memory of a process, in bytes (Linux /proc). */
function rssOf(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

interface Sent {
  outcome: Outcome;
  pagesConfirmed: number[];
  rssBefore: number;
  rssPeak: number;
  row: { status: string; pages: number; result_text: string; no_tiff: boolean; no_pdf: boolean };
}

// The five calls run at once (each has its own receiving process, number and ports): about 90 s
// instead of 285 one after the other.
describe(
  'receiving over SIP: the page length and page count limits',
  { timeout: 600_000, concurrency: true },
  () => {
    let t: TwoAccounts;

    before(async () => {
      if (!media) return;
      t = await twoAccounts();
    });
    after(async () => {
      await t?.close();
    });

    /**
     * Starts a receiving process with `env` (MAX_PAGE_MM, MAX_PAGES, ECM), sends `tiff` to number
     * `n` of account B from a SIP line here (T.38, or G.711 with `t38` off), samples the receiver's RSS every 100 ms while the
     * call runs, and returns the sender's outcome and the stored row.
     */
    async function send(
      n: number,
      env: Record<string, string>,
      tiff: string,
      pages: number,
      t38: 'prefer' | 'off' = 'prefer',
    ): Promise<Sent> {
      const to = t.b.numbers[n]!;
      const childPort = await sipPort();
      const childRtp = await portBlock('rtp', 8, { align: 8 });
      const txRtp = await portBlock('rtp', 8, { align: 8 });
      const child: Proc = startProcess('test/support/telephony/receive-sip-child.ts', {
        DATABASE_URL: t.s.cfg.DATABASE_URL,
        SIP_PORT: String(childPort),
        RTP_MIN: String(childRtp),
        RTP_MAX: String(childRtp + 7),
        ...env,
      });
      const tx = new SipLine({
        trunk: `sip:127.0.0.1:${childPort};transport=udp`,
        listen: { host: '127.0.0.1', port: await sipPort() },
        publicAddress: '127.0.0.1',
        t38,
        rtpPorts: { min: txRtp, max: txRtp + 7 },
        ringTimeoutMs: 15_000,
        media: media!,
      });
      const progress: Progress[] = [];
      let rssBefore: number;
      let rssPeak = 0;
      let sampler: NodeJS.Timeout | undefined;
      try {
        await child.waitFor(/"listening"/);
        const pid = child.child.pid!;
        rssBefore = rssOf(pid);
        rssPeak = rssBefore;
        sampler = setInterval(() => (rssPeak = Math.max(rssPeak, rssOf(pid))), 100);
        const outcome = await tx.transmit(
          {
            jobId: `limits-${n}`,
            attempt: 1,
            faxNumber: to,
            callerId: '+15550004444',
            quality: 'standard',
            pageBytes: Array.from({ length: pages }, () => 15_000),
            tiff: readFileSync(tiff),
          },
          {
            signal: new AbortController().signal,
            deadline: new Date(Date.now() + 150_000),
            onProgress: (p) => void progress.push(p),
          },
        );
        await child.waitFor(/received fax stored/, 30_000).catch((err: Error) => {
          // What the sending side saw says whether the call was answered at all.
          err.message += `\nthe sender's outcome: ${JSON.stringify(outcome)}; progress: ${JSON.stringify(progress)}`;
          throw err;
        });
        clearInterval(sampler);
        rssPeak = Math.max(rssPeak, rssOf(pid));
        const rows = await t.owner.query(
          `SELECT status, pages, result_text, tiff IS NULL AS no_tiff, pdf IS NULL AS no_pdf
           FROM received_faxes WHERE to_number = $1`,
          [to],
        );
        assert.equal(rows.rows.length, 1);
        return {
          outcome,
          pagesConfirmed: progress.flatMap((p) => (p.type === 'page_sent' ? [p.page] : [])),
          rssBefore,
          rssPeak,
          row: rows.rows[0],
        };
      } finally {
        clearInterval(sampler);
        child.child.kill('SIGKILL');
        await child.exited;
        await tx.close();
      }
    }

    it(
      'ECM: a 1.5 m third page (over the default 1000 mm) ends the call; pages 1-2 kept as partial, page 3 dropped, the limit named',
      needsMedia,
      async () => {
        // No MAX_PAGE_MM: the default applies.
        const s = await send(0, {}, makeLongPageTiff(2, 1500, 'standard'), 3);
        console.log(
          `long page (ECM): ${JSON.stringify(s.row)}; receiver RSS ${(s.rssBefore / 2 ** 20).toFixed(0)} → peak ${(s.rssPeak / 2 ** 20).toFixed(0)} MiB; sender ${JSON.stringify(s.outcome)}`,
        );
        assert.equal(s.outcome.ok, false, 'the sender did not get its fax through');
        assert.deepEqual(
          [s.row.status, s.row.pages, s.row.no_tiff, s.row.no_pdf],
          ['partial', 2, false, false],
        );
        assert.match(s.row.result_text, /page 3 longer than 1000 mm.*INBOUND_MAX_PAGE_MM.*2 pages kept/);
        assert.ok(s.rssPeak - s.rssBefore < 64 * 2 ** 20, `receiver RSS grew by ${s.rssPeak - s.rssBefore}`);
      },
    );

    it(
      'ECM: a 100 m page of white is refused after its first block, which T.4 coding (T.6 not offered) bounds to ~9 MB',
      needsMedia,
      async () => {
        // A white row is 1 bit in T.6, so one 64 KiB ECM block could carry the whole page (385,000
        // rows, 83 MB decoded, all decoded before the limit can be read). Without T.6 the sender codes
        // T.4 2-D, an end-of-line code per row: the first block holds ~37,000 rows.
        const s = await send(4, {}, makeLongPageTiff(0, 100_000, 'standard', 1_000_000), 1);
        console.log(
          `100 m white page (ECM): ${JSON.stringify(s.row)}; receiver RSS ${(s.rssBefore / 2 ** 20).toFixed(0)} → peak ${(s.rssPeak / 2 ** 20).toFixed(0)} MiB`,
        );
        assert.equal(s.outcome.ok, false);
        assert.deepEqual([s.row.status, s.row.pages], ['failed', 0]);
        assert.match(s.row.result_text, /page 1 longer than 1000 mm.*INBOUND_MAX_PAGE_MM/);
        assert.ok(s.rssPeak - s.rssBefore < 32 * 2 ** 20, `receiver RSS grew by ${s.rssPeak - s.rssBefore}`);
      },
    );

    it(
      'without ECM: a 2 m second page is cut off mid-page at a lowered 300 mm limit; page 1 kept, bounded memory',
      needsMedia,
      async () => {
        const s = await send(
          1,
          { MAX_PAGE_MM: '300', ECM: '0' },
          makeLongPageTiff(1, 2000, 'standard', 50),
          2,
        );
        console.log(
          `long page (no ECM): ${JSON.stringify(s.row)}; receiver RSS ${(s.rssBefore / 2 ** 20).toFixed(0)} → peak ${(s.rssPeak / 2 ** 20).toFixed(0)} MiB; sender ${JSON.stringify(s.outcome)}`,
        );
        assert.equal(s.outcome.ok, false);
        assert.deepEqual(s.pagesConfirmed, [1], 'the sender had page 1 confirmed, not page 2');
        assert.deepEqual(
          [s.row.status, s.row.pages, s.row.no_tiff, s.row.no_pdf],
          ['partial', 1, false, false],
        );
        assert.match(s.row.result_text, /page 2 longer than 300 mm.*INBOUND_MAX_PAGE_MM.*1 page kept/);
        assert.ok(s.rssPeak - s.rssBefore < 64 * 2 ** 20, `receiver RSS grew by ${s.rssPeak - s.rssBefore}`);
      },
    );

    it(
      'a 4-page fax to a receiver capped at 2 pages: the call ends after page 2, both kept as partial, the limit named',
      needsMedia,
      async () => {
        const s = await send(2, { MAX_PAGES: '2' }, makeFaxTiff(4, 'standard'), 4);
        console.log(`page cap: ${JSON.stringify(s.row)}; sender ${JSON.stringify(s.outcome)}`);
        assert.equal(s.outcome.ok, false);
        assert.deepEqual(s.pagesConfirmed, [1, 2], 'pages 1 and 2 confirmed to the sender, no more');
        assert.deepEqual(
          [s.row.status, s.row.pages, s.row.no_tiff, s.row.no_pdf],
          ['partial', 2, false, false],
        );
        assert.match(s.row.result_text, /more than 2 pages.*INBOUND_MAX_PAGES.*2 pages kept/);
      },
    );

    it(
      'over G.711 audio: a 4-page fax to a receiver capped at 2 ends after page 2 (MCF sent at 300 bit/s first), both kept',
      needsMedia,
      async () => {
        const s = await send(3, { MAX_PAGES: '2' }, makeFaxTiff(4, 'standard'), 4, 'off');
        console.log(`page cap (audio): ${JSON.stringify(s.row)}; sender ${JSON.stringify(s.outcome)}`);
        assert.equal(s.outcome.ok, false);
        assert.deepEqual(s.pagesConfirmed, [1, 2], 'pages 1 and 2 confirmed to the sender, no more');
        assert.deepEqual(
          [s.row.status, s.row.pages, s.row.no_tiff, s.row.no_pdf],
          ['partial', 2, false, false],
        );
        assert.match(s.row.result_text, /more than 2 pages.*INBOUND_MAX_PAGES.*2 pages kept/);
      },
    );
  },
);
