// Intake of send and forward: resolve Fax Defaults, validate references, record the job with its
// documents in one transaction, then publish its command with a publisher confirm. The customer
// gets a success only when both happened; if the publish fails the job is removed and the customer
// gets 503, so an answer is never a lie. Concurrent requests share one transaction (group-commit.ts),
// every statement runs as the API role with the account set (row-level security).
import { BrokerUnavailableError, type Broker } from '../amqp/broker.ts';
import { ApiError, messages } from '../domain/envelope.ts';
import type { SendFaxBody } from '../domain/schemas.ts';
import type { Clock } from '../clock.ts';
import type { Pool, Queryable } from '../db/pool.ts';
import type { TenantDb } from '../db/tenant-db.ts';
import { checkCallerId } from '../accounts/numbers.ts';
import { ACCEPTED_FORMATS, sniffFormat } from '../documents/formats.ts';
import { refusalFor } from './data-errors.ts';
import type { BatchMemo, Flush, GroupCommit } from './group-commit.ts';
import type { BroadcastLimits } from './recipient-limit.ts';
import { FAX_DEFAULT_VALUE_COLUMNS, type FaxDefaultValues } from '../domain/fax-default.ts';
import { isId, newId } from '../domain/ids.ts';
import type { CommandPublisher } from '../jobs/command-publisher.ts';
import {
  deleteUndispatched,
  getJob,
  insertJob,
  insertJobs,
  sealJobs,
  insertLot,
  type NewDocument,
  type NewJob,
} from '../jobs/repo.ts';
import type { Scheduler } from '../scheduler/scheduler.ts';
import { currentTraceContext } from '../trace.ts';

/** What the intake needs. The AMQP intake (src/amqp-intake) runs as the schema owner with `db`. */
export interface IntakeDeps {
  db: Pool;
  broker: Broker;
  publisher: CommandPublisher;
  scheduler: Scheduler;
  clock: Clock;
  maxDocumentBytes: number;
  /** FAX_DEFAULT_CALLER_ID: the caller id any account may present, and the last fallback ('' = none). */
  defaultCallerId?: string;
  /** BROADCAST_MAX_RECIPIENTS: most recipients of one broadcast (default 1000). */
  maxBroadcastRecipients?: number;
  /** What a broadcast costs its account (recipient-limit.ts); DEFAULT_BROADCAST_LIMITS when absent. */
  broadcastLimits?: BroadcastLimits;
}

/** The HTTP intake: request handling as the API role (row-level security), with group commit. */
export interface HttpIntakeDeps extends Omit<IntakeDeps, 'db'> {
  /** Scoped access as the API role (row-level security). */
  tenant: TenantDb;
  /** Shared transactions for concurrent sends and forwards. */
  commits: GroupCommit<JobWrite>;
  /** How long an Idempotency-Key is remembered. */
  idempotencyTtlHours: number;
}

/** An Idempotency-Key with the fingerprint of the request it came with. */
export interface Idempotency {
  key: string;
  hash: Buffer;
}

/**
 * The Fax Default a send uses: the one named by template_id, else the account's default. All its
 * values are read, because the job keeps them as they are now (a later update or deletion of the
 * Fax Default does not change a fax already accepted).
 */
async function findFaxDefault(
  db: Queryable,
  accountId: string,
  id: string | undefined,
): Promise<FaxDefaultValues | null> {
  if (id !== undefined) {
    if (!isId(id)) return null;
    const r = await db.query<FaxDefaultValues>(
      `SELECT ${FAX_DEFAULT_VALUE_COLUMNS} FROM fax_defaults WHERE id = $1 AND account_id = $2`,
      [id, accountId],
    );
    return r.rows[0] ?? null;
  }
  const r = await db.query<FaxDefaultValues>(
    `SELECT ${FAX_DEFAULT_VALUE_COLUMNS} FROM fax_defaults WHERE account_id = $1 AND is_default`,
    [accountId],
  );
  return r.rows[0] ?? null;
}

/**
 * Strict Base64 (RFC 4648 §4 alphabet, padded) decoded, or null. The same strings as
 * /^[A-Za-z0-9+/]*={0,2}$/ with a length that is a multiple of 4, without that regular expression:
 * it cost about 4 ns a character (0.43 ms for a one-page letter's 100 KB, 90 ms of event loop for a
 * 20 MB document), the decoder about a tenth of that. Node's decoder skips characters outside the
 * alphabet and stops at a `=` inside the string, so its output then falls short of the length the
 * string's size implies; it also reads the URL-safe alphabet (`-`, `_`), looked for separately.
 */
