// Line sharing under a backlog, against the real PostgreSQL and RabbitMQ with the simulated line:
// priority, one call per destination, fair sharing between accounts.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { seedAccount, tokenFor } from './support/client.ts';
import { eventually, withService } from './support/harness.ts';
import { dialOrder, fastLineEnv, firstReached, query, sendFax, waitFinal } from './support/transmission.ts';
import type { SimulatedLine } from '../src/transmission/simulated.ts';

// One 1-page call is about 31 s of line time; at 400x that is about 80 ms.
const backlogEnv = { ...fastLineEnv, SIM_SPEEDUP: '400' };

async function queuedCount(db: string, ids: string[]): Promise<number> {
  const r = await query<{ n: number }>(
    db,
    `SELECT count(*)::int AS n FROM fax_jobs WHERE id = ANY($1::uuid[]) AND state IN ('queued', 'blocked')`,
    [ids],
  );
  return r[0]?.n ?? 0;
}

describe('lines under a backlog', () => {
  it('a high fax goes before every regular fax still waiting, and never behind a later one', async () => {
    // About 310 ms per call on one line: a backlog of 8 regular faxes lasts about 2.5 s.
    await withService({ env: { ...backlogEnv, SIM_SPEEDUP: '100', LINES: '1' } }, async (s) => {
      const token = await tokenFor(s.url, (await seedAccount(s)).api_key);
      const db = s.cfg.DATABASE_URL;
      const regular = await Promise.all(
        Array.from({ length: 8 }, (_, i) => sendFax(s, token, `+1555123000${i}`)),
      );
      await eventually(async () => (await queuedCount(db, regular)) >= 5);
      const high = await Promise.all(
        [0, 1, 2].map((i) => sendFax(s, token, `+1555124000${i}`, { priority: 'high' })),
      );
      await eventually(async () => (await firstReached(db, high, 'queued')).size === 3);
      const late = await sendFax(s, token, '+15551250000'); // regular, ready after the high ones
      const all = [...regular, ...high, late];
      for (const id of all) assert.equal((await waitFinal(s, token, id)).state, 'delivered');

      const order = await dialOrder(db, all);
      const ready = await firstReached(db, all, 'queued');
      const dialled = await firstReached(db, all, 'dialling');
      const pattern = order.map((id) => (high.includes(id) ? 'H' : id === late ? 'L' : 'r')).join('');
      const allHighReady = Math.max(...high.map((h) => ready.get(h)!));
      const lastHigh = Math.max(...high.map((h) => order.indexOf(h)));
      // Regular faxes still waiting once every high one was ready did not go before them (one claim
      // may have been in flight at that moment).
      const overtaking = regular.filter(
        (r) => dialled.get(r)! > allHighReady && order.indexOf(r) < lastHigh,
      ).length;
      assert.ok(overtaking <= 1, `high faxes go before the waiting regular ones: ${pattern}`);
      assert.ok(
        regular.filter((r) => order.indexOf(r) > lastHigh).length >= 2,
        `a backlog of regular faxes was still waiting behind them: ${pattern}`,
      );
      for (const h of high)
        for (const r of [...regular, late])
          if (ready.get(r)! > ready.get(h)!)
            assert.ok(order.indexOf(h) < order.indexOf(r), `no high fax behind a later regular: ${pattern}`);
      assert.equal(order.at(-1), late, `the late regular fax waits behind the earlier backlog: ${pattern}`);
    });
  });

  it('one call at a time per destination: others wait blocked, then go out', async () => {
    await withService({ env: { ...backlogEnv, LINES: '6', DESTINATION_MAX_CALLS: '1' } }, async (s) => {
      const token = await tokenFor(s.url, (await seedAccount(s)).api_key);
      const same = await Promise.all([0, 1, 2, 3].map(() => sendFax(s, token, '+15551239999')));
      const others = await Promise.all([0, 1, 2].map((i) => sendFax(s, token, `+1555126000${i}`)));
      for (const id of [...same, ...others]) assert.equal((await waitFinal(s, token, id)).state, 'delivered');
      const line = s.running.backend as SimulatedLine;
      assert.equal(line.peakByNumber.get('+15551239999'), 1, 'never two calls to one number');
      assert.ok(line.peak >= 2, `other numbers were called in parallel (peak ${line.peak})`);
      const blocked = await firstReached(s.cfg.DATABASE_URL, same, 'blocked');
      assert.ok(blocked.size >= 1, 'faxes to the busy destination waited as blocked');
      // Intervals of the calls to the same number do not overlap (from the recorded attempts).
      const calls = await query<{ started_at: Date; ended_at: Date }>(
        s.cfg.DATABASE_URL,
        'SELECT started_at, ended_at FROM fax_attempts WHERE job_id = ANY($1::uuid[]) ORDER BY started_at',
        [same],
      );
      assert.equal(calls.length, 4);
      for (let i = 1; i < calls.length; i++)
        assert.ok(calls[i]!.started_at >= calls[i - 1]!.ended_at, 'calls to one number follow each other');
    });
  });

  it('shares lines fairly: a burst from one account does not hold another account back', async () => {
    // Fair share is among faxes that are queued: B's faxes must be prepared (rendered) before they can
    // take a line, and on a busy machine that takes several of A's calls (at 100x, three test files
    // at once: 'aaaaaBaaaaaaBaBaBaaa'; at 25x under CI_LOAD=2: 'aaaBaaaBaBaBaaaaaaaa'). So what is
    // counted is how many of A's calls were dialled while a fax of B waited queued for a line: with
    // fair turns about one per fax of B called before it (B's calls alternate with A's: 0, 1, 2, 4
    // on an idle machine), where first come first served would give B's first fax all of A's
    // queued backlog (8 or more).
    await withService({ env: { ...backlogEnv, SIM_SPEEDUP: '25', LINES: '2' } }, async (s) => {
      const a = await tokenFor(s.url, (await seedAccount(s)).api_key);
      const b = await tokenFor(s.url, (await seedAccount(s)).api_key);
      const burst = await Promise.all(
        Array.from({ length: 16 }, (_, i) => sendFax(s, a, `+155512700${String(i).padStart(2, '0')}`)),
      );
      await eventually(async () => (await queuedCount(s.cfg.DATABASE_URL, burst)) >= 8);
      const few = await Promise.all([0, 1, 2, 3].map((i) => sendFax(s, b, `+1555128000${i}`)));
      for (const id of burst) await waitFinal(s, a, id);
      for (const id of few) await waitFinal(s, b, id);
      const order = await dialOrder(s.cfg.DATABASE_URL, [...burst, ...few]);
      const lastB = Math.max(...few.map((id) => order.indexOf(id)));
      const aAfter = order.slice(lastB).filter((id) => burst.includes(id)).length;
      const pattern = order.map((id) => (burst.includes(id) ? 'a' : 'B')).join('');
      // Queued and first dialled, in the order they happened (transition ids).
      const events = await query<{ job_id: string; to_state: string }>(
        s.cfg.DATABASE_URL,
        `SELECT job_id, to_state FROM fax_job_transitions WHERE job_id = ANY($1::uuid[])
            AND (to_state = 'queued' OR (to_state = 'dialling' AND attempt = 1)) ORDER BY id`,
        [[...burst, ...few]],
      );
      const waiting = new Map<string, number>(); // B's queued faxes: A's calls dialled meanwhile
      const aWhileBWaited: number[] = [];
      for (const e of events) {
        const isB = few.includes(e.job_id);
        if (e.to_state === 'queued' && isB && !waiting.has(e.job_id)) waiting.set(e.job_id, 0);
        if (e.to_state !== 'dialling') continue;
        if (isB) {
          aWhileBWaited.push(waiting.get(e.job_id) ?? 0);
          waiting.delete(e.job_id);
        } else for (const [id, n] of waiting) waiting.set(id, n + 1);
      }
      assert.equal(aWhileBWaited.length, few.length, `every fax of B was queued, then dialled: ${pattern}`);
      // B's k-th call (0-based) may follow one of A's per B call before it, and one more.
      assert.ok(
        aWhileBWaited.every((n, k) => n <= k + 2),
        `A's calls dialled while each fax of B waited queued: ${aWhileBWaited.join(', ')} (at most 2, 3, 4, 5); order ${pattern}`,
      );
      assert.ok(aAfter >= 4, `A's backlog was still waiting when B finished: ${pattern}`);
    });
  });
});
