// Broadcast: one send to many recipients (issue 21, item 1). The request is checked once (documents,
// Fax Default, caller id, Smart Template), then one fax job is written per recipient, grouped by a
// broadcast row, in one transaction. The documents are stored once, on the first recipient's job; the
// other jobs name that job in source_job_id, as a forward does, so they are prepared from the same
// stored documents and their rendered pages are shared (src/documents/prepare.ts). Every accepted
// job's command is published after the commit, as for a single send, in lots of PUBLISH_LOT, each
// confirmed before the next goes out: RabbitMQ confirms a channel's messages in order, so a lot of
// 1,000 published at once held every other account's command behind it (issue 27, finding 2).
// Before anything is written, a broadcast is charged to its account's recipient rate and bound on
// jobs not yet final (recipient-limit.ts).
import type { Pool, Queryable } from '../db/pool.ts';
import { ApiError, messages } from '../domain/envelope.ts';
import { newId } from '../domain/ids.ts';
import type { SendFaxBody } from '../domain/schemas.ts';
import type { CommandPublisher } from '../jobs/command-publisher.ts';
import { insertJobs } from '../jobs/repo.ts';
import type { Scheduler } from '../scheduler/scheduler.ts';
import { refusalFor } from './data-errors.ts';
import {
  checkOpenJobs,
  DEFAULT_BROADCAST_LIMITS,
  refundRecipients,
  takeRecipients,
} from './recipient-limit.ts';
import {
  checkSend,
  replayOf,
  resolveSend,
  type HttpIntakeDeps,
  type Idempotency,
  type IntakeDeps,
  type JobOrigin,
  type JobWrite,
} from './send.ts';

/** BROADCAST_MAX_RECIPIENTS when the wiring gives none. */
export const DEFAULT_MAX_RECIPIENTS = 1000;

/**
 * Commands published and confirmed together before the next lot: another account's command waits
 * behind at most this many of one broadcast, instead of all of its recipients.
 */
const PUBLISH_LOT = 100;

/** Publishes a broadcast's commands in lots, each confirmed before the next (see PUBLISH_LOT). */
async function publishInLots(
  publisher: Pick<CommandPublisher, 'publishMany'>,
  cmds: Command[],
): Promise<void> {
  for (let i = 0; i < cmds.length; i += PUBLISH_LOT)
    await publisher.publishMany(cmds.slice(i, i + PUBLISH_LOT));
}

/** What a broadcast's acceptance answers: the first job (data.job_id, as a single send), the rest. */
export interface BroadcastAnswer {
  job_id: string;
  broadcast_id: string;
  /** One job per recipient, in the order of `recipients`. */
  job_ids: string[];
}

export interface BroadcastWrite {
  id: string;
  accountId: string;
  /** Set for AMQP commands (`amqp/<message_id>`): a repeated command finds this broadcast. */
  requestId: string | null;
  jobs: JobWrite[];
}

type Recipients = NonNullable<SendFaxBody['recipients']>;

/** The checks that need no database: the recipient limit, then those of a single send. */
export function checkBroadcast(
  d: Pick<IntakeDeps, 'scheduler' | 'maxDocumentBytes' | 'maxBroadcastRecipients'>,
  body: SendFaxBody & { recipients: Recipients },
): ReturnType<typeof checkSend> {
  const max = d.maxBroadcastRecipients ?? DEFAULT_MAX_RECIPIENTS;
  if (body.recipients.length > max)
    throw new ApiError(
      422,
      `recipients: has ${body.recipients.length} recipients; at most ${max} per broadcast (send the rest in another broadcast)`,
    );
  return checkSend(d, body);
}

/**
 * Resolves a broadcast into its jobs (no writes): the send's checks once, then one job per recipient
 * with its number, its own cover fields and reference. `jobRequestId` names each job's request id.
 */
async function resolveBroadcast(
  c: Queryable,
  d: Pick<IntakeDeps, 'defaultCallerId'>,
  accountId: string,
  body: SendFaxBody & { recipients: Recipients },
  checked: ReturnType<typeof checkSend>,
  o: { requestId: string | null; jobRequestId: (position: number) => string | null },
): Promise<BroadcastWrite> {
  const id = newId();
  const lead = await resolveSend(
    c,
    accountId,
    body,
    o.jobRequestId(0),
    checked,
    newId(),
    new Map(),
    d.defaultCallerId,
  );
  const jobs: JobWrite[] = body.recipients.map((r, i) => {
    const options = { ...lead.job.options };
    const recipientName = r.to_name ?? body.recipient_name;
    const subject = r.subject ?? body.subject;
    const message = r.message ?? body.message;
    delete options.recipient_name;
    delete options.subject;
    delete options.message;
    return {
      job: {
        ...lead.job,
        id: i === 0 ? lead.job.id : newId(),
        // Documents live on the first recipient's job; the others read them there.
        sourceJobId: i === 0 ? null : lead.job.id,
        faxNumber: r.fax_number,
        options: {
          ...options,
          ...(subject !== undefined ? { subject } : {}),
          ...(message !== undefined ? { message } : {}),
          ...(recipientName !== undefined ? { recipient_name: recipientName } : {}),
        },
        requestId: o.jobRequestId(i),
        clientReference: r.client_reference ?? body.client_reference ?? null,
        broadcastId: id,
        broadcastPosition: i,
      },
      docs: i === 0 ? lead.docs : [],
    };
  });
  return { id, accountId, requestId: o.requestId, jobs };
}

