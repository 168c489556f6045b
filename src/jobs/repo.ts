// SQL for fax jobs. Every state change is a conditional UPDATE (the fence): it succeeds only from an
// allowed current state, records the transition in the same statement, and returns null otherwise.
// The same statement adds the transition to the events outbox (src/events/relay.ts publishes it).
import type pg from 'pg';
import { open } from '../db/encryption.ts';
import { packBytes, type Queryable } from '../db/pool.ts';
import {
  documentContext,
  openJobOptions,
  sealDocuments,
  sealJobOptions,
  type StoredContent,
} from '../db/sealed-columns.ts';
import type { FaxDefaultValues } from '../domain/fax-default.ts';
import { type JobState, canTransition, statesLeadingTo } from '../domain/states.ts';

export interface JobOptions {
  subject?: string;
  message?: string;
  sender_name?: string;
  recipient_name?: string;
  approval_required?: boolean;
  /** Set on faxes made from a mail by the mail gateway (src/mail/). */
  source?: 'email';
  /** The Message-ID of that mail. */
  message_id?: string;
}

export interface NewJob {
  id: string;
  accountId: string;
  kind: 'send' | 'forward';
  sourceJobId: string | null;
  state: JobState;
  faxNumber: string;
  callerId: string;
  faxQuality: 'low' | 'standard' | 'hd';
  faxPriority: 'high' | 'regular';
  faxDefaultId: string | null;
  /** The Fax Default's values as resolved at acceptance (the cover uses these, not the row's later ones). */
  faxDefault?: FaxDefaultValues | null;
  smartDocumentId: string | null;
  scheduledAt: Date | null;
  options: JobOptions;
  requestId: string | null;
  dispatched: boolean;
  /** The W3C trace context of the request that made the job (src/trace.ts); null when tracing is off. */
  traceContext?: string | null;
  /** The intake lot (migration 009) that stands for this job's unconfirmed command, if any. */
  lotId?: string;
  /** Per-fax options (migration 016); absent or null = none / the installation's limits. */
  clientReference?: string | null;
  maxDials?: number | null;
  giveUpAfter?: number | null;
  /** The broadcast this job is one recipient of. */
  broadcastId?: string | null;
  /** Its place in the broadcast's recipients (from 0). */
  broadcastPosition?: number | null;
}

export interface NewDocument {
  fileName: string;
  fileUrl: string | null;
  content: Buffer | null;
}

export interface JobRow {
  id: string;
  account_id: string;
  kind: 'send' | 'forward';
  source_job_id: string | null;
  state: JobState;
  fax_number: string;
  caller_id: string;
  fax_quality: 'low' | 'standard' | 'hd';
  fax_priority: 'high' | 'regular';
  fax_default_id: string | null;
  /** Frozen at acceptance (migration 014); null for jobs accepted before it or without a Fax Default. */
  fax_default: FaxDefaultValues | null;
  smart_document_id: string | null;
  scheduled_at: Date | null;
  options: JobOptions;
  page_count: number | null;
  pages_sent: number;
  attempts: number;
  next_attempt_at: Date | null;
  failure_code: string | null;
  failure_reason: string | null;
  request_id: string | null;
  created_at: Date;
  updated_at: Date;
  completed_at: Date | null;
  client_reference: string | null;
  max_dials: number | null;
  give_up_after: number | null;
  broadcast_id: string | null;
  broadcast_position: number | null;
  /** The trace this fax belongs to (migration 030); null when tracing was off at acceptance. */
  trace_context: string | null;
}

