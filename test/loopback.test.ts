// The loopback line: real T.30 exchanges through SpanDSP, over audio and T.38, with what the
// virtual receiver got compared to what was sent by libtiff's tiffcmp.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { describe, it } from 'node:test';
import type { Outcome, PreparedFax, Progress } from '../src/transmission/backend.ts';
import { LoopbackLine } from '../src/transmission/loopback.ts';
import { loadFaxloop, unavailableMessage } from '../src/transmission/spandsp/addon.ts';
import { makeFaxTiff, sameImages } from './support/faxtiff.ts';
import { skipUnless } from './support/skips.ts';

const addon = loadFaxloop();
// Every exchange needs the addon: each is skipped, and counted, where it is not built.
const needsAddon = skipUnless(!addon && unavailableMessage, 'spandsp');
const required = process.env.FAXLINE_REQUIRE_SPANDSP === '1';

function fax(tiffPath: string, number: string, pages: number, quality: PreparedFax['quality']): PreparedFax {
  return {
    jobId: `job-${Math.random().toString(36).slice(2)}`,
    attempt: 1,
    faxNumber: number,
    callerId: '+15550001111',
    quality,
    pageBytes: Array.from({ length: pages }, () => 20_000),
    tiff: readFileSync(tiffPath),
  };
}

async function send(line: LoopbackLine, f: PreparedFax) {
  const progress: Progress[] = [];
  const outcome: Outcome = await line.transmit(f, {
    signal: new AbortController().signal,
    deadline: new Date(Date.now() + 60_000),
    onProgress: (p) => {
      progress.push(p);
    },
  });
  return { outcome, progress };
}

describe('loopback line (SpanDSP)', () => {
  it('is available here, or says clearly how to get it', () => {
    if (addon) {
      assert.equal(typeof addon.run, 'function');
      assert.ok(addon.constants.V17 > 0);
    } else {
      assert.ok(!required, 'FAXLINE_REQUIRE_SPANDSP=1 but the addon is not built');
      assert.throws(() => new LoopbackLine({ transport: 'audio', ecm: true, speedup: 0 }), {
        message: unavailableMessage,
      });
    }
  });
});

