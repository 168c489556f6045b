// Turns a job's documents into the fax that goes on the line: each PDF is fetched (file_url) and
// checked, the cover page is built (Fax Default or Smart Template) with the total page count, and
// cover plus documents are rendered in the worker pool to one TIFF Class F (MMR) at the job's
// quality. The sizes handed to the line are the real compressed sizes of the pages.
import type { Queryable } from '../db/pool.ts';
import type { Quality } from '../transmission/backend.ts';
import { FaxBudget, type FaxLimits } from './check.ts';
import {
  buildCover,
  loadCoverContext,
  type BuiltCover,
  type CoverContext,
  type CoverJob,
  type TemplateFiller,
} from './cover.ts';
import { DocumentError } from './errors.ts';
import { headerLineOf } from './header.ts';
import type { RenderPool } from './render/pool.ts';
import { assembleFax, renderFax, renderPages, type RenderInput } from './render/render.ts';
import { repeatKey, type RenderKey, type SharedRenders } from './render/shared.ts';
import { saveRender } from './render/store.ts';
import { type DocumentStore, PgDocumentStore, type StoredDocument } from './store.ts';
import { inSpan } from '../trace.ts';

export interface DocumentSource {
  file_name: string;
  file_url: string | null;
  content: Buffer | null;
}

export interface Prepared {
  /** Pages of the fax, cover included. */
  pageCount: number;
  /** Compressed (MMR) size of each page, cover first. */
  pageBytes: number[];
  /** The whole fax: TIFF Class F, one IFD per page. */
  tiff: Buffer;
  /** The cover that was added, with its resolved values; null when the job has none. */
  cover: BuiltCover | null;
  /** Pages of the customer's documents alone. */
  documentPages: number;
}

export type Fetcher = (url: string, signal: AbortSignal) => Promise<Buffer>;

/**
 * Checks one document of an account (a PDF, or an image it turns into one): its page count, decoded
 * size and, for an image, the PDF to render; or a DocumentError with a permanent reason; and fills a Smart Template for the cover (TemplateFiller). In the service it is the PDF
 * sandbox (check.ts: child processes with memory and time caps), built by the wiring (src/app.ts); a
 * bench may check in its own process.
 */
export interface PdfChecker extends TemplateFiller {
  check(
    bytes: Uint8Array,
    name: string,
    signal: AbortSignal,
    accountId: string,
  ): Promise<{ pageCount: number; decodedBytes: number; pdf?: Uint8Array }>;
  /** The limits it checks against: part of a repeated document's content key (render/shared.ts). */
  readonly limits?: object;
}

/** How a fax's documents are checked: each PDF by `pdf`, all of them together against `faxLimits`. */
export interface DocumentChecks {
  pdf: PdfChecker;
  faxLimits: FaxLimits;
}

export interface PrepareOptions {
  /** The PDF check and the fax's limits (the wiring's, from the PDF_* and FAX_* settings). */
  checks: DocumentChecks;
  /** The render processes the fax is rendered in. */
  pool: RenderPool;
  /** What the cover is built from; without it (or with null) the fax has no cover. */
  cover?: CoverContext | null;
  /** The moment printed on the cover (defaults to now). */
  now?: Date;
  /** Where prepareJob reads the job's documents (default: the PostgreSQL store). */
  documents?: DocumentStore;
  /** Whose fax this is: the sandbox and the render pool are shared fairly between accounts. */
  accountId?: string;
  /** Called with each document fetched from its file_url once its check passed. */
  onFetched?: (index: number, bytes: Buffer) => Promise<void>;
  /**
   * Where document pages are kept once rendered (src/documents/render/shared.ts): a broadcast's, for
   * its other recipients, and a send's, for the account's next send of the same documents. Without
   * it, every fax's documents are checked and rendered for it.
   */
  shared?: SharedRenders;
  /**
   * Called for a broadcast recipient's fax: its document pages were rendered (for all), reused, or
   * rendered for it alone because a header line puts its own values on every page.
   */
  onShared?: (outcome: 'rendered' | 'reused' | 'own_header') => void;
  /**
   * Called for any other fax whose documents' bytes are at hand: their pages were rendered (and
   * kept), reused (the account sent the same documents before), or rendered for it alone (own_header).
   */
  onRepeat?: (outcome: 'rendered' | 'reused' | 'own_header') => void;
}

/** The cover as rendered: a Smart Template's PDF, or the drawn cover's values. */
const coverInput = (cover: BuiltCover): CheckedFax['inputs'][number] =>
  cover.pdf
    ? { name: 'cover page', bytes: cover.pdf, pages: cover.pages }
    : { name: 'cover page', bytes: new Uint8Array(0), pages: 1, drawn: cover.values };