export async function insertJob(db: Queryable, j: NewJob, docs: NewDocument[]): Promise<void> {
  const options = await sealJobOptions(db, j.accountId, j.id, j.options);
  await db.query(
    `INSERT INTO fax_jobs (id, account_id, kind, source_job_id, state, fax_number, caller_id, fax_quality,
       fax_priority, fax_default_id, smart_document_id, scheduled_at, options, request_id, dispatched_at,
       fax_default, client_reference, max_dials, give_up_after, broadcast_id, broadcast_position,
       trace_context)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14, CASE WHEN $15::boolean THEN now() END, $16,
             $17, $18, $19, $20, $21, $22)`,
    [
      j.id,
      j.accountId,
      j.kind,
      j.sourceJobId,
      j.state,
      j.faxNumber,
      j.callerId,
      j.faxQuality,
      j.faxPriority,
      j.faxDefaultId,
      j.smartDocumentId,
      j.scheduledAt,
      JSON.stringify(options),
      j.requestId,
      j.dispatched,
      j.faxDefault ? JSON.stringify(j.faxDefault) : null,
      j.clientReference ?? null,
      j.maxDials ?? null,
      j.giveUpAfter ?? null,
      j.broadcastId ?? null,
      j.broadcastPosition ?? null,
      j.traceContext ?? null,
    ],
  );
  await db.query(
    `WITH hist AS (
       INSERT INTO fax_job_transitions (job_id, account_id, from_state, to_state) VALUES ($1, $2, NULL, $3)
       RETURNING id
     )
     INSERT INTO event_outbox (transition_id) SELECT id FROM hist`,
    [j.id, j.accountId, j.state],
  );
  await insertDocuments(db, j.id, j.accountId, docs);
}

/** A job's documents, sealed, in order (position 0 first). */
export async function insertDocuments(
  db: Queryable,
  jobId: string,
  accountId: string,
  docs: NewDocument[],
): Promise<void> {
  if (docs.length === 0) return;
  const sealed = await sealDocuments(db, jobId, accountId, docs);
  const packed = packBytes(sealed.map((s) => s?.stored ?? null));
  await db.query(
    `INSERT INTO fax_documents (job_id, account_id, position, file_name, file_url, content, byte_size,
                                content_digest)
     SELECT $1, $2, d.pos, d.name, d.url,
            CASE WHEN d.clen IS NOT NULL THEN substring($6::bytea FROM d.coff FOR d.clen) END, d.size,
            d.digest
       FROM unnest($3::int[], $4::text[], $5::text[], $7::int[], $8::int[], $9::int[], $10::bytea[])
            AS d(pos, name, url, coff, clen, size, digest)`,
    [
      jobId,
      accountId,
      docs.map((_, i) => i),
      docs.map((d) => d.fileName),
      docs.map((d) => d.fileUrl),
      packed.blob,
      packed.offsets,
      packed.lengths,
      docs.map((d) => d.content?.length ?? null),
      sealed.map((s) => s?.digest ?? null),
    ],
  );
}

/** The pg client or pool behind a Queryable, which also takes a query config (a named statement). */
type QueryableConfig = {
  query<R extends pg.QueryResultRow>(q: pg.QueryConfig): Promise<pg.QueryResult<R>>;
};

/**
 * insertJob for many jobs in one statement (the intakes' batched commits): jobs, their initial
 * transitions, outbox rows and documents. A job that conflicts with an existing one (the same AMQP
 * command id, see migration 005) is skipped; returns the ids actually inserted. With `strict`, a
 * conflict fails the statement instead (HTTP jobs have fresh ids: a conflict is never expected).
 */
