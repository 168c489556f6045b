// Proof of transmission (issue 21, item 3):
//   GET /v1/faxes/{job_id}/report             the transmission report (PDF)
//   GET /v1/faxes/{job_id}/image?format=tiff  the fax image as transmitted (TIFF Class F, T.6)
//   GET /v1/faxes/{job_id}/image?format=pdf   the same pages in a PDF, their T.6 data unchanged
// Another account's job id is answered exactly as a missing one (404 "Fax not found"); a fax that is
// not finished yet gets 409 with its state; an image deleted with the documents 410.
// The stored image (up to FAX_MAX_TIFF_BYTES, 64 MiB) is never loaded whole: it is read a range at a
// time, each range in its own short transaction, as the client takes the answer (no connection of
// the pool is held while a slow client reads), and the PDF is written around the pages as they come.
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { z } from 'zod';
import { loadTimeZone } from '../../documents/cover.ts';
import { imagePdfParts, reportOfJob, reportPdf } from '../../documents/proof.ts';
import { readRenderRange, renderSize } from '../../documents/render/store.ts';
import { readTiffLayout, type PageLayout, type StoredPage } from '../../documents/render/tiff-read.ts';
import { ApiError, messages } from '../../domain/envelope.ts';
import { isId } from '../../domain/ids.ts';
import { terminalStates } from '../../domain/states.ts';
import type { Queryable } from '../../db/pool.ts';
import { getJob, type JobRow } from '../../jobs/repo.ts';
import { getAttempts } from '../../lines/repo.ts';
import { accountOf } from '../auth-hook.ts';
import type { RouteDeps } from '../deps.ts';
import { operation, refusal, tokenErrors } from '../openapi.ts';

/** A binary answer (the OpenAPI document names its media type). */
const binary = (description: string, ...types: string[]) =>
  z.string().meta({
    description,
    content: Object.fromEntries(types.map((t) => [t, { schema: { type: 'string', contentMediaType: t } }])),
  });

const params = z.object({ job_id: z.string().describe('The job_id of a send or forward.') });
const notFound = refusal('No such fax in this account (also: another account’s).', messages.faxNotFound);
const notFinished = refusal(
  'The fax is not finished yet (it is delivered, failed, cancelled, rejected or unknown once it is); the message gives its state.',
  'Fax not finished: its transmission report and image are available once it is delivered or has failed (current state: sending)',
  0,
  { job_id: '…', state: 'sending' },
);

const zeroFootprintReport =
  "Transmission report not available: the fax's content was deleted (zero footprint)";

const contracts = {
  report: operation({
    tag: 'Manage Faxes',
    summary: 'Transmission report of a finished fax (PDF)',
    description:
      'A one-page PDF (more with many attempts): result and reason, date submitted and completed (account time zone), ' +
      'line time, pages sent of total, remote CSID, bit rate, ECM, quality, one line per call attempt with what the ' +
      "fax engine reported, and the first page reduced, drawn from the transmitted image itself. Once the fax's " +
      'documents are deleted (retention or a privacy deletion) the report says so instead of showing the page; ' +
      'in zero-footprint mode (PATCH /v1/workspace) it answers 410 instead.',
    auth: true,
    params,
    responses: {
      '200': binary('The report.', 'application/pdf'),
      '404': notFound,
      '409': notFinished,
      '410': refusal(
        "The account is in zero-footprint mode and the fax's content was deleted.",
        zeroFootprintReport,
      ),
      ...tokenErrors,
    },
  }),
  image: operation({
    tag: 'Manage Faxes',
    summary: 'The fax image as transmitted (TIFF, or PDF wrapping the same T.6 data)',
    description:
      'format=tiff (default): the TIFF Class F file handed to the line (T.6/MMR, one page per IFD, 204 dpi wide and ' +
      '98/196/391 lines per inch), byte for byte. format=pdf: one PDF page per fax page, at its paper size, each ' +
      'holding that page’s T.6 data unchanged (CCITTFaxDecode). Kept as long as the documents. Streamed; an account ' +
      'may have 4 downloads open at once (429 with Retry-After past that).',
    auth: true,
    params,
    querystring: z.object({
      format: z.enum(['tiff', 'pdf']).default('tiff').describe('tiff (default) or pdf.'),
    }),
    responses: {
      '200': binary('The image.', 'image/tiff', 'application/pdf'),
      '404': notFound,
      '409': notFinished,
      '410': refusal(
        "The image was deleted with the fax's documents (retention or privacy deletion), or none was made (the fax failed before it was rendered).",
        'Fax image not available: it was deleted with the documents (retention)',
      ),
      '422': refusal('format is not tiff or pdf.', 'format: must be tiff or pdf'),
      ...tokenErrors,
    },
  }),
};