export function strictBase64(text: string): Buffer | null {
  if (text.length === 0 || text.length % 4 !== 0) return null;
  const pad = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  const bytes = Buffer.from(text, 'base64');
  if (bytes.length !== (text.length / 4) * 3 - pad) return null;
  if (text.includes('-') || text.includes('_')) return null;
  return bytes;
}

/** Strict Base64 → bytes, with the size cap applied before decoding. */
export function decodeDocument(data: string, index: number, maxBytes: number): Buffer {
  const field = `fax_data[${index}].file_data`;
  const bytes = decodeBase64Field(data, field, maxBytes);
  // A fax document is a PDF, TIFF, JPEG or PNG, recognised by its content (never by file_name).
  if (sniffFormat(bytes) === null)
    throw new ApiError(422, `${field}: is not ${ACCEPTED_FORMATS} (recognised by its content, not its name)`);
  return bytes;
}

/** The same for any field carrying a PDF (e.g. file_data of a Smart Template upload); `field` names it. */
export function decodePdfField(data: string, field: string, maxBytes: number): Buffer {
  const bytes = decodeBase64Field(data, field, maxBytes);
  if (bytes.subarray(0, 5).toString('latin1') !== '%PDF-')
    throw new ApiError(422, `${field}: is not a PDF (it does not start with %PDF-)`);
  return bytes;
}

function decodeBase64Field(data: string, field: string, maxBytes: number): Buffer {
  const clean = data.replace(/[\r\n]/g, '');
  if (Math.floor((clean.length * 3) / 4) > maxBytes + 2)
    throw new ApiError(413, `${field}: document is larger than ${maxBytes} bytes`);
  const bytes = strictBase64(clean);
  if (!bytes) throw new ApiError(422, `${field}: is not valid Base64`);
  if (bytes.length > maxBytes) throw new ApiError(413, `${field}: document is larger than ${maxBytes} bytes`);
  return bytes;
}

/** What a prepared send or forward writes. */
export interface JobWrite {
  job: NewJob;
  docs: NewDocument[];
}

/**
 * The group commit's write step: every prepared job of one account, then their due-time jobs. The
 * insert is strict (a job that exists already fails the statement, so the batch is retried one by
 * one), which lets the COMMIT go out right behind it when nothing is to be scheduled.
 */
export function intakeFlush(scheduler: Pick<Scheduler, 'scheduleMany'>): Flush<JobWrite> {
  return async (c, accountId, writes, commit) => {
    // The accepted jobs' commands are published after the COMMIT. Instead of marking each job once
    // its command is confirmed, the batch records one lot (migration 009), deleted on confirm.
    const accepted = writes.filter(({ job }) => job.state === 'accepted');
    const lotId = accepted.length > 0 ? newId() : null;
    for (const { job } of accepted) {
      job.dispatched = true;
      job.lotId = lotId!;
    }
    const scheduled = writes.filter(({ job }) => job.state === 'scheduled' && job.scheduledAt);
    // Sealing reads the account's data key: done first, so nothing is queued behind the COMMIT below.
    const sealed = await sealJobs(c, writes);
    const inserted = insertJobs(c, writes, { strict: true, sealed });
    const lot = lotId
      ? insertLot(
          c,
          lotId,
          accountId,
          accepted.map(({ job }) => job.id),
        )
      : null;
    if (scheduled.length === 0 && commit) {
      await Promise.all([inserted, lot, commit()]);
      return;
    }
    await Promise.all([inserted, lot]);
    await scheduler.scheduleMany(
      c,
      scheduled.map(({ job }) => ({
        jobId: job.id,
        accountId,
        at: job.scheduledAt!,
        trace: job.traceContext ?? null,
      })),
    );
    if (commit) await commit();
  };
}

/** Writes a job (and its idempotency key) inside the caller's scoped transaction. */
async function writeJob(
  d: HttpIntakeDeps,
  c: Queryable,
  job: NewJob,
  docs: NewDocument[],
  idem: Idempotency | undefined,
): Promise<void> {
  await insertJob(c, job, docs);
  if (job.state === 'scheduled' && job.scheduledAt)
    await d.scheduler.schedule(c, job.id, job.accountId, job.scheduledAt);
  if (idem)
    await c.query(
      'INSERT INTO idempotency_keys (account_id, key, request_hash, job_id) VALUES ($1, $2, $3, $4)',
      [job.accountId, idem.key, idem.hash, job.id],
    );
}

/**
 * Looks up an Idempotency-Key inside the transaction, under a transaction-level advisory lock on
 * (account, key) so two requests with the same key serialise: the second sees the first's job.
 */