export async function insertJobs(
  db: Queryable,
  items: { job: NewJob; docs: NewDocument[] }[],
  o: {
    strict?: boolean;
    sealed?: { docs: (StoredContent | null)[]; options: Record<string, unknown>[] };
  } = {},
): Promise<Set<string>> {
  if (items.length === 0) return new Set();
  // Sealed before anything is sent: on a pipelined connection, a statement queued behind an await
  // could go out after the caller's COMMIT (a caller that pipelines passes them sealed: sealJobs).
  const { docs: sealed, options } = o.sealed ?? (await sealJobs(db, items));
  const jobs = items.map(({ job: j }, i) => ({
    id: j.id,
    account_id: j.accountId,
    kind: j.kind,
    source_job_id: j.sourceJobId,
    state: j.state,
    fax_number: j.faxNumber,
    caller_id: j.callerId,
    fax_quality: j.faxQuality,
    fax_priority: j.faxPriority,
    fax_default_id: j.faxDefaultId,
    smart_document_id: j.smartDocumentId,
    scheduled_at: j.scheduledAt?.toISOString() ?? null,
    options: options[i],
    request_id: j.requestId,
    dispatched: j.dispatched,
    fax_default: j.faxDefault ?? null,
    client_reference: j.clientReference ?? null,
    max_dials: j.maxDials ?? null,
    give_up_after: j.giveUpAfter ?? null,
    broadcast_id: j.broadcastId ?? null,
    broadcast_position: j.broadcastPosition ?? null,
    trace_context: j.traceContext ?? null,
  }));
  const docs = items.flatMap(({ job, docs }) => docs.map((d, i) => ({ jobId: job.id, pos: i, ...d })));
  const packed = packBytes(sealed.map((s) => s?.stored ?? null));
  // A named (prepared) statement: planning this statement costs PostgreSQL about a millisecond, more
  // than writing a small batch; prepared once per connection, it is planned once (a generic plan).
  const r = await (db as unknown as QueryableConfig).query<{ id: string }>({
    name: o.strict ? 'faxline_insert_jobs_strict' : 'faxline_insert_jobs',
    text: `WITH ins AS (
       INSERT INTO fax_jobs (id, account_id, kind, source_job_id, state, fax_number, caller_id, fax_quality,
         fax_priority, fax_default_id, smart_document_id, scheduled_at, options, request_id, dispatched_at,
         fax_default, client_reference, max_dials, give_up_after, broadcast_id, broadcast_position,
         trace_context)
       SELECT x.id, x.account_id, x.kind, x.source_job_id, x.state, x.fax_number, x.caller_id, x.fax_quality,
              x.fax_priority, x.fax_default_id, x.smart_document_id, x.scheduled_at, x.options, x.request_id,
              CASE WHEN x.dispatched THEN now() END, x.fax_default, x.client_reference, x.max_dials,
              x.give_up_after, x.broadcast_id, x.broadcast_position, x.trace_context
         FROM jsonb_to_recordset($1::jsonb) AS x(id uuid, account_id uuid, kind text, source_job_id uuid,
              state text, fax_number text, caller_id text, fax_quality text, fax_priority text,
              fax_default_id uuid, smart_document_id uuid, scheduled_at timestamptz, options jsonb,
              request_id text, dispatched boolean, fax_default jsonb, client_reference text,
              max_dials integer, give_up_after integer, broadcast_id uuid, broadcast_position integer,
              trace_context text)
       ${o.strict ? '' : 'ON CONFLICT DO NOTHING'}
       RETURNING id, account_id, state
     ), hist AS (
       INSERT INTO fax_job_transitions (job_id, account_id, from_state, to_state)
       SELECT id, account_id, NULL, state FROM ins
       RETURNING id
     ), outbox AS (
       INSERT INTO event_outbox (transition_id) SELECT id FROM hist
     ), docs AS (
       INSERT INTO fax_documents (job_id, account_id, position, file_name, file_url, content, byte_size,
                                  content_digest)
       SELECT d.job_id, ins.account_id, d.pos, d.name, d.url,
              CASE WHEN d.clen IS NOT NULL THEN substring($6::bytea FROM d.coff FOR d.clen) END, d.size,
              d.digest
         FROM unnest($2::uuid[], $3::int[], $4::text[], $5::text[], $8::int[], $9::int[], $7::int[],
                     $10::bytea[])
              AS d(job_id, pos, name, url, coff, clen, size, digest)
         JOIN ins ON ins.id = d.job_id
     )
     SELECT id FROM ins`,
    values: [
      JSON.stringify(jobs),
      docs.map((d) => d.jobId),
      docs.map((d) => d.pos),
      docs.map((d) => d.fileName),
      docs.map((d) => d.fileUrl),
      packed.blob,
      docs.map((d) => d.content?.length ?? null),
      packed.offsets,
      packed.lengths,
      sealed.map((s) => s?.digest ?? null),
    ],
  });
  return new Set(r.rows.map((x) => x.id));
}

/**
 * What insertJobs stores sealed, sealed: the jobs' documents and the content fields of their options
 * (cover text, names: sealJobOptions), one job after the other (an account's first data key is made
 * on first use).
 */
export async function sealJobs(
  db: Queryable,
  items: { job: NewJob; docs: NewDocument[] }[],
): Promise<{ docs: (StoredContent | null)[]; options: Record<string, unknown>[] }> {
  const docs = await sealJobDocuments(db, items);
  const options: Record<string, unknown>[] = [];
  for (const { job } of items) options.push(await sealJobOptions(db, job.accountId, job.id, job.options));
  return { docs, options };
}

