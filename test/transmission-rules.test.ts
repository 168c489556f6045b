// The pure rules of transmission (retry policy, the simulated line's scripts and physics) and the
// ordering SQL of the line caller, checked on a fresh database with hand-placed ready jobs.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { migrate } from '../src/db/migrate.ts';
import { pickCandidates } from '../src/lines/repo.ts';
import { decideRetry, defaultRetryPolicy, retryDelaySeconds } from '../src/transmission/retry.ts';
import { lineTiming, pageLineMs, scriptFor, SimulatedLine } from '../src/transmission/simulated.ts';
import { createDatabase } from './support/harness.ts';

describe('retry policy', () => {
  const p = defaultRetryPolicy;
  const now = new Date('2026-01-01T10:00:00Z');
  const since = new Date('2026-01-01T09:00:00Z');

  it('waits per cause with HylaFAX-like defaults', () => {
    assert.equal(retryDelaySeconds(p, 'busy'), 180);
    assert.equal(retryDelaySeconds(p, 'no_answer'), 300);
    assert.equal(retryDelaySeconds(p, 'protocol_error'), 60);
    assert.equal(retryDelaySeconds(p, 'call_dropped'), 60);
    assert.equal(retryDelaySeconds(p, 'no_fax_tone'), 300);
    const d = decideRetry(p, { type: 'busy', retryable: true }, { dials: 1, tries: 0, since, now });
    assert.deepEqual(d, { retry: true, at: new Date(now.getTime() + 180_000) });
  });

  it('never retries an invalid number, and stops at the dial, try and time limits', () => {
    assert.equal(
      decideRetry(p, { type: 'invalid_number', retryable: false }, { dials: 1, tries: 0, since, now }).retry,
      false,
    );
    assert.equal(
      decideRetry(p, { type: 'busy', retryable: true }, { dials: 12, tries: 0, since, now }).retry,
      false,
    );
    assert.equal(
      decideRetry(p, { type: 'busy', retryable: true }, { dials: 11, tries: 0, since, now }).retry,
      true,
    );
    assert.equal(
      decideRetry(p, { type: 'call_dropped', retryable: true }, { dials: 3, tries: 3, since, now }).retry,
      false,
    );
    const late = new Date(since.getTime() + 3 * 3600_000 - 100_000);
    assert.equal(
      decideRetry(p, { type: 'busy', retryable: true }, { dials: 1, tries: 0, since, now: late }).retry,
      false,
    );
  });
});

describe('simulated line', () => {
  it('follows the documented scripts, deterministically', () => {
    assert.deepEqual(scriptFor('+15550100001', 1), { kind: 'busy' });
    assert.deepEqual(scriptFor('+15550100001', 7), { kind: 'busy' });
    assert.deepEqual(scriptFor('+15550100002', 1), { kind: 'busy' });
    assert.equal(scriptFor('+15550100002', 2).kind, 'deliver');
    assert.deepEqual(scriptFor('+15550100014', 1), { kind: 'drop', afterPage: 4 });
    assert.equal(scriptFor('+15550100014', 2).kind, 'deliver');
    assert.deepEqual(scriptFor('+15550100027', 5), { kind: 'drop', afterPage: 7 });
    assert.deepEqual(scriptFor('+15550100008', 1), { kind: 'deliver', trainings: [14_400, 9600, 4800] });
    assert.equal(scriptFor('+4930123456', 1).kind, 'deliver');
  });

  it('computes line time from the physics in the fax notes', () => {
    // One 31 KB fine letter page at 14,400 bit/s: 7 s training + 17.2 s + 2.5 s + 3 s hang-up,
    // close to the measured 35-38 s once dialling and ringing are added.
    const ms = SimulatedLine.lineTimeMs({ faxNumber: '+15551234567', pageBytes: [31_000] });
    const answerToHangup = ms - lineTiming.dialMs - lineTiming.ringMs;
    assert.ok(answerToHangup > 28_000 && answerToHangup < 31_000, String(answerToHangup));
    assert.ok(Math.abs(pageLineMs(31_000, 4800) - (51_667 + 2500)) < 1);
    const slow = SimulatedLine.lineTimeMs({ faxNumber: '+15550100008', pageBytes: [31_000] });
    assert.ok(slow - ms > 30_000, 'the fall-back to 4,800 bit/s costs more than 30 s on one page');
  });

  it('delivers in zero time at speed-up 0 and reports progress in order', async () => {
    const line = new SimulatedLine(0);
    const seen: string[] = [];
    const out = await line.transmit(
      {
        jobId: 'j',
        attempt: 1,
        faxNumber: '+15550100008',
        callerId: '+1',
        quality: 'standard',
        pageBytes: [1, 2],
      },
      {
        signal: new AbortController().signal,
        deadline: new Date(Date.now() + 1000),
        onProgress: (p) => {
          seen.push(p.type === 'page_sent' ? `page ${p.page}/${p.of}` : p.type);
        },
      },
    );
    assert.deepEqual(out.ok && [out.pages, out.bitRate], [2, 4800]);
    assert.deepEqual(seen, [
      'dialling',
      'training',
      'training',
      'training',
      'connected',
      'page 1/2',
      'page 2/2',
    ]);
  });

  it('ends an aborted call as aborted, with the pages already sent', async () => {
    const line = new SimulatedLine(100);
    const ac = new AbortController();
    const out = await line.transmit(
      {
        jobId: 'j',
        attempt: 1,
        faxNumber: '+15551234567',
        callerId: '+1',
        quality: 'standard',
        pageBytes: [19_000, 19_000],
      },
      {
        signal: ac.signal,
        deadline: new Date(Date.now() + 10_000),
        onProgress: (p) => {
          if (p.type === 'page_sent') ac.abort();
        },
      },
    );
    assert.equal(out.ok, false);
    assert.ok(!out.ok && out.type === 'aborted' && out.pagesSent === 1 && out.retryable);
  });
});

