// The send worker: takes a send or forward command, fences the job into `preparing`, prepares its
// documents, stores what the line needs (page sizes) and moves the job to `queued` in one
// transaction; the delivery is acknowledged after that commit. Calls are placed by the line
// caller (src/lines/caller.ts), so a long call never holds a RabbitMQ delivery unacked.
// Preparation is shared fairly between accounts (a FairGate): at most `prepareConcurrency` jobs are
// prepared at once, at most `prepareAccountConcurrency` of one account, so with a prefetch window
// larger than that an account's backlog of slow (hostile) documents waits here, in its own queue,
// while another account's commands start at once. Beyond `prepareAccountBacklog` commands of one
// account waiting here, a further command of that account is parked: its job (still `accepted`) gets
// an intake lot due `parkSeconds` later (migration 009) and the delivery is acknowledged; the
// command publisher's sweep republishes the command of a lot that is due, if the job is still
// accepted. So a backlog never holds deliveries unacked for long (RabbitMQ's consumer_timeout), and
// nothing is lost: the job row is the record, and the consumers fence on its state.
// Work-conserving (issue 33): an account is held to `prepareAccountConcurrency` only while another
// account waits (fair-queue.ts); alone it may use every place but one. And parked work comes back as
// soon as there is room for it: when an account this worker parked commands of has half its backlog
// or less waiting here, the worker republishes that many of its parked commands at once (`unpark`)
// instead of idling until they are due (before, a lone account's faxes were prepared in bursts of
// PREPARE_ACCOUNT_BACKLOG every PREPARE_PARK_SECONDS, about 6.4 a second whatever the machine).
import type { ConsumeMessage } from 'amqplib';
import { PermanentMessageError, type MessageHandler } from '../amqp/broker.ts';
import { randomUUID } from 'node:crypto';
import type { Pool, Queryable } from '../db/pool.ts';
import { type JobCommand, jobCommand } from '../domain/commands.ts';
import { DocumentError } from '../documents/errors.ts';
import { FairGate } from '../documents/fair-queue.ts';
import { type DocumentChecks, type Fetcher, type Prepared, prepareJob } from '../documents/prepare.ts';
import type { RenderPool } from '../documents/render/pool.ts';
import type { DocumentStore } from '../documents/store.ts';
import type { SharedRenders } from '../documents/render/shared.ts';
import { getJob, type JobRow, moveJob, transition } from '../jobs/repo.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';
import { SWEEP_GRACE_SECONDS } from '../jobs/command-publisher.ts';
import { deliveryParent, inSpan } from '../trace.ts';

export interface SendWorkerDeps {
  db: Pool;
  fetcher: Fetcher;
  /** The PDF sandbox and the fax's limits, built by the wiring. */
  checks: DocumentChecks;
  /** The render processes faxes are rendered in, built by the wiring. */
  renderPool: RenderPool;
  /** Where the job's documents are read from (default: the built-in PostgreSQL store on `db`). */
  documents?: DocumentStore;
  /** Where a broadcast's document pages are kept once rendered, for its other recipients' faxes. */
  shared?: SharedRenders;
  log: Logger;
  metrics: Metrics;
  /** Aborted on shutdown: document preparation in progress is ended (the delivery is requeued). */
  shutdown: AbortSignal;
  /** Called after a job was queued for a line (wakes this process's line caller). */
  onQueued?: (jobId: string) => void;
  /** Jobs prepared at once by this handler (default 4). */
  prepareConcurrency?: number;
  /** Of those, the most of one account (default 2). */
  prepareAccountConcurrency?: number;
  /** Commands of one account waiting for preparation here before further ones are parked (default 64). */
  prepareAccountBacklog?: number;
  /** How long a parked command waits before the sweep republishes it (default 10 s). */
  parkSeconds?: number;
  /**
   * Republishes now up to `max` of an account's parked commands (CommandPublisher.unpark); resolves
   * with how many were taken. Without it, parked commands wait for the sweep.
   */
  unpark?: (accountId: string, max: number) => Promise<number>;
}

/**
 * Parks an accepted job: an intake lot that the sweep finds stale `seconds` from now. False when the
 * job is not accepted (a redelivery of a job being prepared, or a duplicate): handled as usual.
 */