/** The stored (sealed) contents of the jobs' documents, in the order insertJobs writes them. */
export async function sealJobDocuments(
  db: Queryable,
  items: { job: NewJob; docs: NewDocument[] }[],
): Promise<(StoredContent | null)[]> {
  const sealed: (StoredContent | null)[] = [];
  for (const { job, docs } of items) sealed.push(...(await sealDocuments(db, job.id, job.accountId, docs)));
  return sealed;
}

/** Columns a transition may set besides state. */
export interface TransitionSet {
  page_count?: number;
  pages_sent?: number;
  attempts?: number;
  next_attempt_at?: Date | null;
  failure_code?: string | null;
  failure_reason?: string | null;
  completed_at?: Date | null;
  dispatched_at?: Date | null;
  /** A line call's lease, only ever cleared here (the call ended): in the same statement as its state. */
  lease_owner?: null;
  lease_until?: null;
  /** The compressed size of every page, set when the job is prepared (queued). */
  page_bytes?: number[];
  /** When the job became ready for a line: 'now' is the database's clock (the line's order). */
  ready_at?: 'now';
}

const settable = new Set<keyof TransitionSet>([
  'page_count',
  'pages_sent',
  'attempts',
  'next_attempt_at',
  'failure_code',
  'failure_reason',
  'completed_at',
  'dispatched_at',
  'lease_owner',
  'lease_until',
  'page_bytes',
  'ready_at',
]);

/**
 * A call starting (the move to dialling): the line lease is taken for `owner` and each job's next
 * attempt is counted (attempts + 1) and opened in fax_attempts (resuming after the pages the last
 * attempt sent), in the state change's own statement. The rows returned carry the station_id of
 * the number the fax presents.
 */
export interface CallStart {
  owner: string;
  leaseSeconds: number;
  backend: string;
}

/**
 * A call's end recorded with its state change: the job moves only if it is still on attempt
 * `attempt` (a later attempt, or a job that moved on, keeps this outcome out), and that attempt's
 * row in fax_attempts gets `columns` (and ended_at) in the same statement.
 */
export interface CallEnd {
  attempt: number;
  columns: Record<string, unknown>;
}

interface TransitionOptions {
  from?: readonly JobState[];
  set?: TransitionSet;
  detail?: unknown;
  accountId?: string;
  call?: CallStart;
  end?: CallEnd;
  /** Only id and created_at are returned (moveJob). */
  brief?: boolean;
}

type MovedJob = JobRow & { from_state: JobState; station_id?: string | null };

/**
 * Moves a job to `to` if, and only if, its current state is one of `from` (default: every state the
 * state machine allows to reach `to`). Returns the updated row, or null when the fence refused.
 */
/**
 * The same as transition(), for a caller that needs only to know whether the job moved: only its id
 * and created_at come back, not the whole row (a fax's state changes each returned some 35 columns,
 * formatted by PostgreSQL and parsed here, for nothing).
 */
export async function moveJob(
  db: Queryable,
  jobId: string,
  to: JobState,
  o: Omit<TransitionOptions, 'call'> = {},
): Promise<{ id: string; created_at: Date } | null> {
  return (await applyTransition(db, [jobId], to, { ...o, brief: true }))[0] ?? null;
}

export async function transition(
  db: Queryable,
  jobId: string,
  to: JobState,
  o: Omit<TransitionOptions, 'call'> = {},
): Promise<MovedJob | null> {
  return (await applyTransition(db, [jobId], to, o))[0] ?? null;
}

/** The same fence for many jobs in one statement (each job moves only from an allowed state). */
export async function transitionMany(
  db: Queryable,
  jobIds: readonly string[],
  to: JobState,
  o: Omit<TransitionOptions, 'accountId'> = {},
): Promise<MovedJob[]> {
  if (jobIds.length === 0) return [];
  return applyTransition(db, jobIds, to, o);
}

/**
 * One statement: lock the jobs that are in an allowed state, move them, record each transition, and
 * queue its event in the outbox — so a state change and its event commit together or not at all.
 */
