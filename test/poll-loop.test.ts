// PollLoop: goes on at once while passes find work, sleeps otherwise, counts failures in a row for
// the back-off, and stop() ends a long sleep at once.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PollLoop } from '../src/poll-loop.ts';
import { eventually } from './support/wait.ts';

describe('PollLoop', () => {
  it('runs full passes back to back, backs off after failures, and stops out of a long sleep', async () => {
    // Passes: two full ones, a failure, another failure, an empty one; then the loop sleeps an hour.
    const script: (number | Error)[] = [10, 10, new Error('a'), new Error('b'), 0];
    const waits: number[] = [];
    const errors: [string, number][] = [];
    let passes = 0;
    const loop = new PollLoop({
      pass: async () => {
        const next = script[passes++] ?? 0;
        if (next instanceof Error) throw next;
        return next;
      },
      again: (n) => n >= 10,
      waitMs: (failures) => {
        waits.push(failures);
        return passes >= script.length ? 3_600_000 : 5;
      },
      onError: (err, failures) => errors.push([err.message, failures]),
    });
    loop.start();
    // The loop has gone to sleep for the hour once it asked how long to wait after the last pass.
    await eventually(async () => waits.length >= 3, 5000, 5);
    const t0 = Date.now();
    await loop.stop();
    assert.ok(Date.now() - t0 < 1000, 'stop() woke the hour-long sleep');
    assert.equal(passes, script.length, 'no pass after the loop went to sleep');
    assert.deepEqual(errors, [
      ['a', 1],
      ['b', 2],
    ]);
    // No sleep after the two full passes; sleeps after each failure (1, 2 in a row), then after the
    // empty pass (failures reset to 0).
    assert.deepEqual(waits, [1, 2, 0]);
  });

  it('after an empty pass asks the probe first, and runs a pass only when the probe says there is work', async () => {
    // The probe's answers in turn; the loop sleeps 1 ms between rounds, an hour once the script ends.
    const probes = [false, false, true, false, true];
    const passResults = [0, 0, 3, 0];
    const seen: string[] = [];
    let p = 0;
    let q = 0;
    const loop = new PollLoop({
      pass: async () => {
        seen.push('pass');
        return passResults[q++] ?? 0;
      },
      probe: async () => {
        seen.push('probe');
        return probes[p++] ?? false;
      },
      // A pass that found work (3) is followed by the next pass at once, without a probe.
      again: (n) => n > 0,
      waitMs: () => (p >= probes.length ? 3_600_000 : 1),
      onError: () => undefined,
    });
    loop.start();
    await eventually(async () => p >= probes.length, 5000, 5);
    await loop.stop();
    // First round: a full pass (nothing known yet). Empty → probes until one says yes; the pass it
    // lets through finds nothing, so the probe decides again; the next "yes" lets a pass find 3 …
    assert.deepEqual(seen, ['pass', 'probe', 'probe', 'probe', 'pass', 'probe', 'probe', 'pass', 'pass']);
  });
});