async function park(db: Queryable, cmd: JobCommand, seconds: number): Promise<boolean> {
  const r = await db.query(
    `INSERT INTO intake_lots (id, account_id, job_ids, created_at, parked)
     SELECT $1, account_id, ARRAY[id], now() + make_interval(secs => $4), true
       FROM fax_jobs WHERE id = $2 AND account_id = $3 AND state = 'accepted'`,
    [randomUUID(), cmd.job_id, cmd.account_id, seconds - SWEEP_GRACE_SECONDS],
  );
  return (r.rowCount ?? 0) > 0;
}

export function sendHandler(d: SendWorkerDeps): MessageHandler {
  const gate = new FairGate(d.prepareConcurrency ?? 4, d.prepareAccountConcurrency ?? 2);
  const backlog = d.prepareAccountBacklog ?? 64;
  const parkSeconds = d.parkSeconds ?? 10;
  // Accounts this process parked commands of (a hint kept in memory: what is parked is in
  // PostgreSQL, and the sweep republishes whatever this forgets), and those being unparked now.
  const parkedHere = new Set<string>();
  const unparking = new Set<string>();
  // Jobs this process is preparing now: a second copy of one's command (a republished parked
  // command that crossed the first) is acknowledged, not prepared twice at once.
  const preparingHere = new Set<string>();
  const refill = (account: string) => {
    if (!d.unpark || !parkedHere.has(account) || unparking.has(account) || d.shutdown.aborted) return;
    const waiting = gate.waitingOf(account);
    if (waiting > backlog / 2) return;
    const want = backlog - waiting;
    unparking.add(account);
    d.unpark(account, want)
      .then((n) => {
        if (n < want) parkedHere.delete(account);
      })
      .catch((err: unknown) =>
        d.log.warn({ err: (err as Error).message, accountId: account }, 'unparking commands failed'),
      )
      .finally(() => unparking.delete(account));
  };
  return async (msg: ConsumeMessage, body: unknown) => {
    const parsed = jobCommand.safeParse(body);
    if (!parsed.success)
      throw new PermanentMessageError(`invalid command: ${parsed.error.issues[0]?.message}`);
    const cmd = parsed.data;
    if (preparingHere.has(cmd.job_id)) {
      d.log.info(
        { jobId: cmd.job_id, accountId: cmd.account_id },
        'job already being prepared here; duplicate ignored',
      );
      return;
    }
    if (gate.waitingOf(cmd.account_id) >= backlog && (await park(d.db, cmd, parkSeconds))) {
      parkedHere.add(cmd.account_id);
      d.log.info({ jobId: cmd.job_id, accountId: cmd.account_id }, 'account backlog full; command parked');
      return;
    }
    let release: () => void;
    try {
      release = await gate.acquire(cmd.account_id, d.shutdown);
    } catch (err) {
      // Shut down while waiting for a turn: nothing was tried, so this is no failed delivery (five
      // of those would fail the fax). Parked, the sweep republishes it at once; a job that is not
      // accepted (a redelivery of one being prepared) goes back to RabbitMQ as before.
      if (d.shutdown.aborted && (await park(d.db, cmd, 0))) {
        d.log.info({ jobId: cmd.job_id, accountId: cmd.account_id }, 'shutting down; waiting command parked');
        return;
      }
      throw err;
    }
    if (preparingHere.has(cmd.job_id)) {
      // A copy that waited for its turn beside the one that got it.
      release();
      d.log.info(
        { jobId: cmd.job_id, accountId: cmd.account_id },
        'job already being prepared here; duplicate ignored',
      );
      return;
    }
    preparingHere.add(cmd.job_id);
    try {
      await inSpan(
        'fax.prepare',
        {
          parent: deliveryParent(msg.properties.headers),
          attributes: {
            'faxline.job_id': cmd.job_id,
            'faxline.account_id': cmd.account_id,
            'faxline.command': cmd.type,
            'faxline.delivery': Number(msg.properties.headers?.['x-delivery-count'] ?? 0) + 1,
          },
        },
        async (span) => {
          const state = await handle(d, cmd);
          span?.setAttribute('faxline.state', state);
        },
      );
    } finally {
      preparingHere.delete(cmd.job_id);
      release();
      // Every account with parked commands, not only this one: an account whose commands were all
      // parked has nothing running here whose end would take them back.
      for (const account of parkedHere) refill(account);
    }
  };
}