describe('line order (line caller SQL)', () => {
  let db: Awaited<ReturnType<typeof createDatabase>>;
  let pool: pg.Pool;
  const accounts = [randomUUID(), randomUUID()];
  before(async () => {
    db = await createDatabase();
    pool = new pg.Pool({ connectionString: db.url, max: 2 });
    await migrate(pool);
    for (const a of accounts) await pool.query(`INSERT INTO accounts (id, name) VALUES ($1, 'acct')`, [a]);
  });
  after(async () => {
    await pool.end();
    await db.drop();
  });

  async function job(o: {
    account: number;
    priority: 'high' | 'regular';
    readySecondsAgo: number;
    number?: string;
    state?: string;
  }) {
    const id = randomUUID();
    await pool.query(
      `INSERT INTO fax_jobs (id, account_id, kind, state, fax_number, caller_id, fax_quality, fax_priority, ready_at, page_bytes)
       VALUES ($1, $2, 'send', $3, $4, '+15550100001', 'standard', $5, now() - make_interval(secs => $6), '{100}')`,
      [
        id,
        accounts[o.account],
        o.state ?? 'queued',
        o.number ?? `+1555${Math.floor(Math.random() * 1e7)}`,
        o.priority,
        o.readySecondsAgo,
      ],
    );
    return id;
  }

  it('high first, regular ones aged past PRIORITY_AGING_SECONDS count as high, then time ready', async () => {
    await pool.query('DELETE FROM fax_jobs');
    const oldRegular = await job({ account: 0, priority: 'regular', readySecondsAgo: 100 });
    const regular = await job({ account: 0, priority: 'regular', readySecondsAgo: 50 });
    const high = await job({ account: 0, priority: 'high', readySecondsAgo: 10 });
    const newer = await job({ account: 0, priority: 'regular', readySecondsAgo: 5 });
    const ids = (await pickCandidates(pool, { limit: 10, agingSeconds: 60, perDestination: 1 })).map(
      (c) => c.id,
    );
    assert.deepEqual(ids, [oldRegular, high, regular, newer]);
    const noAging = (await pickCandidates(pool, { limit: 10, agingSeconds: 1000, perDestination: 1 })).map(
      (c) => c.id,
    );
    assert.deepEqual(noAging, [high, oldRegular, regular, newer]);
  });

  it('alternates between accounts by calls in progress, and skips busy destinations', async () => {
    await pool.query('DELETE FROM fax_jobs');
    const a = [];
    for (let i = 0; i < 4; i++)
      a.push(await job({ account: 0, priority: 'regular', readySecondsAgo: 100 - i }));
    const b = [await job({ account: 1, priority: 'regular', readySecondsAgo: 1 })];
    await job({
      account: 1,
      priority: 'regular',
      readySecondsAgo: 1,
      state: 'dialling',
      number: '+15559990000',
    });
    const busy = await job({ account: 1, priority: 'high', readySecondsAgo: 200, number: '+15559990000' });
    const ids = (await pickCandidates(pool, { limit: 3, agingSeconds: 1000, perDestination: 1 })).map(
      (c) => c.id,
    );
    // Account 1 already has a call in progress, so account 0 goes first, then they alternate.
    assert.deepEqual(ids, [a[0], a[1], b[0]]);
    assert.ok(!ids.includes(busy));
    const unlimited = (await pickCandidates(pool, { limit: 1, agingSeconds: 1000, perDestination: 0 })).map(
      (c) => c.id,
    );
    assert.deepEqual(unlimited, [busy]);
  });
});