/** The job when it is this account's and finished; else the refusal the contract names. */
async function finishedJob(c: Queryable, id: string): Promise<JobRow> {
  const job = isId(id) ? await getJob(c, id) : null;
  if (!job) throw new ApiError(404, messages.faxNotFound);
  if (!terminalStates.has(job.state))
    throw new ApiError(
      409,
      `Fax not finished: its transmission report and image are available once it is delivered or has failed (current state: ${job.state})`,
      { data: { job_id: job.id, state: job.state } },
    );
  return job;
}

/** Why a finished fax has no stored image: its documents were deleted, or it was never rendered. */
async function whyNoImage(c: Queryable, job: JobRow): Promise<string> {
  const r = await c.query<{ deleted_reason: string | null }>(
    'SELECT deleted_reason FROM fax_documents WHERE job_id = $1 AND deleted_at IS NOT NULL LIMIT 1',
    [job.source_job_id ?? job.id],
  );
  const row = r.rows[0];
  if (row) return `it was deleted with the documents (${row.deleted_reason ?? 'deleted'})`;
  return 'none was made (the fax ended before it was rendered)';
}

/** The account is in zero-footprint mode and the fax's documents were deleted. */
async function contentGoneForGood(c: Queryable, accountId: string, job: JobRow): Promise<boolean> {
  const r = await c.query(
    `SELECT 1 FROM accounts a WHERE a.id = $1 AND a.zero_footprint
        AND EXISTS (SELECT 1 FROM fax_documents d WHERE d.job_id = $2 AND d.deleted_at IS NOT NULL)`,
    [accountId, job.source_job_id ?? job.id],
  );
  return (r.rowCount ?? 0) > 0;
}

function sendFile(
  reply: FastifyReply,
  type: string,
  name: string,
  body: Uint8Array | Readable,
): FastifyReply {
  return reply
    .type(type)
    .header('content-disposition', `inline; filename="${name}"`)
    .header('cache-control', 'private, no-store')
    .send(body instanceof Readable ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength));
}

/** Bytes of the stored image read at once: what a download holds in memory. */
const CHUNK = 1024 * 1024;
/**
 * Image downloads one account may have open at once in an API process: each holds a chunk or two
 * and reads the database as its client takes the answer, so a burst of slow downloads stays small.
 */
export const DOWNLOADS_PER_ACCOUNT = 4;

/** Bytes [offset, offset + length) of a job's stored image, or an error when it went meanwhile. */
async function range(c: Queryable, jobId: string, offset: number, length: number): Promise<Buffer> {
  const b = await readRenderRange(c, jobId, offset, length);
  if (!b) throw new Error('the fax image was deleted while it was being read');
  return b;
}

/** The first page of a job's stored image (its directory and strip alone), for the report. */
async function firstPage(c: Queryable, jobId: string, size: number): Promise<StoredPage | null> {
  const [p] = await readTiffLayout((o, n) => range(c, jobId, o, n), size, 1);
  return p ? { ...p, data: await range(c, jobId, p.offset, p.length) } : null;
}

/** What the proof downloads need: the account's transactions and the clock (the report's date). */
type ProofDeps = Pick<RouteDeps, 'tenant' | 'clock'>;

/**
 * The report and image downloads, shared by the API's routes and the console's (one limit of open
 * downloads per account for both): each checks the job (404/409/410 as the contract says), then
 * calls `allowed` (the console records its audit event there) before anything is sent.
 */
export interface ProofDownloads {
  report(
    accountId: string,
    jobId: string,
    reply: FastifyReply,
    allowed?: () => Promise<void>,
  ): Promise<FastifyReply>;
  image(
    accountId: string,
    format: 'tiff' | 'pdf',
    jobId: string,
    reply: FastifyReply,
    allowed?: () => Promise<void>,
  ): Promise<FastifyReply>;
}

const services = new WeakMap<object, ProofDownloads>();

/** The downloads of one service (one per `tenant`: the API and its console share the count). */
export function proofDownloads(d: ProofDeps): ProofDownloads {
  const known = services.get(d.tenant);
  if (known) return known;
  const made = makeProofDownloads(d);
  services.set(d.tenant, made);
  return made;
}