export async function replayOf(
  c: Queryable,
  accountId: string,
  idem: Idempotency,
  ttlHours: number,
): Promise<string | null> {
  await c.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 7301002))', [`${accountId}:${idem.key}`]);
  await c.query(
    'DELETE FROM idempotency_keys WHERE key = $1 AND created_at < now() - make_interval(hours => $2)',
    [idem.key, ttlHours],
  );
  const r = await c.query<{ request_hash: Buffer; job_id: string }>(
    'SELECT request_hash, job_id FROM idempotency_keys WHERE key = $1',
    [idem.key],
  );
  const row = r.rows[0];
  if (!row) return null;
  if (!row.request_hash.equals(idem.hash))
    throw new ApiError(
      422,
      'Idempotency-Key: was already used with a different request; use a new key for a new request',
    );
  return row.job_id;
}

type Command = Parameters<CommandPublisher['publishMany']>[0][number];
interface Lot {
  cmds: Command[];
  /** Intake lots to forget once confirmed; jobs without one are marked dispatched instead. */
  lots: Set<string>;
  mark: string[];
  done: ((e: Error | null) => void)[];
}
const together = new WeakMap<CommandPublisher, Lot>();

/**
 * Publishes a committed job's command together with the others that become ready in the same turn
 * of the event loop (the requests of one group-commit batch are all answered in one turn), so a
 * batch's commands go out at once and their confirms are awaited once. Resolves with null when
 * RabbitMQ confirmed the lot, else with the error (every command of the lot counts as unconfirmed).
 */
function publishTogether(
  publisher: CommandPublisher,
  cmd: Command,
  lotId: string | undefined,
): Promise<Error | null> {
  return new Promise((resolve) => {
    let lot = together.get(publisher);
    if (!lot) {
      const l: Lot = { cmds: [], lots: new Set(), mark: [], done: [] };
      lot = l;
      together.set(publisher, l);
      // nextTick runs after the microtasks queued now: every request of the batch has added its command.
      process.nextTick(() => {
        together.delete(publisher);
        publisher.publishMany(l.cmds, { mark: l.mark, lots: [...l.lots] }).then(
          () => l.done.forEach((f) => f(null)),
          (e: unknown) => l.done.forEach((f) => f(e instanceof Error ? e : new Error(String(e)))),
        );
      });
    }
    lot.cmds.push(cmd);
    if (lotId) lot.lots.add(lotId);
    else lot.mark.push(cmd.job_id);
    lot.done.push(resolve);
  });
}

/**
 * Commits the job built by `build` (in a shared group-commit transaction, or in its own when an
 * Idempotency-Key is given), then publishes its command and waits for the broker's confirm.
 */
async function commitAndPublish(
  d: HttpIntakeDeps,
  accountId: string,
  build: (c: Queryable, memo: BatchMemo) => Promise<JobWrite>,
  idem: Idempotency | undefined,
): Promise<string> {
  if (!d.broker.isConnected) throw new ApiError(503, messages.brokerDown);
  // A database that cannot be reached is answered 503 by the server's error handler.
  // A request whose own values PostgreSQL refused (SQLSTATE class 22/23) is refused with 422/409.
  const out: { job: NewJob | null; id: string } = idem
    ? await d.tenant
        .tx(accountId, async (c) => {
          const prior = await replayOf(c, accountId, idem, d.idempotencyTtlHours);
          if (prior) return { job: null, id: prior };
          const { job, docs } = await build(c, new Map());
          await writeJob(d, c, job, docs, idem);
          return { job, id: job.id };
        })
        .catch((err: unknown) => {
          throw refusalFor(err);
        })
    : await d.commits.run(accountId, async (c, memo) => {
        const w = await build(c, memo);
        return { write: w, value: { job: w.job, id: w.job.id } };
      });
  const job = out.job;
  if (!job || job.state !== 'accepted') return out.id; // replay, scheduled or awaiting approval
  const err = await publishTogether(
    d.publisher,
    {
      type: job.kind,
      job_id: job.id,
      account_id: job.accountId,
      ...(job.requestId ? { request_id: job.requestId } : {}),
      trace: job.traceContext ?? null,
    },
    job.lotId,
  );
  if (err) {
    // Not confirmed. If nobody has picked the job up, remove it and say so; if a worker already
    // has it (the confirm was lost, not the message), the job is real and the answer is success.
    const db = d.tenant.scoped(accountId);
    const removed = await deleteUndispatched(db, job.id).catch(() => false);
    if (removed || !(await getJob(db, job.id).catch(() => null)))
      throw new ApiError(503, messages.brokerDown, { data: (err as Error).message });
    if (!(err instanceof BrokerUnavailableError)) throw err;
  }
  return job.id;
}