/** Writes the broadcast row, its jobs (one statement) and the due-time jobs of scheduled ones. */
async function writeBroadcast(
  c: Queryable,
  scheduler: Pick<Scheduler, 'scheduleMany'>,
  w: BroadcastWrite,
): Promise<void> {
  await c.query('INSERT INTO broadcasts (id, account_id, recipients, request_id) VALUES ($1, $2, $3, $4)', [
    w.id,
    w.accountId,
    w.jobs.length,
    w.requestId,
  ]);
  await insertJobs(c, w.jobs, { strict: true });
  await scheduler.scheduleMany(
    c,
    w.jobs.flatMap(({ job }) =>
      job.state === 'scheduled' && job.scheduledAt
        ? [{ jobId: job.id, accountId: w.accountId, at: job.scheduledAt, trace: job.traceContext ?? null }]
        : [],
    ),
  );
}

/** The answer for a broadcast already written: its jobs in recipient order. */
async function answerOf(c: Queryable, broadcastId: string): Promise<BroadcastAnswer> {
  const r = await c.query<{ id: string }>(
    'SELECT id FROM fax_jobs WHERE broadcast_id = $1 ORDER BY broadcast_position',
    [broadcastId],
  );
  const ids = r.rows.map((x) => x.id);
  return { job_id: ids[0]!, broadcast_id: broadcastId, job_ids: ids };
}

type Command = Parameters<CommandPublisher['publishMany']>[0][number];

const commandsOf = (w: BroadcastWrite): Command[] =>
  w.jobs
    .filter(({ job }) => job.state === 'accepted')
    .map(({ job }) => ({
      type: 'send' as const,
      job_id: job.id,
      account_id: job.accountId,
      ...(job.requestId ? { request_id: job.requestId } : {}),
      trace: job.traceContext ?? null,
    }));

/**
 * Removes a broadcast none of whose jobs has been picked up by a worker (every job still in the
 * state it was accepted in), after its commands could not be published: the 503 is then the truth.
 */
async function removeUntouched(db: Queryable, broadcastId: string): Promise<boolean> {
  const r = await db.query(
    `DELETE FROM broadcasts b WHERE b.id = $1
        AND NOT EXISTS (SELECT 1 FROM fax_jobs j WHERE j.broadcast_id = b.id
                         AND j.state NOT IN ('accepted', 'scheduled', 'awaiting_approval'))`,
    [broadcastId],
  );
  return (r.rowCount ?? 0) > 0;
}

/** The HTTP intake of a broadcast (POST /v1/faxes/send with recipients), as the API role. */
export async function acceptBroadcast(
  d: HttpIntakeDeps,
  accountId: string,
  body: SendFaxBody & { recipients: Recipients },
  requestId: string | null,
  idem?: Idempotency,
  origin?: JobOrigin,
): Promise<BroadcastAnswer> {
  if (!d.broker.isConnected) throw new ApiError(503, messages.brokerDown);
  const checked = checkBroadcast(d, body);
  if (origin) checked.origin = origin;
  const limits = d.broadcastLimits ?? DEFAULT_BROADCAST_LIMITS;
  const n = body.recipients.length;
  // Charged first, in a short transaction of its own; given back below if nothing is written. A
  // request whose Idempotency-Key is known is a replay: not charged (so it is answered even when
  // the bucket is empty).
  const charged = await d.tenant.tx(accountId, async (c) => {
    if (idem && (await c.query('SELECT 1 FROM idempotency_keys WHERE key = $1', [idem.key])).rows.length > 0)
      return false;
    await takeRecipients(c, accountId, n, limits);
    return true;
  });
  const refund = async () => {
    if (charged)
      await d.tenant.tx(accountId, (c) => refundRecipients(c, accountId, n, limits)).catch(() => undefined);
  };
  const out = await d.tenant
    .tx(accountId, async (c): Promise<{ replay: BroadcastAnswer } | { write: BroadcastWrite }> => {
      if (idem) {
        const prior = await replayOf(c, accountId, idem, d.idempotencyTtlHours);
        if (prior) {
          const b = await c.query<{ broadcast_id: string | null }>(
            'SELECT broadcast_id FROM fax_jobs WHERE id = $1',
            [prior],
          );
          const bid = b.rows[0]?.broadcast_id;
          if (bid) return { replay: await answerOf(c, bid) };
        }
      }
      await checkOpenJobs(c, accountId, n, limits.maxOpenJobs);
      const w = await resolveBroadcast(c, d, accountId, body, checked, {
        requestId: null,
        jobRequestId: () => requestId,
      });
      await writeBroadcast(c, d.scheduler, w);
      if (idem)
        await c.query(
          'INSERT INTO idempotency_keys (account_id, key, request_hash, job_id) VALUES ($1, $2, $3, $4)',
          [accountId, idem.key, idem.hash, w.jobs[0]!.job.id],
        );
      return { write: w };
    })
    .catch(async (err: unknown) => {
      await refund();
      throw refusalFor(err);
    });
  if ('replay' in out) {
    await refund();
    return out.replay;
  }
  const w = out.write;
  const cmds = commandsOf(w);
  try {
    await publishInLots(d.publisher, cmds);
  } catch (err) {
    if (await removeUntouched(d.tenant.scoped(accountId), w.id).catch(() => false)) {
      await refund();
      throw new ApiError(503, messages.brokerDown, { data: (err as Error).message });
    }
    // Some job is with a worker already: the broadcast is real; the rest go out when RabbitMQ
    // confirms (retried soon, and by the sweep of unconfirmed commands).
    d.publisher.retrySoon(cmds);
  }
  const ids = w.jobs.map(({ job }) => job.id);
  return { job_id: ids[0]!, broadcast_id: w.id, job_ids: ids };
}

