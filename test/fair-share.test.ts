// Fair share between accounts (issue 16 follow-up): one account's backlog of slow faxes must not
// hold another account's fax in front of the send worker, the PDF check sandbox or the render pool.
// Real PostgreSQL, RabbitMQ, HTTP on 127.0.0.1 and real child processes.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { getPriority } from 'node:os';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PdfSandbox, defaultSandboxLimits } from '../src/documents/check.ts';
import { HEAVY_NICE, HEAVY_TASK_CPU_MS, RecentCpu } from '../src/documents/capped-child.ts';
import { FairGate, FairQueue } from '../src/documents/fair-queue.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { chainedFlateBombPdf, fillHeavyPdf } from './fixtures/hostile/build.ts';
import { makePdfBase64 } from './support/pdf.ts';

describe('FairQueue: the reserve rule', () => {
  it('never gives one account every slot, and serves the account with the fewest running first', () => {
    const q = new FairQueue<string>(2);
    for (let i = 0; i < 5; i++) q.push('B', `b${i}`);
    assert.deepEqual(q.take(), { account: 'B', item: 'b0' });
    assert.equal(q.take(), null, 'B alone still gets only size - 1 = 1 of the 2 slots');
    q.push('A', 'a0');
    assert.deepEqual(q.take(), { account: 'A', item: 'a0' }, 'the kept slot goes to A at once');
    q.done('B');
    assert.deepEqual(q.take(), { account: 'B', item: 'b1' });
    assert.equal(new FairQueue<string>(1).perAccount, 1, 'one slot: the account may use it');
  });

  it('FairGate: an account waiting behind another account’s backlog is let in first', async () => {
    const gate = new FairGate(3, 2);
    const order: string[] = [];
    const held = await Promise.all([gate.acquire('B'), gate.acquire('B')]);
    // Each of B's queued ones gives its permit back as soon as it has it.
    const queued = [1, 2, 3].map((i) => gate.acquire('B').then((r) => (order.push(`B${i}`), r())));
    const a = gate.acquire('A').then((r) => (order.push('A'), r));
    (await a)();
    assert.deepEqual(order, ['A'], 'A ran on the free third permit while B waited at its share of 2');
    held[0]!();
    held[1]!();
    await Promise.all(queued);
    assert.deepEqual(order, ['A', 'B1', 'B2', 'B3']);
  });
});

describe('RecentCpu: which accounts are heavy', () => {
  it('decays with a 10 s half-life; a task just past the line leaves its account heavy for at least that long', () => {
    const r = new RecentCpu();
    r.add('light', 900, 0);
    r.add('light', 200, 0); // 1,100 ms in two tasks, each under the line: counted as used
    assert.equal(r.heavy('light', 0), true);
    assert.equal(r.heavy('light', 2_000), false, '1,100 ms decays under 1,000 within 2 s');
    r.add('past', HEAVY_TASK_CPU_MS + 50, 0); // one task, ended by a limit just past the line
    assert.equal(r.heavy('past', 9_000), true, 'still heavy 9 s later');
    assert.equal(r.heavy('past', 11_000), false, 'light again after a half-life');
    assert.equal(r.heavy('other', 0), false);
  });
});

describe('render pool: a replaced process has exited before its successor starts', () => {
  it('recycles after every task without two processes alive at once', async () => {
    const pool = new RenderPool({ size: 1, recycleAfterTasks: 1 });
    try {
      const pdf = Buffer.from(await makePdfBase64(1), 'base64');
      const task = { kind: 'page-image', pdf, page: 0, quality: 'standard' } as const;
      const seen: { old: number; others: number[]; oldExists: boolean }[] = [];
      for (let i = 0; i < 3; i++) {
        let old = 0;
        const first = pool.run(task, { onPage: () => undefined });
        // A second task queued behind the first: the pool starts a process for it once the first
        // one's process (recycled after one task) is gone.
        const second = pool.run(task);
        await eventually(async () => (old = pool.pids()[0] ?? 0), 30_000, 5);
        await first.then(() => {
          // Synchronously on the first task's answer: the new process may exist only if the old
          // one has exited (its /proc entry is gone once its exit has been collected).
          seen.push({
            old,
            others: pool.pids().filter((p) => p !== old),
            oldExists: existsSync(`/proc/${old}`),
          });
        });
        await second;
      }
      for (const s of seen)
        assert.ok(
          s.others.length === 0 || !s.oldExists,
          `render process ${s.old} still alive while its successor ${s.others.join(',')} runs`,
        );
    } finally {
      await pool.close();
    }
  });
});