describe('loopback line (SpanDSP) exchanges', () => {
  const keep = mkdtempSync(join(tmpdir(), 'faxline-rx-'));
  for (const transport of ['audio', 't38'] as const) {
    for (const quality of ['low', 'standard', 'hd'] as const) {
      it(`${transport}, ${quality}: 2 pages arrive pixel-identical`, needsAddon, async () => {
        const tif = makeFaxTiff(2, quality);
        const line = new LoopbackLine({ transport, ecm: true, speedup: 0, keepReceivedIn: keep });
        const f = fax(tif, '+15557770000', 2, quality);
        const { outcome, progress } = await send(line, f);
        assert.ok(outcome.ok, JSON.stringify(outcome));
        assert.equal(outcome.pages, 2);
        assert.equal(outcome.remoteStationId, '+15557770000');
        assert.equal(outcome.engine?.ecm, true);
        assert.equal(outcome.engine?.compression, 'T.6 (MMR)');
        assert.deepEqual(
          progress.map((p) => p.type),
          ['dialling', 'connected', 'page_sent', 'page_sent'],
        );
        const cmp = sameImages(tif, join(keep, `${f.jobId}-1.tif`));
        assert.ok(cmp.same, cmp.output);
      });
    }
  }

  it('audio without ECM falls back to T.4 2-D and still arrives identical', needsAddon, async () => {
    const tif = makeFaxTiff(1, 'standard');
    const line = new LoopbackLine({ transport: 'audio', ecm: false, speedup: 0, keepReceivedIn: keep });
    const f = fax(tif, '+15557770001', 1, 'standard');
    const { outcome } = await send(line, f);
    assert.ok(outcome.ok);
    assert.equal(outcome.engine?.ecm, false);
    assert.equal(outcome.engine?.compression, 'T.4 2-D (MR)');
    assert.ok(sameImages(tif, join(keep, `${f.jobId}-1.tif`)).same);
  });

  it('a receiver that refuses fine resolution: protocol error, not retried', needsAddon, async () => {
    const line = new LoopbackLine({ transport: 'audio', ecm: true, speedup: 0 });
    const { outcome } = await send(line, fax(makeFaxTiff(1, 'standard'), '+19995550101', 1, 'standard'));
    assert.equal(outcome.ok, false);
    if (outcome.ok) return;
    assert.equal(outcome.type, 'protocol_error');
    assert.equal(outcome.retryable, false);
    assert.equal(outcome.code, `T30_${addon!.constants.ERR_NORESSUPPORT}`);
    assert.match(outcome.message, /resolution/i);
  });

  it(
    'a line that drops after page 1: call dropped, retryable, pages already sent reported',
    needsAddon,
    async () => {
      const line = new LoopbackLine({ transport: 'audio', ecm: true, speedup: 0 });
      const { outcome } = await send(line, fax(makeFaxTiff(3, 'low'), '+19995550102', 3, 'low'));
      assert.equal(outcome.ok, false);
      if (outcome.ok) return;
      assert.equal(outcome.type, 'call_dropped');
      assert.equal(outcome.retryable, true);
      assert.ok(outcome.pagesSent <= 1, `pages sent: ${outcome.pagesSent}`);
      assert.ok(Number(outcome.engine?.t30_code) > 0);
    },
  );

  it('a receiver that only has V.27ter: delivered at 4,800 bit/s', needsAddon, async () => {
    const line = new LoopbackLine({ transport: 'audio', ecm: true, speedup: 0 });
    const { outcome } = await send(line, fax(makeFaxTiff(1, 'low'), '+19995550103', 1, 'low'));
    assert.ok(outcome.ok, JSON.stringify(outcome));
    assert.equal(outcome.bitRate, 4800);
  });

  it('a voice line: no fax tone, retryable', needsAddon, async () => {
    const line = new LoopbackLine({ transport: 't38', ecm: true, speedup: 0 });
    const { outcome } = await send(line, fax(makeFaxTiff(1, 'low'), '+19995550104', 1, 'low'));
    assert.equal(outcome.ok, false);
    if (outcome.ok) return;
    assert.equal(outcome.type, 'no_fax_tone');
    assert.equal(outcome.retryable, true);
    assert.equal(outcome.pagesSent, 0);
  });

  it('runs many exchanges at once while the event loop stays responsive', needsAddon, async (t) => {
    const tif = makeFaxTiff(1, 'standard');
    const line = new LoopbackLine({ transport: 't38', ecm: true, speedup: 0 });
    // The exchanges run in the addon's worker threads, off the event loop. Shown by what the loop
    // itself does: the CPU time of this thread (the event loop's) between two turns of a 10 ms
    // timer, which work run on the loop lengthens and the neighbours of a busy machine do not.
    // (Event-loop delay, measured before, also counts the time the machine runs other processes:
    // p99 195 ms vs 14 ms idle once, in a plain npm test, with the work off the loop all the same.)
    const h = monitorEventLoopDelay({ resolution: 10 });
    h.enable();
    let longestMs = 0;
    let turns = 0;
    let last = process.threadCpuUsage();
    const ticker = setInterval(() => {
      const used = process.threadCpuUsage(last);
      last = process.threadCpuUsage();
      turns++;
      longestMs = Math.max(longestMs, (used.user + used.system) / 1000);
    }, 10);
    const all0 = process.cpuUsage();
    let outcomes: Awaited<ReturnType<typeof send>>[];
    try {
      outcomes = await Promise.all(
        Array.from({ length: 16 }, () => send(line, fax(tif, '+15557770002', 1, 'standard'))),
      );
    } finally {
      clearInterval(ticker);
      h.disable();
    }
    const all = process.cpuUsage(all0);
    const allMs = (all.user + all.system) / 1000;
    assert.equal(outcomes.length, 16);
    assert.ok(outcomes.every((o) => o.outcome.ok));
    const figures =
      `the event loop's longest turn ${longestMs.toFixed(1)} ms of CPU (${turns} turns), the process ` +
      `${Math.round(allMs)} ms of CPU during 16 exchanges (event-loop delay p99 ${(h.percentile(99) / 1e6).toFixed(1)} ms)`;
    t.diagnostic(figures);
    // Run on the loop, the 16 exchanges would hold it for about their whole CPU time in one turn.
    assert.ok(longestMs < 50, `the event loop was held: ${figures}`);
  });
});
