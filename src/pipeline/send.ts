// The send worker: takes a send or forward command, fences the job into `preparing`, prepares its
// documents, fences it into `dialling` (the single point that allows a call), transmits, and records
// the outcome. The delivery is acknowledged only after the outcome is committed.
import type { ConsumeMessage } from 'amqplib';
import { hostname } from 'node:os';
import { PermanentMessageError, type MessageHandler } from '../amqp/broker.ts';
import { untilDbAvailable } from '../db/errors.ts';
import type { Pool } from '../db/pool.ts';
import { jobCommand } from '../domain/commands.ts';
import { DocumentError } from '../documents/errors.ts';
import { type Fetcher, type Prepared, prepareJob } from '../documents/prepare.ts';
import type { DocumentStore } from '../documents/store.ts';
import { getJob, type JobRow, transition } from '../jobs/repo.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';
import type { TransmissionBackend } from '../transmission/backend.ts';

export interface SendWorkerDeps {
  db: Pool;
  backend: TransmissionBackend;
  fetcher: Fetcher;
  /** Where the job's documents are read from (default: the built-in PostgreSQL store on `db`). */
  documents?: DocumentStore;
  log: Logger;
  metrics: Metrics;
  /** Aborted on shutdown: calls in progress are ended and recorded. */
  shutdown: AbortSignal;
  callTimeoutMs?: number;
}

export function sendHandler(d: SendWorkerDeps): MessageHandler {
  return async (msg: ConsumeMessage, body: unknown) => {
    const parsed = jobCommand.safeParse(body);
    if (!parsed.success)
      throw new PermanentMessageError(`invalid command: ${parsed.error.issues[0]?.message}`);
    const cmd = parsed.data;
    const log = d.log.child({ jobId: cmd.job_id, accountId: cmd.account_id, requestId: cmd.request_id });
    const started = Date.now();
    // Identifies this delivery. If the handler is re-run for the same delivery (the database went
    // away mid-way), a `dialling` fence carrying this owner is ours: no call was made yet.
    const owner = `${hostname()}:${process.pid}:${msg.fields.consumerTag}:${msg.fields.deliveryTag}`;
    let fenced: JobRow | null = null;

    let job: JobRow | null = await transition(d.db, cmd.job_id, 'preparing', {
      from: ['accepted'],
      accountId: cmd.account_id,
    });
    if (!job) {
      const cur = await getJob(d.db, cmd.job_id, cmd.account_id);
      if (!cur) {
        log.warn('command for a job that does not exist; dropped');
        return;
      }
      if (cur.state === 'preparing') {
        // An earlier attempt stopped while preparing (worker died, or the database went away): no
        // call was made, so preparing again is safe; the preparing → dialling fence still admits
        // only one call even if two deliveries get here.
        job = cur;
      } else if (cur.state === 'dialling' && (await diallingOwner(d.db, cur.id)) === owner) {
        job = cur;
        fenced = cur;
      } else if ((cur.state === 'dialling' || cur.state === 'sending') && msg.fields.redelivered) {
        // An earlier worker died during a call: whether the fax went out is unknown. Never resend blindly.
        await transition(d.db, cur.id, 'unknown', {
          from: ['dialling', 'sending'],
          set: {
            failure_code: 'outcome_unknown',
            failure_reason: `the worker stopped during the call after ${cur.pages_sent} page(s); not resent automatically`,
            completed_at: new Date(),
          },
        });
        d.metrics.transitions.inc({ to: 'unknown' });
        log.warn({ state: cur.state }, 'call outcome unknown after worker loss');
        return;
      } else {
        log.info({ state: cur.state }, 'duplicate command ignored');
        return;
      }
    }
    d.metrics.transitions.inc({ to: 'preparing' });

    const prepared = await prepare(d, job, log);
    if (!prepared) return;

    const attempt = fenced ? fenced.attempts : job.attempts + 1;
    const jobId = job.id;
    const dialling =
      fenced ??
      (await untilDbAvailable(async () => {
        try {
          return await transition(d.db, jobId, 'dialling', {
            from: ['preparing'],
            set: { page_count: prepared.pageCount, attempts: attempt },
            detail: { owner },
          });
        } catch (err) {
          // The UPDATE may have committed before the connection broke: the owner tells.
          const now = await getJob(d.db, jobId);
          if (now?.state === 'dialling' && (await diallingOwner(d.db, jobId)) === owner) return now;
          throw err;
        }
      }));
    if (!dialling) {
      log.info('another worker owns this job; no call made');
      return;
    }
    d.metrics.transitions.inc({ to: 'dialling' });
    await call(d, dialling, prepared, attempt, log);
    log.info({ durationMs: Date.now() - started }, 'job handled');
  };
}