/** The nice value of a process, from /proc (field 19 of stat). */
function niceOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
  } catch {
    return null;
  }
}

describe('render pool: heavy tasks at a low CPU priority', () => {
  it('moves a process whose task used more than 1 s of CPU to nice 10; that account’s next tasks run at nice 10, another account’s at the normal priority', async () => {
    const pool = new RenderPool({ size: 2, pageTimeoutMs: 2_000 });
    const light = Buffer.from(await makePdfBase64(1), 'base64');
    /** Runs a one-page task of `accountId` and returns what `probe` read of the pool's processes while it ran. */
    const during = async (accountId: string, probe: (nices: number[]) => number) => {
      let seen = -1;
      await pool.run(
        { kind: 'fax-pages', pdf: light, first: 0, count: 1, quality: 'standard' },
        { accountId, onPage: () => void (seen = probe(pool.pids().map((p) => niceOf(p) ?? -1))) },
      );
      return seen;
    };
    try {
      const own = getPriority();
      const heavy = pool
        .run({ kind: 'page-image', pdf: fillHeavyPdf(), page: 0, quality: 'standard' }, { accountId: 'B' })
        .catch((e: unknown) => e);
      const pid = await eventually(async () => pool.pids()[0], 30_000, 5);
      assert.equal(niceOf(pid), own, 'a new render process starts at the service’s own priority');
      const nice = await eventually(
        async () => (niceOf(pid) === HEAVY_NICE ? HEAVY_NICE : null),
        30_000,
        20,
      ).catch(() => niceOf(pid));
      assert.equal(
        nice,
        HEAVY_NICE,
        `the fill-heavy page's render process ${pid} still runs at nice ${nice}`,
      );
      await heavy; // render_timeout after 2 s of CPU time: B is a heavy account now
      // B's next task, however light, runs in a low-priority process from its start (the only one).
      assert.equal(
        await during('B', (n) => Math.max(...n)),
        HEAVY_NICE,
        'the heavy account’s next task runs at nice 10',
      );
      // That process is kept; A's task gets a process of its own at the normal priority: the
      // reserve, started idle when B's first task was lowered (issue 27, finding 3).
      assert.equal(pool.pids().length, 2, 'B’s low-priority process and the idle reserve');
      assert.equal(
        await during('A', (n) => Math.min(...n)),
        own,
        'another account’s task runs at the normal priority',
      );
      assert.equal(pool.pids().length, 2, 'the low-priority process was kept for B');
    } finally {
      await pool.close();
    }
  });
});

describe('PDF check sandbox: fair share between accounts', () => {
  it('keeps one of two sandbox processes for another account while one account checks bombs', async () => {
    const sandbox = new PdfSandbox({ ...defaultSandboxLimits, concurrency: 2 });
    try {
      const pdf = Buffer.from(await makePdfBase64(1), 'base64');
      // Each takes a while to count (a 600 MiB double-Flate stream, refused at 256 MiB).
      const bomb = chainedFlateBombPdf({ decodedBytes: 600 * 1024 * 1024, chain: ['flate', 'flate'] });
      // B queues 4 bombs first; A's one small check comes last but must not wait for B's queue.
      const done: string[] = [];
      const all = [
        ...[0, 1, 2, 3].map((i) =>
          sandbox.check(bomb, `b${i}.pdf`, undefined, 'B').then(
            () => done.push(`B${i} passed`),
            () => done.push(`B${i}`),
          ),
        ),
        sandbox.check(pdf, 'a.pdf', undefined, 'A').then(() => done.push('A')),
      ];
      await Promise.all(all);
      const a = done.indexOf('A');
      assert.ok(
        a <= 1,
        `A's check ended in place ${a + 1} of ${done.join(', ')}: it waited behind B's bombs`,
      );
      assert.ok(!done.some((x) => x.endsWith('passed')), 'every bomb refused');
    } finally {
      await sandbox.close();
    }
  });
});