async function applyTransition(
  db: Queryable,
  jobIds: readonly string[],
  to: JobState,
  o: TransitionOptions,
): Promise<MovedJob[]> {
  // The one state table (domain/states.ts) decides: a job moves only along one of its edges. A
  // caller's list of states to move from is narrowed to those edges (the line stage records an
  // outcome "from dialling, sending or unknown", and unknown leads only to delivered or failed); a
  // call that names no allowed edge at all is a programming error, refused before anything is written.
  const from = (o.from ?? statesLeadingTo(to)).filter((s) => canTransition(s, to));
  if (from.length === 0)
    throw new Error(
      `job state machine: ${(o.from ?? []).join(', ')} → ${to} is not a transition of the state table`,
    );
  const values: unknown[] = [jobIds, to, from];
  const sets: string[] = ['state = $2', 'updated_at = now()'];
  for (const [k, v] of Object.entries(o.set ?? {})) {
    if (!settable.has(k as keyof TransitionSet)) throw new Error(`not settable: ${k}`);
    if (k === 'ready_at' && v === 'now') {
      sets.push(`${k} = now()`);
      continue;
    }
    values.push(v);
    sets.push(`${k} = $${values.length}`);
  }
  let attempt = '';
  let fence = '';
  let returning = o.brief ? 'SELECT id, created_at FROM upd' : 'SELECT * FROM upd';
  if (o.end) {
    values.push(o.end.attempt);
    const n = `$${values.length}`;
    fence = ` AND j.attempts = ${n}`;
    const cols = ['ended_at = now()'];
    for (const [k, v] of Object.entries(o.end.columns)) {
      if (!/^[a-z_]+$/.test(k)) throw new Error(`not an attempt column: ${k}`);
      values.push(v);
      cols.push(`${k} = $${values.length}`);
    }
    attempt = `, ended AS (
       UPDATE fax_attempts a SET ${cols.join(', ')} FROM upd WHERE a.job_id = upd.id AND a.attempt = ${n}
     )`;
  }
  if (o.call) {
    values.push(o.call.owner, o.call.leaseSeconds, o.call.backend);
    const [owner, seconds, backend] = [values.length - 2, values.length - 1, values.length].map(
      (n) => `$${n}`,
    );
    sets.push(
      'attempts = f.attempts + 1',
      `lease_owner = ${owner}`,
      `lease_until = now() + make_interval(secs => ${seconds})`,
    );
    attempt = `, attempt AS (
       INSERT INTO fax_attempts (job_id, account_id, attempt, backend, worker, page_count, resumed_after_page)
       SELECT u.id, u.account_id, u.attempts, ${backend}, ${owner}, coalesce(cardinality(u.page_bytes), 0),
              CASE WHEN u.attempts > 1 THEN coalesce((SELECT a.pages_sent FROM fax_attempts a
                WHERE a.job_id = u.id ORDER BY a.attempt DESC LIMIT 1), 0) ELSE 0 END
         FROM upd u
     )`;
    returning = `SELECT upd.*, (SELECT n.station_id FROM numbers n
       WHERE n.number = upd.caller_id AND n.account_id = upd.account_id) AS station_id FROM upd`;
  }
  values.push(o.detail === undefined ? null : JSON.stringify(o.detail));
  const detailParam = `$${values.length}`;
  let accountClause = '';
  if (o.accountId) {
    values.push(o.accountId);
    accountClause = ` AND j.account_id = $${values.length}`;
  }
  const r = await db.query<MovedJob>(
    `WITH old AS (
       SELECT j.id, j.state FROM fax_jobs j
        WHERE j.id = ANY($1::uuid[]) AND j.state = ANY($3::text[])${accountClause}${fence}
        ORDER BY j.id FOR UPDATE
     ), upd AS (
       UPDATE fax_jobs f SET ${sets.join(', ')} FROM old WHERE f.id = old.id
       RETURNING ${o.brief ? 'f.id, f.account_id, f.state, f.attempts, f.created_at' : 'f.*'}, old.state AS from_state
     ), hist AS (
       INSERT INTO fax_job_transitions (job_id, account_id, from_state, to_state, attempt, detail)
       SELECT id, account_id, from_state, state, attempts, ${detailParam}::jsonb FROM upd
       RETURNING id
     ), outbox AS (
       INSERT INTO event_outbox (transition_id) SELECT id FROM hist
     )${attempt}
     ${returning}`,
    values,
  );
  return r.rows;
}