async function diallingOwner(db: Pool, jobId: string): Promise<string | undefined> {
  const r = await db.query<{ owner: string | null }>(
    `SELECT detail->>'owner' AS owner FROM fax_job_transitions
      WHERE job_id = $1 AND to_state = 'dialling' ORDER BY id DESC LIMIT 1`,
    [jobId],
  );
  return r.rows[0]?.owner ?? undefined;
}

async function prepare(d: SendWorkerDeps, job: JobRow, log: Logger): Promise<Prepared | null> {
  const t = Date.now();
  try {
    // Check, cover, render (stored in fax_renders).
    const p = await prepareJob(
      d.db,
      job,
      d.fetcher,
      d.shutdown,
      d.documents ? { documents: d.documents } : {},
    );
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

async function call(
  d: SendWorkerDeps,
  job: JobRow,
  fax: Pick<Prepared, 'pageBytes' | 'tiff'>,
  attempt: number,
  log: Logger,
) {
  const backend = d.backend.name;
  d.metrics.attempts.inc({ backend });
  if (attempt > 1) d.metrics.retries.inc({ backend });
  d.metrics.linesInUse.inc({ backend });
  let pageStarted = 0; // end of training, then end of the previous page
  const timeout = AbortSignal.timeout(d.callTimeoutMs ?? 30 * 60_000);
  const signal = AbortSignal.any([d.shutdown, timeout]);
  try {
    const outcome = await d.backend.transmit(
      {
        jobId: job.id,
        attempt,
        faxNumber: job.fax_number,
        callerId: job.caller_id,
        quality: job.fax_quality,
        pageBytes: fax.pageBytes,
        tiff: fax.tiff,
      },
      {
        signal,
        deadline: new Date(Date.now() + (d.callTimeoutMs ?? 30 * 60_000)),
        // Progress is recorded best effort: a database hiccup must not cut a call in progress.
        onProgress: async (p) => {
          try {
            if (p.type === 'connected') {
              pageStarted = Date.now();
              await transition(d.db, job.id, 'sending', {
                from: ['dialling'],
                detail: { bit_rate: p.bitRate },
              });
              d.metrics.transitions.inc({ to: 'sending' });
            } else if (p.type === 'page_sent') {
              const t = Date.now();
              d.metrics.pageDuration.observe({ backend }, (t - pageStarted) / 1000);
              pageStarted = t;
              await transition(d.db, job.id, 'sending', {
                from: ['sending'],
                set: { pages_sent: p.page },
                detail: { page: p.page, of: p.of },
              });
            }
          } catch (err) {
            log.warn({ err: (err as Error).message, progress: p.type }, 'progress not recorded');
          }
        },
      },
    );
    const now = new Date();
    // The call happened: its outcome is written even if the database has to be waited for.
    if (outcome.ok) {
      await untilDbAvailable(() =>
        transition(d.db, job.id, 'delivered', {
          from: ['dialling', 'sending'],
          set: { pages_sent: outcome.pages, completed_at: now, failure_code: null, failure_reason: null },
          detail: {
            duration_ms: outcome.durationMs,
            bit_rate: outcome.bitRate,
            remote_station_id: outcome.remoteStationId,
          },
        }),
      );
      d.metrics.transitions.inc({ to: 'delivered' });
      d.metrics.outcomes.inc({ backend, outcome: 'delivered' });
      d.metrics.pagesSent.inc({ backend }, outcome.pages);
      d.metrics.acceptToDelivered.observe((now.getTime() - job.created_at.getTime()) / 1000);
      log.info({ pages: outcome.pages, durationMs: outcome.durationMs, attempt }, 'fax delivered');
    } else {
      await untilDbAvailable(() =>
        transition(d.db, job.id, 'failed', {
          from: ['dialling', 'sending'],
          set: {
            pages_sent: outcome.pagesSent,
            completed_at: now,
            failure_code: outcome.code,
            failure_reason: outcome.message,
          },
          detail: { type: outcome.type, retryable: outcome.retryable, pages_sent: outcome.pagesSent },
        }),
      );
      d.metrics.transitions.inc({ to: 'failed' });
      d.metrics.outcomes.inc({ backend, outcome: outcome.type });
      log.info({ type: outcome.type, code: outcome.code, attempt }, 'fax failed');
    }
  } finally {
    d.metrics.linesInUse.dec({ backend });
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
