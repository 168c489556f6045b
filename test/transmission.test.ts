// Every documented test number of the simulated line, end to end (customer API → RabbitMQ → send
// worker → line caller → simulated line), ends in its documented state and attempt history.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { seedAccount, tokenFor } from './support/client.ts';
import { startService } from './support/harness.ts';
import { fastLineEnv, query, sendFax, waitFinal } from './support/transmission.ts';
import type { SimulatedLine } from '../src/transmission/simulated.ts';
import { simulatedTestNumbers, simulatedTestNumbersMarkdown } from '../src/transmission/simulated.ts';

interface Attempt {
  attempt: number;
  outcome: string;
  failure: { type: string; code: string; message: string; retryable: boolean } | null;
  pages_sent: number;
  page_count: number;
  pages_already_sent_before: number;
  bit_rate: number | null;
}

describe('simulated line test numbers', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let token: string;
  before(async () => {
    s = await startService({ env: fastLineEnv });
    token = await tokenFor(s.url, (await seedAccount(s)).api_key);
  });
  after(async () => {
    await s.dropAll();
  });

  const cases: {
    number: string;
    pages?: number;
    state: string;
    code?: string;
    attempts: [outcome: string, type: string | null, pagesSent: number][];
    bitRate?: number;
  }[] = [
    { number: '+15550100000', state: 'delivered', attempts: [['delivered', null, 1]], bitRate: 14_400 },
    {
      number: '+15550100001',
      state: 'failed',
      code: 'busy',
      attempts: [
        ['failed', 'busy', 0],
        ['failed', 'busy', 0],
        ['failed', 'busy', 0],
      ],
    },
    {
      number: '+15550100002',
      state: 'delivered',
      attempts: [
        ['failed', 'busy', 0],
        ['delivered', null, 1],
      ],
    },
    {
      number: '+15550100003',
      state: 'failed',
      code: 'no_answer',
      attempts: [
        ['failed', 'no_answer', 0],
        ['failed', 'no_answer', 0],
        ['failed', 'no_answer', 0],
      ],
    },
    {
      number: '+15550100004',
      state: 'failed',
      code: 'no_fax_tone',
      attempts: [
        ['failed', 'no_fax_tone', 0],
        ['failed', 'no_fax_tone', 0],
        ['failed', 'no_fax_tone', 0],
      ],
    },
    {
      number: '+15550100005',
      state: 'failed',
      code: 'invalid_number',
      attempts: [['failed', 'invalid_number', 0]],
    },
    {
      number: '+15550100008',
      state: 'delivered',
      attempts: [['delivered', null, 2]],
      pages: 2,
      bitRate: 4800,
    },
    {
      number: '+15550100009',
      state: 'delivered',
      attempts: [
        ['failed', 'protocol_error', 0],
        ['delivered', null, 1],
      ],
    },
    {
      number: '+15550100012',
      pages: 3,
      state: 'delivered',
      attempts: [
        ['failed', 'call_dropped', 2],
        ['delivered', null, 3],
      ],
    },
    {
      number: '+15550100021',
      pages: 2,
      state: 'failed',
      code: 'call_dropped',
      attempts: [
        ['failed', 'call_dropped', 1],
        ['failed', 'call_dropped', 1],
      ],
    },
    { number: '+15551234567', state: 'delivered', attempts: [['delivered', null, 1]] },
  ];

  it('documents every number it tests, and tests every documented number', () => {
    const documented = simulatedTestNumbers.map((t) => t.number);
    for (const c of cases.slice(0, -1)) {
      const pattern = documented.find(
        (d) => d === c.number || (d.endsWith('N') && c.number.startsWith(d.slice(0, -1))),
      );
      assert.ok(pattern, `${c.number} is documented`);
    }
    for (const d of documented) {
      assert.ok(
        cases.some((c) => c.number === d || (d.endsWith('N') && c.number.startsWith(d.slice(0, -1)))),
        `${d} is tested`,
      );
    }
  });

  it('docs/lines-retries.md lists every test number', () => {
    assert.equal(simulatedTestNumbersMarkdown().split('\n').length, simulatedTestNumbers.length + 2);
    const doc = readFileSync(new URL('../docs/lines-retries.md', import.meta.url), 'utf8');
    for (const t of simulatedTestNumbers)
      assert.match(doc, new RegExp(`\\|\\s*\`\\${t.number}\`\\s*\\|`), t.number);
  });

  it('every number ends in its documented state with its attempt history', async () => {
    const jobs = await Promise.all(
      cases.map(async (c) => ({ c, id: await sendFax(s, token, c.number, { pages: c.pages ?? 1 }) })),
    );
    for (const { c, id } of jobs) {
      const job = await waitFinal(s, token, id);
      const label = `${c.number}: ${JSON.stringify(job.attempt_history)}`;
      assert.equal(job.state, c.state, label);
      if (c.code) assert.equal(job.failure?.code, c.code, label);
      else assert.equal(job.failure, null, label);
      const attempts = job.attempt_history as Attempt[];
      assert.deepEqual(
        attempts.map((a) => [a.outcome, a.failure?.type ?? null, a.pages_sent]),
        c.attempts,
        label,
      );
      assert.deepEqual(
        attempts.map((a) => a.attempt),
        c.attempts.map((_, i) => i + 1),
      );
      assert.equal(job.attempts, c.attempts.length);
      // A retry after a dropped call says which pages the receiver already had.
      for (let i = 1; i < attempts.length; i++)
        assert.equal(attempts[i]!.pages_already_sent_before, attempts[i - 1]!.pages_sent, label);
      if (c.bitRate) assert.equal(attempts.at(-1)!.bit_rate, c.bitRate, label);
      // Each retry went through retry_waiting with its next attempt time, then queued again.
      const waits = job.history.filter((h: { to: string }) => h.to === 'retry_waiting');
      const retried = c.attempts.length - 1;
      assert.equal(waits.length, retried, label);
      for (const w of waits) assert.ok(Date.parse(w.detail.next_attempt_at) > 0);
      assert.equal(
        (s.running.backend as SimulatedLine).calls.get(id)?.join(','),
        c.attempts.map((_, i) => i + 1).join(','),
        'one call per attempt, counted at the backend',
      );
    }
    const slow = jobs.find((j) => j.c.number === '+15550100008')!;
    const slowJob = await waitFinal(s, token, slow.id);
    const connected = slowJob.history.find(
      (h: { to: string; from: string }) => h.to === 'sending' && h.from === 'dialling',
    );
    assert.deepEqual(connected.detail, { bit_rate: 4800, trainings: [14_400, 9600, 4800] });
    // Every call's lease ended with it, delivered or failed (cleared by the statement of its end state).
    const leased = await query<{ id: string }>(
      s.cfg.DATABASE_URL,
      'SELECT id FROM fax_jobs WHERE id = ANY($1::uuid[]) AND (lease_owner IS NOT NULL OR lease_until IS NOT NULL)',
      [jobs.map((j) => j.id)],
    );
    assert.deepEqual(leased, [], 'no ended fax keeps a lease');
  });
});

describe('a retry due before the next poll', () => {
  it('is dialled at its due time: the line caller does not wait for its poll (LINE_POLL_MS 60 s)', async () => {
    // The caller's poll is a minute away; the retry after "busy" is due 0.2 s after the first call.
    // Without a round of its own at the retry's due time, the second call would wait for the poll
    // and this fax would not be delivered within the 30 s waited for.
    const s = await startService({
      env: { ...fastLineEnv, LINE_POLL_MS: '60000', RETRY_BUSY_SECONDS: '0.2' },
    });
    try {
      const token = await tokenFor(s.url, (await seedAccount(s)).api_key);
      const id = await sendFax(s, token, '+15550100002'); // busy once, then answers
      const job = await waitFinal(s, token, id, 30_000);
      assert.equal(job.state, 'delivered', JSON.stringify(job.attempt_history));
      assert.equal(job.attempts, 2);
      // Not the minute's poll: the second call started well within it (whatever the wait's scale).
      const [first, second] = job.attempt_history as { started_at: string; ended_at: string }[];
      const gap = Date.parse(second!.started_at) - Date.parse(first!.ended_at);
      assert.ok(gap < 30_000, `second call ${gap} ms after the first ended`);
    } finally {
      await s.dropAll();
    }
  });
});