export async function getJob(db: Queryable, jobId: string, accountId?: string): Promise<JobRow | null> {
  const r = await db.query<JobRow>(
    `SELECT * FROM fax_jobs WHERE id = $1${accountId ? ' AND account_id = $2' : ''}`,
    accountId ? [jobId, accountId] : [jobId],
  );
  const row = r.rows[0];
  // With its options' content fields opened (they are sealed in the row: sealJobOptions).
  return row ? { ...row, options: await openJobOptions(db, row.account_id, row.id, row.options) } : null;
}

/** Rows of fax_jobs read with SQL of their own (list pages), with their options opened as getJob does. */
export async function openJobRows<R extends { id: string; account_id: string; options: unknown }>(
  db: Queryable,
  rows: R[],
): Promise<R[]> {
  const out: R[] = [];
  for (const r of rows) out.push({ ...r, options: await openJobOptions(db, r.account_id, r.id, r.options) });
  return out;
}

export interface TransitionRow {
  from_state: JobState | null;
  to_state: JobState;
  attempt: number;
  at: Date;
  detail: unknown;
}

export async function getHistory(db: Queryable, jobId: string): Promise<TransitionRow[]> {
  const r = await db.query<TransitionRow>(
    'SELECT from_state, to_state, attempt, at, detail FROM fax_job_transitions WHERE job_id = $1 ORDER BY id',
    [jobId],
  );
  return r.rows;
}

export async function getDocuments(
  db: Queryable,
  jobId: string,
): Promise<
  { id: string; position: number; file_name: string; file_url: string | null; content: Buffer | null }[]
> {
  const r = await db.query<{
    id: string;
    job_id: string;
    account_id: string;
    position: number;
    file_name: string;
    file_url: string | null;
    content: Buffer | null;
  }>(
    'SELECT id, job_id, account_id, position, file_name, file_url, content FROM fax_documents WHERE job_id = $1 ORDER BY position',
    [jobId],
  );
  const out = [];
  for (const { job_id, account_id, ...d } of r.rows)
    out.push({
      ...d,
      content: d.content && (await open(db, documentContext(account_id, job_id, d.position), d.content)),
    });
  return out;
}

/** Sets dispatched_at of jobs whose command publish was confirmed (batched by the command publisher). */
export async function markDispatched(db: Queryable, jobIds: string[]): Promise<void> {
  if (jobIds.length === 0) return;
  await (db as unknown as QueryableConfig).query({
    name: 'faxline_mark_dispatched',
    text: 'UPDATE fax_jobs SET dispatched_at = now() WHERE id = ANY($1::uuid[]) AND dispatched_at IS NULL',
    values: [jobIds],
  });
}

/**
 * A job whose publish failed before anyone saw it: removed so the 503 the customer gets is the truth.
 * Its command is unconfirmed: either not marked dispatched, or still in an intake lot.
 */
export async function deleteUndispatched(db: Queryable, jobId: string): Promise<boolean> {
  const r = await db.query(
    `DELETE FROM fax_jobs j WHERE j.id = $1 AND j.state = 'accepted'
        AND (j.dispatched_at IS NULL OR EXISTS (SELECT 1 FROM intake_lots l WHERE j.id = ANY (l.job_ids)))`,
    [jobId],
  );
  return (r.rowCount ?? 0) > 0;
}

/** Records an intake lot: the jobs of one batch and account whose commands are not confirmed yet. */
export async function insertLot(
  db: Queryable,
  lotId: string,
  accountId: string,
  jobIds: string[],
): Promise<void> {
  await (db as unknown as QueryableConfig).query({
    name: 'faxline_insert_lot',
    text: 'INSERT INTO intake_lots (id, account_id, job_ids) VALUES ($1, $2, $3::uuid[])',
    values: [lotId, accountId, jobIds],
  });
}

/** Forgets lots whose commands RabbitMQ confirmed. */
export async function deleteLots(db: Queryable, lotIds: string[]): Promise<void> {
  if (lotIds.length === 0) return;
  await (db as unknown as QueryableConfig).query({
    name: 'faxline_delete_lots',
    text: 'DELETE FROM intake_lots WHERE id = ANY($1::uuid[])',
    values: [lotIds],
  });
}