function makeProofDownloads(d: ProofDeps): ProofDownloads {
  /** Open image downloads per account (DOWNLOADS_PER_ACCOUNT). */
  const downloads = new Map<string, number>();
  /** Counts a download of `accountId` until its answer's connection closes; 429 past the limit. */
  const hold = (accountId: string, reply: FastifyReply): (() => void) => {
    const n = downloads.get(accountId) ?? 0;
    if (n >= DOWNLOADS_PER_ACCOUNT)
      throw new ApiError(
        429,
        `Too many downloads at once: this account may download ${DOWNLOADS_PER_ACCOUNT} fax images at a time; retry after 1 s`,
        { data: { retry_after: 1 }, headers: { 'retry-after': '1' } },
      );
    downloads.set(accountId, n + 1);
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      const left = (downloads.get(accountId) ?? 1) - 1;
      if (left > 0) downloads.set(accountId, left);
      else downloads.delete(accountId);
    };
    reply.raw.once('close', release);
    return release;
  };

  async function report(
    accountId: string,
    jobId: string,
    reply: FastifyReply,
    allowed?: () => Promise<void>,
  ) {
    const input = await d.tenant.tx(accountId, async (c) => {
      const job = await finishedJob(c, jobId);
      // One connection (the account's transaction): one query at a time.
      const attempts = await getAttempts(c, job.id);
      const size = await renderSize(c, job.id);
      const timeZone = await loadTimeZone(c, accountId);
      const first = size === null ? null : await firstPage(c, job.id, size);
      const noImage = size === null ? await whyNoImage(c, job) : null;
      // Zero footprint (docs/audit-retention.md): once the content is deleted, no report either.
      if (noImage !== null && (await contentGoneForGood(c, accountId, job)))
        throw new ApiError(410, zeroFootprintReport);
      return { job, attempts, first, timeZone, noImage };
    });
    const { job, first } = input;
    const pdf = await reportPdf({
      ...reportOfJob(job),
      timeZone: input.timeZone,
      attempts: input.attempts,
      firstPage: first,
      noImage: input.noImage,
      now: d.clock.now(),
    });
    await allowed?.();
    return sendFile(reply, 'application/pdf', `fax-${job.id}-report.pdf`, pdf);
  }

  return {
    report,
    async image(accountId, format, jobId, reply, allowed) {
      const release = hold(accountId, reply);
      try {
        return await image(accountId, format, jobId, reply, allowed);
      } catch (err) {
        release();
        throw err;
      }
    },
  };

  async function image(
    accountId: string,
    format: 'tiff' | 'pdf',
    jobId: string,
    reply: FastifyReply,
    allowed?: () => Promise<void>,
  ) {
    const { job, size, layout, noImage } = await d.tenant.tx(accountId, async (c) => {
      const job = await finishedJob(c, jobId);
      const size = await renderSize(c, job.id);
      if (size === null) return { job, size, layout: null, noImage: await whyNoImage(c, job) };
      // The pages' directories (a few hundred bytes a page), for the PDF.
      const layout = format === 'pdf' ? await readTiffLayout((o, n) => range(c, job.id, o, n), size) : null;
      return { job, size, layout, noImage: null };
    });
    if (size === null) throw new ApiError(410, `Fax image not available: ${noImage}`);
    await allowed?.();
    // Bytes [from, to) of the image, a chunk at a time, each read in its own transaction.
    async function* bytes(from: number, to: number): AsyncGenerator<Buffer> {
      for (let o = from; o < to; o += CHUNK)
        yield await d.tenant.tx(accountId, (c) => range(c, job.id, o, Math.min(CHUNK, to - o)));
    }
    if (!layout) {
      reply.header('content-length', size);
      // One piece ahead at most (Readable.from would read 16 ahead of a slow client).
      return sendFile(
        reply,
        'image/tiff',
        `fax-${job.id}.tif`,
        Readable.from(bytes(0, size), { highWaterMark: 1 }),
      );
    }
    const strip = (p: PageLayout) => bytes(p.offset, p.offset + p.length);
    const parts = imagePdfParts(layout, strip, `Fax ${job.id} as transmitted`);
    return sendFile(
      reply,
      'application/pdf',
      `fax-${job.id}.pdf`,
      Readable.from(parts, { highWaterMark: 1 }),
    );
  }
}

export function registerProofRoutes(app: FastifyInstance, d: RouteDeps): void {
  const proof = proofDownloads(d);
  app.get<{ Params: { job_id: string } }>(
    '/v1/faxes/:job_id/report',
    { schema: contracts.report, preHandler: d.auth },
    async (req, reply) => proof.report(accountOf(req), req.params.job_id, reply),
  );

  app.get<{ Params: { job_id: string }; Querystring: { format?: string } }>(
    '/v1/faxes/:job_id/image',
    { schema: contracts.image, preHandler: d.auth },
    async (req, reply) => {
      const format = req.query.format ?? 'tiff';
      if (format !== 'tiff' && format !== 'pdf') throw new ApiError(422, 'format: must be tiff or pdf');
      return proof.image(accountOf(req), format, req.params.job_id, reply);
    },
  );
}
