// Nothing per fax may outlive the fax in a long-running worker (issue #10: the send worker's heap
// grew by about 1 KB per fax in the 30-minute soak). Checked here: the abort signal of a finished
// call is garbage (it was kept for the whole call deadline by AbortSignal.any with
// AbortSignal.timeout), the deadline helper releases its parent, and the simulated line's
// bookkeeping stays bounded.
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { setImmediate as tick } from 'node:timers/promises';
import { queryObjects, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, it } from 'node:test';
import { deadline } from '../src/deadline.ts';
import { HISTORY, SimulatedLine } from '../src/transmission/simulated.ts';
import type { CallControl } from '../src/transmission/backend.ts';
import { seedAccount, tokenFor } from './support/client.ts';
import { eventually, withService } from './support/harness.ts';
import { fastLineEnv, sendFax, waitFinal } from './support/transmission.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Full collections, with turns of the event loop between them (WeakRefs are cleared after a turn). */
async function collect(): Promise<void> {
  for (let i = 0; i < 4; i++) {
    gc();
    await tick();
  }
}

/** Objects of a class still alive (the query itself collects garbage first). */
function liveCount(ctor: abstract new (...a: never[]) => object): number {
  return queryObjects(ctor as never, { format: 'count' }) as number;
}

/** Runs `n` operations to completion under `parent`; returns weak references to their signals. */
function finishMany(parent: AbortSignal, n: number): WeakRef<AbortSignal>[] {
  const refs: WeakRef<AbortSignal>[] = [];
  for (let i = 0; i < n; i++) {
    const d = deadline(60_000, parent);
    refs.push(new WeakRef(d.signal));
    d.dispose();
  }
  return refs;
}

describe('memory retained per fax', () => {
  it('a finished call leaves no abort signal behind (not kept until the call deadline)', async () => {
    // The default call deadline (30 min): anything kept until then grows with every fax.
    await withService({ env: { ...fastLineEnv, CALL_TIMEOUT_SECONDS: '1800' } }, async (s) => {
      const token = await tokenFor(s.url, (await seedAccount(s)).api_key);
      const send = async (n: number, from: number) => {
        const ids = await Promise.all(
          Array.from({ length: n }, (_, i) =>
            sendFax(s, token, `+1555127${String(from + i).padStart(4, '0')}`),
          ),
        );
        for (const id of ids) assert.equal((await waitFinal(s, token, id)).state, 'delivered');
      };
      await send(2, 0); // warm-up: whatever is created once per process
      await collect();
      const signals0 = liveCount(AbortSignal);
      const faxes = 20;
      await send(faxes, 100);
      await collect();
      const signals = liveCount(AbortSignal) - signals0;
      // Before the fix: one AbortSignal.timeout signal per call (+20), each with its timer. (Timer
      // objects are not counted: the in-process API's sockets make their number vary.)
      assert.ok(signals <= 3, `${signals} more AbortSignals alive after ${faxes} finished faxes`);
    });
  });

  it('deadline: aborts at the deadline or with its parent, and lets go of both when disposed', async () => {
    const parent = new AbortController();
    const late = deadline(20, parent.signal, 'the test');
    await eventually(async () => late.signal.aborted, 5000, 5);
    assert.equal(late.signal.aborted, true);
    assert.equal(late.timedOut, true);
    assert.equal((late.signal.reason as DOMException).name, 'TimeoutError');
    late.dispose();

    const first = new AbortController();
    const raced = deadline(20, first.signal);
    // A deadline of the same length made after it ends after it would have (timers of one length
    // fire in the order they were made): once this one has, the first one's time is past too.
    const marker = deadline(20);
    first.abort(new Error('hang up'));
    await eventually(async () => marker.signal.aborted, 5000, 5);
    marker.dispose();
    assert.equal(raced.timedOut, false, 'the parent ended it, not the deadline');
    assert.equal((raced.signal.reason as Error).message, 'hang up');
    assert.equal(getEventListeners(first.signal, 'abort').length, 0);
    raced.dispose();

    const cut = deadline(60_000, parent.signal);
    // Many finished operations under one long-lived parent (the worker's shutdown signal).
    const refs = finishMany(parent.signal, 200);
    assert.equal(getEventListeners(parent.signal, 'abort').length, 1, 'only the undisposed one is hooked');
    parent.abort(new Error('shutdown'));
    assert.equal(cut.signal.aborted, true);
    assert.equal(cut.timedOut, false);
    assert.equal((cut.signal.reason as Error).message, 'shutdown');
    cut.dispose();
    await collect();
    assert.equal(refs.filter((r) => r.deref() !== undefined).length, 0, 'disposed deadlines are garbage');
  });

  it('the simulated line keeps a bounded history and forgets idle destinations', async () => {
    const line = new SimulatedLine(0); // no line time
    const ctl: CallControl = {
      signal: new AbortController().signal,
      deadline: new Date(Date.now() + 60_000),
      onProgress: async () => undefined,
    };
    const n = HISTORY + 200;
    for (let i = 0; i < n; i++) {
      const outcome = await line.transmit(
        {
          jobId: `job-${i}`,
          attempt: 1,
          faxNumber: `+1555128${String(i).padStart(4, '0')}`,
          callerId: '+15550000000',
          quality: 'standard',
          pageBytes: [1000],
        },
        ctl,
      );
      assert.equal(outcome.ok, true);
    }
    assert.equal(line.calls.size, HISTORY);
    assert.deepEqual(line.calls.get(`job-${n - 1}`), [1], 'the latest calls are remembered');
    assert.equal(line.calls.get('job-0'), undefined, 'the oldest are forgotten');
    assert.equal(line.peakByNumber.size, HISTORY);
    assert.equal(line.active.size, 0, 'no destination with a call in progress');
  });
});