export async function acceptSend(
  d: HttpIntakeDeps,
  accountId: string,
  body: SendFaxBody,
  requestId: string | null,
  idem?: Idempotency,
  origin?: JobOrigin,
): Promise<string> {
  // Everything that needs no database is decided first (and refused with no transaction held).
  const checked = checkSend(d, body);
  if (origin) checked.origin = origin;
  const id = newId();
  return commitAndPublish(
    d,
    accountId,
    (c, memo) => resolveSend(c, accountId, body, requestId, checked, id, memo, d.defaultCallerId),
    idem,
  );
}

interface CheckedSend {
  docs: NewDocument[];
  scheduledAt: Date | null;
  /** Where the request came from when not the API (the mail gateway: source and Message-ID). */
  origin?: JobOrigin;
}

/** The options the mail gateway puts on the faxes it makes (visible in the API and events). */
export type JobOrigin = Pick<NewJob['options'], 'source' | 'message_id'>;

/** The checks of a send that need no database: documents (Base64, size, PDF), scheduled_date, id formats. */
export function checkSend(
  d: Pick<IntakeDeps, 'scheduler' | 'maxDocumentBytes'>,
  body: SendFaxBody,
): CheckedSend {
  const docs: NewDocument[] = body.fax_data.map((doc, i) => ({
    fileName: doc.file_name,
    fileUrl: doc.file_url ?? null,
    content: doc.file_data !== undefined ? decodeDocument(doc.file_data, i, d.maxDocumentBytes) : null,
  }));
  const scheduledAt = body.scheduled_date !== undefined ? d.scheduler.resolveDate(body.scheduled_date) : null;
  if (body.smart_document_id !== undefined && !isId(body.smart_document_id)) throw noSmartTemplate();
  if (body.template_id !== undefined && !isId(body.template_id)) throw noFaxDefault();
  return { docs, scheduledAt };
}

/** The checks that read the account's data (Fax Defaults, Smart Templates), and the job to write. */
export async function resolveSend(
  c: Queryable,
  accountId: string,
  body: SendFaxBody,
  requestId: string | null,
  checked: CheckedSend,
  id: string,
  memo: BatchMemo = new Map(),
  defaultCallerId = '',
): Promise<JobWrite> {
  const fd = await memoised(memo, `fd:${body.template_id ?? ''}`, () =>
    findFaxDefault(c, accountId, body.template_id),
  );
  if (body.template_id !== undefined && !fd) throw noFaxDefault();
  if (
    body.smart_document_id !== undefined &&
    (
      await c.query(
        'SELECT 1 FROM smart_templates WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL',
        [body.smart_document_id, accountId],
      )
    ).rowCount !== 1
  )
    throw noSmartTemplate();
  const installation = defaultCallerId;
  const callerId = body.caller_id ?? fd?.fax_as ?? (installation !== '' ? installation : undefined);
  if (!callerId)
    throw new ApiError(
      422,
      'caller_id: is required because the account has no default Fax Default to take fax_as from',
    );
  await allowedCallerId(
    c,
    memo,
    accountId,
    callerId,
    installation,
    body.caller_id !== undefined ? null : fd ? `fax_as of the Fax Default ${fd.id}` : null,
  );
  const { scheduledAt } = checked;
  const state = body.approval_required ? 'awaiting_approval' : scheduledAt ? 'scheduled' : 'accepted';
  const job: NewJob = {
    id,
    accountId,
    kind: 'send',
    sourceJobId: null,
    state,
    // A broadcast resolves its recipients' jobs from this one (src/intake/broadcast.ts).
    faxNumber: body.fax_number ?? body.recipients?.[0]?.fax_number ?? '',
    callerId,
    faxQuality: body.fax_quality ?? fd?.fax_quality ?? 'standard',
    faxPriority: body.fax_priority,
    faxDefaultId: fd?.id ?? null,
    faxDefault: fd,
    smartDocumentId: body.smart_document_id ?? null,
    scheduledAt,
    options: {
      approval_required: body.approval_required,
      ...(body.subject !== undefined ? { subject: body.subject } : {}),
      ...(body.message !== undefined ? { message: body.message } : {}),
      ...(body.sender_name !== undefined ? { sender_name: body.sender_name } : {}),
      ...(body.recipient_name !== undefined ? { recipient_name: body.recipient_name } : {}),
      ...checked.origin,
    },
    requestId,
    // Only an accepted job has a command to publish; the others are published when they move on.
    dispatched: state !== 'accepted',
    traceContext: currentTraceContext(),
    clientReference: body.client_reference ?? null,
    maxDials: body.max_dials ?? null,
    giveUpAfter: body.give_up_after ?? null,
  };
  return { job, docs: checked.docs };
}