describe('send worker: one account’s slow backlog does not hold another account’s fax', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  // A document server on 127.0.0.1 that holds B's documents until released.
  const held: ServerResponse[] = [];
  let release = false;
  let pdf: Buffer;
  const server = createServer((_req, res) => {
    if (release) res.end(pdf);
    else held.push(res);
  });
  before(async () => {
    pdf = Buffer.from(await makePdfBase64(1), 'base64');
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    s = await startService({
      env: {
        FETCH_ALLOW_HOSTS: '127.0.0.1',
        FETCH_TIMEOUT_SECONDS: '300',
        PREPARE_PARK_SECONDS: '2',
        PREPARE_ACCOUNT_BACKLOG: '32',
      },
    });
  });
  after(async () => {
    release = true;
    for (const res of held.splice(0)) res.end(pdf);
    await s.dropAll();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('starts preparing A’s fax while B’s 40 slow faxes wait', async () => {
    const [a, b] = [await seedAccount(s), await seedAccount(s)];
    const [ta, tb] = [await tokenFor(s.url, a.api_key), await tokenFor(s.url, b.api_key)];
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/slow.pdf`;
    const bJobs: string[] = [];
    for (let i = 0; i < 40; i++) {
      const r = await call(s.url, 'POST', '/v1/faxes/send', {
        token: tb,
        body: { fax_number: '+15551234567', fax_data: [{ file_name: `slow${i}.pdf`, file_url: url }] },
      });
      assert.equal(r.http, 200, r.body.message);
      bJobs.push(r.body.data.job_id as string);
    }
    // B's first faxes are being prepared (their documents requested and held).
    await eventually(async () => held.length >= 1, 30_000);
    const sent = await call(s.url, 'POST', '/v1/faxes/send', {
      token: ta,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.pdf', file_data: pdf.toString('base64') }],
      },
    });
    assert.equal(sent.http, 200, sent.body.message);
    const aJob = sent.body.data.job_id as string;
    // Bounded: B's documents are held for as long as this waits, so on a FIFO worker A never starts.
    const state = await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${aJob}`, { token: ta });
      const st = r.body.data?.state as string | undefined;
      return st && st !== 'accepted' ? st : null;
    }, 20_000).catch(() => 'accepted');
    assert.notEqual(
      state,
      'accepted',
      `A's fax still accepted (waiting in RabbitMQ) after 20 s behind B's backlog`,
    );
    // Work-conserving (issue 33): B, alone at first, may hold every place but the one kept for
    // another account (PREPARE_CONCURRENCY 4 - 1), never all four.
    assert.ok(held.length <= 3, `B holds ${held.length} preparations at once (at most 3 allowed)`);
    // Beyond 32 waiting in the worker (PREPARE_ACCOUNT_BACKLOG, set to 32 here), B's commands are parked durably:
    // acknowledged, their jobs still accepted, each in an intake lot the sweep republishes when due.
    const db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    try {
      const parked = await eventually(async () => {
        const r = await db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM intake_lots l JOIN fax_jobs j ON j.id = ANY (l.job_ids)
            WHERE j.account_id = $1 AND j.state = 'accepted'`,
          [b.account_id],
        );
        return r.rows[0]!.n > 0 ? r.rows[0]!.n : null;
      }, 20_000).catch(() => 0);
      assert.ok(parked > 0, 'none of B’s 40 commands was parked: all are held unacked in the worker');
    } finally {
      await db.end();
    }
    // Nothing is lost: once B's documents come, every fax of both accounts is delivered.
    release = true;
    for (const res of held.splice(0)) res.end(pdf);
    await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${aJob}`, { token: ta });
      return r.body.data?.state === 'delivered';
    }, 60_000);
    for (const id of bJobs)
      await eventually(async () => {
        const r = await call(s.url, 'GET', `/v1/faxes/${id}`, { token: tb });
        return r.body.data?.state === 'delivered';
      }, 120_000);
  });
});