/** A fax's documents, checked, with its cover in front: what is rendered, for a send or a preview. */
export interface CheckedFax {
  /** Cover (when there is one) first, then the documents, each with its page count. */
  inputs: RenderInput[];
  documentPages: number;
  cover: BuiltCover | null;
}

/**
 * Fetches (file_url) and checks each document in the sandbox, adds them up against the fax's limits,
 * then builds the cover with the total page count. The send worker and the preview share it, so a
 * preview passes exactly what a send would.
 */
export async function checkDocuments(
  docs: DocumentSource[],
  fetcher: Fetcher,
  signal: AbortSignal,
  o: Omit<PrepareOptions, 'pool'>,
): Promise<CheckedFax> {
  const budget = new FaxBudget(o.checks.faxLimits);
  const inputs: CheckedFax['inputs'] = [];
  for (const [i, d] of docs.entries()) {
    const fetched = !d.content && d.file_url ? await fetcher(d.file_url, signal) : null;
    const bytes = d.content ?? fetched;
    if (!bytes) throw new DocumentError('document_missing', `${d.file_name}: no content`);
    const info = await o.checks.pdf.check(bytes, d.file_name, signal, o.accountId ?? '');
    budget.add(d.file_name, info);
    // An image (TIFF, JPEG, PNG) is rendered as the PDF the check made of it.
    inputs.push({ name: d.file_name, bytes: info.pdf ?? bytes, pages: info.pageCount });
    if (fetched) await o.onFetched?.(i, fetched);
  }
  const documentPages = inputs.reduce((n, d) => n + d.pages, 0);
  // A Smart Template is filled by the same sandbox as the documents' checks, as this account's.
  const cover = o.cover
    ? await buildCover(o.cover, documentPages, o.now ?? new Date(), {
        filler: o.checks.pdf,
        signal,
        accountId: o.accountId ?? '',
      })
    : null;
  if (cover) inputs.unshift(coverInput(cover));
  return { inputs, documentPages, cover };
}

export async function prepareDocuments(
  docs: DocumentSource[],
  quality: Quality,
  fetcher: Fetcher,
  signal: AbortSignal,
  o: PrepareOptions,
): Promise<Prepared> {
  // The header line's date and time: the moment of preparation, the same as on the cover.
  const now = o.now ?? new Date();
  const { inputs, documentPages, cover } = await inSpan(
    'fax.check',
    { attributes: { 'faxline.documents': docs.length } },
    async (span) => {
      const r = await checkDocuments(docs, fetcher, signal, { ...o, now });
      span?.setAttributes({ 'faxline.document_pages': r.documentPages, 'faxline.cover': r.cover !== null });
      return r;
    },
  );
  const header = headerLineOf(o.cover, now);
  const fax = await inSpan('fax.render', { attributes: { 'faxline.quality': quality } }, async (span) => {
    const f = await renderFax(o.pool, inputs, quality, signal, {
      ...(o.accountId !== undefined ? { accountId: o.accountId } : {}),
      header,
    });
    span?.setAttributes({ 'faxline.pages': f.pageCount, 'faxline.tiff_bytes': f.tiff.length });
    return f;
  });
  return { pageCount: fax.pageCount, pageBytes: fax.pageBytes, tiff: fax.tiff, cover, documentPages };
}

export interface PreparableJob extends CoverJob {
  id: string;
  source_job_id: string | null;
  fax_quality: Quality;
  /** Set for a broadcast recipient's job: its document pages are shared with the other recipients. */
  broadcast_id?: string | null;
}

/**
 * Prepares a stored job end to end: its documents (a forward uses the original job's), its cover
 * from its own Fax Default or Smart Template, the render, and the stored result (fax_renders) that
 * any worker process can transmit.
 */