/**
 * The AMQP intake of a broadcast, as the schema owner. `requestId` is `amqp/<message_id>`: a
 * repeated command finds the broadcast it made (and its unconfirmed commands are published again).
 * Throws ApiError for a refusal, anything else for transient trouble (the delivery is retried).
 */
export async function acceptBroadcastCommand(
  d: Pick<
    IntakeDeps,
    'scheduler' | 'maxDocumentBytes' | 'maxBroadcastRecipients' | 'defaultCallerId' | 'broadcastLimits'
  > & {
    db: Pool;
    publisher: CommandPublisher;
    withTx: <T>(fn: (c: Queryable) => Promise<T>) => Promise<T>;
    /** Writes the command's audit event in the transaction that writes the broadcast (not for a repeat). */
    audit?: (c: Queryable, answer: BroadcastAnswer) => Promise<void>;
  },
  accountId: string,
  body: SendFaxBody & { recipients: Recipients },
  requestId: string,
): Promise<BroadcastAnswer> {
  const checked = checkBroadcast(d, body);
  const limits = d.broadcastLimits ?? DEFAULT_BROADCAST_LIMITS;
  const n = body.recipients.length;
  // As over HTTP: charged first, given back when the command writes nothing (a refusal, a repeat
  // that raced its first delivery). A command already written is a repeat: not charged, so that its
  // unconfirmed commands are published again even when the bucket is empty.
  const charged = await d.withTx(async (c) => {
    const known = await c.query('SELECT 1 FROM broadcasts WHERE account_id = $1 AND request_id = $2', [
      accountId,
      requestId,
    ]);
    if (known.rows.length > 0) return false;
    await takeRecipients(c, accountId, n, limits);
    return true;
  });
  const refund = async () => {
    if (charged) await d.withTx((c) => refundRecipients(c, accountId, n, limits)).catch(() => undefined);
  };
  const out = await d
    .withTx(async (c) => {
      // Two deliveries of the same command serialise here; the second finds the first's broadcast.
      await c.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 7301021))', [
        `${accountId}:${requestId}`,
      ]);
      const prior = await c.query<{ id: string }>(
        'SELECT id FROM broadcasts WHERE account_id = $1 AND request_id = $2',
        [accountId, requestId],
      );
      if (prior.rows[0]) {
        const answer = await answerOf(c, prior.rows[0].id);
        const undispatched = await c.query<{ id: string; request_id: string | null }>(
          `SELECT id, request_id FROM fax_jobs
            WHERE broadcast_id = $1 AND state = 'accepted' AND dispatched_at IS NULL`,
          [prior.rows[0].id],
        );
        return {
          answer,
          repeat: true,
          cmds: undispatched.rows.map((j): Command => ({
            type: 'send',
            job_id: j.id,
            account_id: accountId,
            ...(j.request_id ? { request_id: j.request_id } : {}),
          })),
        };
      }
      await checkOpenJobs(c, accountId, n, limits.maxOpenJobs);
      const w = await resolveBroadcast(c, d, accountId, body, checked, {
        requestId,
        jobRequestId: (i) => `${requestId}#${i}`,
      });
      await writeBroadcast(c, d.scheduler, w);
      const ids = w.jobs.map(({ job }) => job.id);
      const answer = { job_id: ids[0]!, broadcast_id: w.id, job_ids: ids };
      await d.audit?.(c, answer);
      return {
        answer,
        repeat: false,
        cmds: commandsOf(w),
      };
    })
    .catch(async (err: unknown) => {
      await refund();
      throw refusalFor(err);
    });
  if (out.repeat) await refund();
  // Confirmed before the sender hears "accepted"; on failure the delivery is retried and finds this.
  await publishInLots(d.publisher, out.cmds);
  return out.answer;
}