/** Checks and resolves a send request into the job to record (no writes); throws ApiError. */
export async function prepareSend(
  d: Pick<IntakeDeps, 'scheduler' | 'maxDocumentBytes' | 'defaultCallerId'> & { db: Queryable },
  accountId: string,
  body: SendFaxBody,
  requestId: string | null,
): Promise<JobWrite> {
  return resolveSend(
    d.db,
    accountId,
    body,
    requestId,
    checkSend(d, body),
    newId(),
    new Map(),
    d.defaultCallerId,
  );
}

/** The caller id rule (src/accounts/numbers.ts), read once per caller id in a group-commit batch. */
async function allowedCallerId(
  c: Queryable,
  memo: BatchMemo,
  accountId: string,
  callerId: string,
  installation: string,
  from: string | null,
): Promise<void> {
  const refusal = await memoised(memo, `caller:${callerId}`, () =>
    checkCallerId(c, accountId, callerId, installation, null),
  );
  if (refusal)
    throw from === null ? refusal : await checkCallerId(c, accountId, callerId, installation, from);
}

/** A read shared by the requests of one account in one group-commit batch. */
function memoised<T>(memo: BatchMemo, key: string, read: () => Promise<T>): Promise<T> {
  let p = memo.get(key) as Promise<T> | undefined;
  if (!p) {
    p = read();
    memo.set(key, p);
  }
  return p;
}

const noFaxDefault = () =>
  new ApiError(422, 'template_id: no Fax Default with this id exists in your account');
const noSmartTemplate = () =>
  new ApiError(422, 'smart_document_id: no Smart Template with this id exists in your account');

export async function acceptForward(
  d: HttpIntakeDeps,
  accountId: string,
  body: { job_id: string; fax_number: string; caller_id?: string | undefined },
  requestId: string | null,
  idem?: Idempotency,
): Promise<string> {
  if (!isId(body.job_id)) throw new ApiError(404, messages.faxNotFoundForward);
  const id = newId();
  return commitAndPublish(
    d,
    accountId,
    async (c, memo) => ({
      job: await prepareForward(
        { db: c, defaultCallerId: d.defaultCallerId },
        accountId,
        body,
        requestId,
        memo,
        id,
      ),
      docs: [],
    }),
    idem,
  );
}

/** Checks and resolves a forward request into the job to record (no writes); throws ApiError. */
export async function prepareForward(
  d: { db: Queryable; defaultCallerId?: string | undefined },
  accountId: string,
  body: { job_id: string; fax_number: string; caller_id?: string | undefined },
  requestId: string | null,
  memo: BatchMemo = new Map(),
  id: string = newId(),
): Promise<NewJob> {
  const src = isId(body.job_id) ? await getJob(d.db, body.job_id, accountId) : null;
  if (!src) throw new ApiError(404, messages.faxNotFoundForward);
  if (src.state === 'awaiting_approval' || src.state === 'rejected')
    throw new ApiError(
      409,
      `Fax cannot be forwarded: its sending was not approved (current state: ${src.state})`,
      {
        data: { job_id: src.id, state: src.state },
      },
    );
  const fd = await memoised(memo, 'fd:', () => findFaxDefault(d.db, accountId, undefined));
  const callerId = body.caller_id ?? fd?.fax_as ?? src.caller_id;
  await allowedCallerId(
    d.db,
    memo,
    accountId,
    callerId,
    d.defaultCallerId ?? '',
    body.caller_id !== undefined
      ? null
      : fd
        ? `fax_as of the default Fax Default ${fd.id}`
        : `caller id of the fax ${src.id}`,
  );
  return {
    id,
    accountId,
    kind: 'forward',
    sourceJobId: src.source_job_id ?? src.id, // documents live on the original job
    state: 'accepted',
    faxNumber: body.fax_number,
    callerId,
    faxQuality: src.fax_quality,
    faxPriority: src.fax_priority,
    faxDefaultId: src.fax_default_id,
    // The cover of the original, as it was resolved when the original was accepted.
    faxDefault: src.fax_default,
    smartDocumentId: src.smart_document_id,
    scheduledAt: null,
    options: { ...src.options, approval_required: false },
    requestId,
    dispatched: false,
    traceContext: currentTraceContext(),
  };
}