export async function prepareJob(
  db: Queryable,
  job: PreparableJob,
  fetcher: Fetcher,
  signal: AbortSignal,
  o: Omit<PrepareOptions, 'cover'>,
): Promise<Prepared> {
  const store = o.documents ?? new PgDocumentStore(db);
  const docsJobId = job.source_job_id ?? job.id;
  // The documents' bytes are read only when they are checked and rendered: a repeated send (or a
  // broadcast recipient after the first) finds their pages by the stored digests alone.
  const listed = await store.list(docsJobId);
  let loaded: Promise<StoredDocument[]> | undefined;
  const load = () => (loaded ??= store.get(docsJobId));
  const cover = await loadCoverContext(db, job);
  const po: PrepareOptions = {
    ...o,
    accountId: job.account_id,
    cover,
    // Keeps what was fetched, so a forward or a second preparation sends these very bytes.
    onFetched: async (i, bytes) => store.keepFetched((await load())[i]!.id, bytes),
  };
  // A header line puts this fax's own values (its number and name, the time, page n of m) on every
  // page, so its pages cannot be another fax's: rendered for it alone.
  const ownHeader = headerLineOf(cover, new Date()) !== null;
  let key: RenderKey | null = null;
  if (job.broadcast_id) {
    if (o.shared && ownHeader) o.onShared?.('own_header');
    if (o.shared && !ownHeader)
      key = { jobId: docsJobId, accountId: job.account_id, quality: job.fax_quality };
  } else if (o.shared) {
    // The same documents sent again by this account: their pages as rendered for the last such send.
    // The limits a check applies are in the key; how many checks run at once and at what priority
    // are not (they differ between replicas and change no outcome).
    const pdf = Object.fromEntries(
      Object.entries(o.checks.pdf.limits ?? {}).filter(([k]) => k !== 'concurrency' && k !== 'lowerHeavy'),
    );
    const limits = { fax: o.checks.faxLimits, pdf };
    const contentKey = repeatKey(listed, limits) ?? repeatKey(await load(), limits);
    if (contentKey && ownHeader) o.onRepeat?.('own_header');
    if (contentKey && !ownHeader)
      key = { jobId: docsJobId, accountId: job.account_id, quality: job.fax_quality, contentKey };
  }
  const p =
    key && o.shared
      ? await prepareShared(o.shared, key, { count: listed.length, load }, fetcher, signal, po)
      : await prepareDocuments(await load(), job.fax_quality, fetcher, signal, po);
  await saveRender(db, job.account_id, {
    jobId: job.id,
    quality: job.fax_quality,
    pageCount: p.pageCount,
    pageBytes: p.pageBytes,
    cover: p.cover?.values ?? null,
    tiff: p.tiff,
  });
  return p;
}

/**
 * A fax whose document pages are shared: a broadcast recipient's (the pages of the broadcast's
 * shared render, checked and rendered by the first of its recipients to be prepared, at this
 * quality) or a repeated send's (the pages of the account's last send of the same documents); and
 * this fax's own cover page rendered in front of them.
 */
async function prepareShared(
  shared: SharedRenders,
  key: RenderKey,
  docs: { count: number; load: () => Promise<DocumentSource[]> },
  fetcher: Fetcher,
  signal: AbortSignal,
  o: PrepareOptions,
): Promise<Prepared> {
  const accountId = key.accountId;
  const account = { accountId };
  const quality = key.quality;
  // fax.check covers getting the document pages: checked and rendered here (then stored), or read
  // as stored (faxline.pages_reused); and the cover built. fax.render covers the cover's render.
  const { body, cover } = await inSpan(
    'fax.check',
    {
      attributes: {
        'faxline.documents': docs.count,
        'faxline.shared': key.contentKey ? 'repeat' : 'broadcast',
      },
    },
    async (span) => {
      const b = await shared.once(
        key,
        async () => {
          const checked = await checkDocuments(await docs.load(), fetcher, signal, { ...o, cover: null });
          const r = await renderPages(o.pool, checked.inputs, quality, signal, account);
          return { documentPages: checked.documentPages, pages: r.pages };
        },
        signal,
      );
      // The same cover as a single send builds (total page count, time, filler), rendered alone.
      const c = o.cover
        ? await buildCover(o.cover, b.documentPages, o.now ?? new Date(), {
            filler: o.checks.pdf,
            signal,
            accountId,
          })
        : null;
      span?.setAttributes({
        'faxline.document_pages': b.documentPages,
        'faxline.pages_reused': b.reused,
        'faxline.cover': c !== null,
      });
      return { body: b, cover: c };
    },
  );
  (key.contentKey ? o.onRepeat : o.onShared)?.(body.reused ? 'reused' : 'rendered');
  return inSpan('fax.render', { attributes: { 'faxline.quality': quality } }, async (span) => {
    const coverRender = cover
      ? await renderPages(o.pool, [coverInput(cover)], quality, signal, account)
      : { pages: [], renderMs: 0 };
    const fax = assembleFax([...coverRender.pages, ...body.pages], quality, coverRender.renderMs);
    span?.setAttributes({ 'faxline.pages': fax.pageCount, 'faxline.tiff_bytes': fax.tiff.length });
    return {
      pageCount: fax.pageCount,
      pageBytes: fax.pageBytes,
      tiff: fax.tiff,
      cover,
      documentPages: body.documentPages,
    };
  });
}