/** Prepares the job of a command; returns the state it left the job in (for its span). */
async function handle(d: SendWorkerDeps, cmd: JobCommand): Promise<string> {
  const log = d.log.child({ jobId: cmd.job_id, accountId: cmd.account_id, requestId: cmd.request_id });
  const started = Date.now();

  let job: JobRow | null = await transition(d.db, cmd.job_id, 'preparing', {
    from: ['accepted'],
    accountId: cmd.account_id,
  });
  if (!job) {
    const cur = await getJob(d.db, cmd.job_id, cmd.account_id);
    if (!cur) {
      log.warn('command for a job that does not exist; dropped');
      return 'missing';
    }
    if (cur.state === 'preparing') {
      // An earlier attempt stopped while preparing (worker died, or the database went away and
      // the handler is re-run): no call was made, so preparing again is safe; the
      // preparing → queued fence admits one, and only the line caller places calls.
      job = cur;
    } else {
      // Past preparing: the job is queued or with the line caller, which alone starts calls
      // (and handles a worker lost during a call through its lease). A duplicate changes nothing.
      log.info({ state: cur.state }, 'duplicate command ignored');
      return cur.state;
    }
  }
  d.metrics.transitions.inc({ to: 'preparing' });

  const prepared = await prepare(d, job, log);
  if (!prepared) return 'failed';

  // With what any worker process needs later to place the call (the encoded size of every page)
  // and the moment it became ready, in the state change's own statement.
  const queued = await moveJob(d.db, job.id, 'queued', {
    from: ['preparing'],
    set: { page_count: prepared.pageCount, page_bytes: prepared.pageBytes, ready_at: 'now' },
    detail: { pages: prepared.pageCount },
  });
  if (!queued) {
    log.info('another worker owns this job; nothing queued');
    return 'preparing';
  }
  d.metrics.transitions.inc({ to: 'queued' });
  d.onQueued?.(job.id);
  log.info(
    { durationMs: Date.now() - started, pages: prepared.pageCount },
    'job prepared and queued for a line',
  );
  return 'queued';
}

async function prepare(d: SendWorkerDeps, job: JobRow, log: Logger): Promise<Prepared | null> {
  const t = Date.now();
  try {
    // Check, cover, render (stored in fax_renders).
    const p = await prepareJob(d.db, job, d.fetcher, d.shutdown, {
      checks: d.checks,
      pool: d.renderPool,
      ...(d.documents ? { documents: d.documents } : {}),
      ...(d.shared ? { shared: d.shared } : {}),
      onShared: (outcome) => d.metrics.broadcastRenders.inc({ outcome }),
      onRepeat: (outcome) => d.metrics.repeatRenders.inc({ outcome }),
    });
    d.metrics.preparation.observe((Date.now() - t) / 1000);
    return p;
  } catch (err) {
    if (!(err instanceof DocumentError)) throw err; // transient: the delivery is retried
    d.metrics.preparationFailures.inc({ reason: err.code });
    await transition(d.db, job.id, 'failed', {
      from: ['preparing'],
      set: { failure_code: err.code, failure_reason: err.message, completed_at: new Date() },
    });
    d.metrics.transitions.inc({ to: 'failed' });
    log.info({ code: err.code }, 'documents refused');
    return null;
  }
}

/** When a command is given up (dead-lettered), its job must still end in a state the customer sees. */
export function sendGiveUp(d: Pick<SendWorkerDeps, 'db' | 'log' | 'metrics'>) {
  return async (body: unknown, reason: string): Promise<void> => {
    const p = jobCommand.safeParse(body);
    if (!p.success) return;
    const row = await transition(d.db, p.data.job_id, 'failed', {
      from: ['accepted', 'preparing'],
      accountId: p.data.account_id,
      set: {
        failure_code: 'internal_error',
        failure_reason: `processing failed repeatedly and was stopped: ${reason.slice(0, 300)}`,
        completed_at: new Date(),
      },
    });
    if (row) {
      d.metrics.transitions.inc({ to: 'failed' });
      d.log.error(
        { jobId: row.id, accountId: row.account_id, requestId: p.data.request_id, reason },
        'job failed after repeated processing errors',
      );
    }
  };
}