/**
 * Claims up to `limit` of an account's parked lots (a send worker's backlog past
 * PREPARE_ACCOUNT_BACKLOG), oldest first, before they are due, with their jobs that are still
 * accepted. A claimed lot becomes an ordinary unconfirmed one (no longer parked, created now): it is
 * deleted when its command is confirmed, and the sweep republishes it after its grace when the
 * publish failed; so no two claimers take one lot.
 */
export async function claimParkedLots(
  db: Queryable,
  accountId: string,
  limit: number,
): Promise<{ id: string; jobs: UnconfirmedJob[] }[]> {
  const r = await db.query<{ id: string; jobs: UnconfirmedJob[] }>(
    `WITH claimed AS (
       UPDATE intake_lots SET created_at = now(), parked = false
        WHERE id IN (SELECT id FROM intake_lots WHERE parked AND account_id = $1
                      ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
       RETURNING id, job_ids, created_at)
     SELECT l.id,
            coalesce(jsonb_agg(jsonb_build_object('id', j.id, 'account_id', j.account_id, 'kind', j.kind,
                                                  'request_id', j.request_id))
                       FILTER (WHERE j.id IS NOT NULL), '[]') AS jobs
       FROM claimed l
       LEFT JOIN fax_jobs j ON j.id = ANY (l.job_ids) AND j.state = 'accepted'
      GROUP BY l.id, l.created_at`,
    [accountId, limit],
  );
  return r.rows;
}

/** What republishing a job's command needs. */
export interface UnconfirmedJob {
  id: string;
  account_id: string;
  kind: 'send' | 'forward';
  request_id: string | null;
  trace_context: string | null;
}

/**
 * Lots older than `olderThanSeconds` (their process died before the confirm, or it failed), each with
 * its jobs that are still accepted: the others were picked up, cancelled or removed. One query.
 */
export async function findStaleLots(
  db: Queryable,
  olderThanSeconds: number,
  limit: number,
): Promise<{ id: string; jobs: UnconfirmedJob[] }[]> {
  // Claimed (created_at moved to now) so that concurrent sweepers (every API process and the
  // scheduler) republish each lot once; a lot whose republish fails is stale again after the grace.
  // A claimed parked lot is parked no longer, so a send worker's unpark (claimParkedLots) does not
  // republish it a second time: it is an ordinary unconfirmed lot until its command is confirmed.
  // Taken round-robin between accounts (each account's oldest first), so one account's flood of
  // parked commands cannot hold back another account's lot.
  const r = await db.query<{ id: string; jobs: UnconfirmedJob[] }>(
    `WITH candidates AS (
       SELECT id FROM (SELECT id, created_at,
                              row_number() OVER (PARTITION BY account_id ORDER BY created_at) AS turn
                         FROM intake_lots WHERE created_at < now() - make_interval(secs => $1)) c
        ORDER BY turn, created_at LIMIT $2),
     claimed AS (
       UPDATE intake_lots SET created_at = now(), parked = false
        WHERE id IN (SELECT id FROM candidates) AND created_at < now() - make_interval(secs => $1)
       RETURNING id, job_ids, created_at)
     SELECT l.id,
            coalesce(jsonb_agg(jsonb_build_object('id', j.id, 'account_id', j.account_id, 'kind', j.kind,
                                                  'request_id', j.request_id,
                                                  'trace_context', j.trace_context))
                       FILTER (WHERE j.id IS NOT NULL), '[]') AS jobs
       FROM claimed l
       LEFT JOIN fax_jobs j ON j.id = ANY (l.job_ids) AND j.state = 'accepted'
      GROUP BY l.id, l.created_at ORDER BY l.created_at`,
    [olderThanSeconds, limit],
  );
  return r.rows;
}

/** Accepted jobs whose command was never confirmed, older than `olderThanSeconds`. */
export async function findUndispatched(
  db: Queryable,
  olderThanSeconds: number,
  limit: number,
): Promise<UnconfirmedJob[]> {
  const r = await db.query<UnconfirmedJob>(
    `SELECT id, account_id, kind, request_id, trace_context FROM fax_jobs
      WHERE dispatched_at IS NULL AND state = 'accepted' AND created_at < now() - make_interval(secs => $1)
      ORDER BY created_at LIMIT $2`,
    [olderThanSeconds, limit],
  );
  return r.rows;
}
