// Intake of send and forward: resolve Fax Defaults, validate references, record the job with its
// documents in one transaction, then publish its command with a publisher confirm. The customer
// gets a success only when both happened; if the publish fails the job is removed and the customer
// gets 503, so an answer is never a lie.
import { BrokerUnavailableError, type Broker } from '../amqp/broker.ts';
import { ApiError, messages } from '../api/envelope.ts';
import type { SendFaxBody } from '../api/schemas.ts';
import type { Clock } from '../clock.ts';
import { type Pool, type Queryable, withTx } from '../db/pool.ts';
import { isId, newId } from '../domain/ids.ts';
import type { Dispatcher } from '../jobs/dispatcher.ts';
import { deleteUndispatched, getJob, insertJob, type NewDocument, type NewJob } from '../jobs/repo.ts';
import type { Scheduler } from './scheduler.ts';

export interface IntakeDeps {
  db: Pool;
  broker: Broker;
  dispatcher: Dispatcher;
  scheduler: Scheduler;
  clock: Clock;
  maxDocumentBytes: number;
}

interface FaxDefaultRow {
  id: string;
  fax_as: string;
  fax_quality: 'low' | 'standard' | 'hd';
}

async function findFaxDefault(
  db: Queryable,
  accountId: string,
  id: string | undefined,
): Promise<FaxDefaultRow | null> {
  if (id !== undefined) {
    if (!isId(id)) return null;
    const r = await db.query<FaxDefaultRow>(
      'SELECT id, fax_as, fax_quality FROM fax_defaults WHERE id = $1 AND account_id = $2',
      [id, accountId],
    );
    return r.rows[0] ?? null;
  }
  const r = await db.query<FaxDefaultRow>(
    'SELECT id, fax_as, fax_quality FROM fax_defaults WHERE account_id = $1 AND is_default',
    [accountId],
  );
  return r.rows[0] ?? null;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** Strict Base64 → bytes, with the size cap applied before decoding. */
export function decodeDocument(data: string, index: number, maxBytes: number): Buffer {
  const clean = data.replace(/[\r\n]/g, '');
  if (Math.floor((clean.length * 3) / 4) > maxBytes + 2)
    throw new ApiError(413, `fax_data[${index}].file_data: document is larger than ${maxBytes} bytes`);
  if (clean.length === 0 || clean.length % 4 !== 0 || !BASE64.test(clean))
    throw new ApiError(422, `fax_data[${index}].file_data: is not valid Base64`);
  const bytes = Buffer.from(clean, 'base64');
  if (bytes.length > maxBytes)
    throw new ApiError(413, `fax_data[${index}].file_data: document is larger than ${maxBytes} bytes`);
  if (bytes.subarray(0, 5).toString('latin1') !== '%PDF-')
    throw new ApiError(422, `fax_data[${index}].file_data: is not a PDF (it does not start with %PDF-)`);
  return bytes;
}

async function commitAndDispatch(d: IntakeDeps, job: NewJob, docs: NewDocument[]): Promise<string> {
  if (!d.broker.isConnected && job.state === 'accepted') throw new ApiError(503, messages.brokerDown);
  await withTx(d.db, async (c) => {
    await insertJob(c, job, docs);
    if (job.state === 'scheduled' && job.scheduledAt)
      await d.scheduler.schedule(c, job.id, job.accountId, job.scheduledAt);
  });
  if (job.state !== 'accepted') return job.id;
  try {
    await d.dispatcher.dispatch({
      type: job.kind,
      job_id: job.id,
      account_id: job.accountId,
      ...(job.requestId ? { request_id: job.requestId } : {}),
    });
  } catch (err) {
    // Not confirmed. If nobody has picked the job up, remove it and say so; if a worker already
    // has it (the confirm was lost, not the message), the job is real and the answer is success.
    const removed = await deleteUndispatched(d.db, job.id).catch(() => false);
    if (removed || !(await getJob(d.db, job.id).catch(() => null)))
      throw new ApiError(503, messages.brokerDown, { data: (err as Error).message });
    if (!(err instanceof BrokerUnavailableError)) throw err;
  }
  return job.id;
}

export async function acceptSend(
  d: IntakeDeps,
  accountId: string,
  body: SendFaxBody,
  requestId: string | null,
): Promise<string> {
  const { job, docs } = await prepareSend(d, accountId, body, requestId);
  return commitAndDispatch(d, job, docs);
}

/** Checks and resolves a send request into the job to record (no writes); throws ApiError. */
export async function prepareSend(
  d: Pick<IntakeDeps, 'scheduler' | 'maxDocumentBytes'> & { db: Queryable },
  accountId: string,
  body: SendFaxBody,
  requestId: string | null,
): Promise<{ job: NewJob; docs: NewDocument[] }> {
  const fd = await findFaxDefault(d.db, accountId, body.template_id);
  if (body.template_id !== undefined && !fd)
    throw new ApiError(422, 'template_id: no Fax Default with this id exists in your account');
  let smartId: string | null = null;
  if (body.smart_document_id !== undefined) {
    const ok =
      isId(body.smart_document_id) &&
      (
        await d.db.query('SELECT 1 FROM smart_templates WHERE id = $1 AND account_id = $2', [
          body.smart_document_id,
          accountId,
        ])
      ).rowCount === 1;
    if (!ok)
      throw new ApiError(422, 'smart_document_id: no Smart Template with this id exists in your account');
    smartId = body.smart_document_id;
  }
  const callerId = body.caller_id ?? fd?.fax_as;
  if (!callerId)
    throw new ApiError(
      422,
      'caller_id: is required because the account has no default Fax Default to take fax_as from',
    );

  const docs: NewDocument[] = body.fax_data.map((doc, i) => ({
    fileName: doc.file_name,
    fileUrl: doc.file_url ?? null,
    content: doc.file_data !== undefined ? decodeDocument(doc.file_data, i, d.maxDocumentBytes) : null,
  }));

  let scheduledAt: Date | null = null;
  if (body.scheduled_date !== undefined) {
    scheduledAt = d.scheduler.resolveDate(body.scheduled_date);
  }
  const id = newId();
  const job: NewJob = {
    id,
    accountId,
    kind: 'send',
    sourceJobId: null,
    state: scheduledAt ? 'scheduled' : 'accepted',
    faxNumber: body.fax_number,
    callerId,
    faxQuality: body.fax_quality ?? fd?.fax_quality ?? 'standard',
    faxPriority: body.fax_priority,
    faxDefaultId: fd?.id ?? null,
    smartDocumentId: smartId,
    scheduledAt,
    options: {
      approval_required: body.approval_required,
      ...(body.subject !== undefined ? { subject: body.subject } : {}),
      ...(body.message !== undefined ? { message: body.message } : {}),
      ...(body.sender_name !== undefined ? { sender_name: body.sender_name } : {}),
      ...(body.recipient_name !== undefined ? { recipient_name: body.recipient_name } : {}),
    },
    requestId,
    dispatched: scheduledAt !== null,
  };
  return { job, docs };
}

export async function acceptForward(
  d: IntakeDeps,
  accountId: string,
  body: { job_id: string; fax_number: string; caller_id?: string | undefined },
  requestId: string | null,
): Promise<string> {
  return commitAndDispatch(d, await prepareForward(d, accountId, body, requestId), []);
}

/** Checks and resolves a forward request into the job to record (no writes); throws ApiError. */
export async function prepareForward(
  d: { db: Queryable },
  accountId: string,
  body: { job_id: string; fax_number: string; caller_id?: string | undefined },
  requestId: string | null,
): Promise<NewJob> {
  const src = isId(body.job_id) ? await getJob(d.db, body.job_id, accountId) : null;
  if (!src) throw new ApiError(404, messages.faxNotFoundForward);
  const fd = await findFaxDefault(d.db, accountId, undefined);
  const callerId = body.caller_id ?? fd?.fax_as ?? src.caller_id;
  const job: NewJob = {
    id: newId(),
    accountId,
    kind: 'forward',
    sourceJobId: src.source_job_id ?? src.id, // documents live on the original job
    state: 'accepted',
    faxNumber: body.fax_number,
    callerId,
    faxQuality: src.fax_quality,
    faxPriority: src.fax_priority,
    faxDefaultId: src.fax_default_id,
    smartDocumentId: src.smart_document_id,
    scheduledAt: null,
    options: src.options,
    requestId,
    dispatched: false,
  };
  return job;
}
