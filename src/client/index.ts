// faxline/client: a typed client for the customer API (docs/client.md). Built on the public HTTP
// contract only: its types are generated from /openapi.json (./openapi.ts, `npm run
// client:generate`) and it imports nothing else of the service, so it runs wherever fetch does.
//
// What it adds to plain typed calls (openapi-fetch, exposed as `client.api`):
// - the API key is exchanged for an access token (POST /v1/auth) on first use, and again before the
//   token expires or when a request answers 401 (expired, revoked);
// - 429 and 503 are retried, waiting for Retry-After (bounded) or an exponential back-off; both mean
//   that nothing was accepted, so a retried send cannot fax twice (and sends carry an Idempotency-Key);
// - a request that got no answer (connection refused or reset) is retried the same way when repeating
//   it is harmless: idempotent methods, the token request, anything with an Idempotency-Key;
// - sends get an Idempotency-Key unless the caller gives one;
// - lists are iterated page by page with their cursors;
// - refusals throw FaxlineError with the envelope's status, message, data and the field it names.
import { randomUUID } from 'node:crypto';
import createClient, { type Client } from 'openapi-fetch';
import type { operations, paths } from './openapi.ts';

export type { paths, operations } from './openapi.ts';

type JsonBody<Op> = Op extends { requestBody: { content: { 'application/json': infer B } } } ? B : never;
type Ok<Op> = Op extends { responses: { 200: { content: { 'application/json': infer R } } } } ? R : never;
type Query<Op> = Op extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;
type Item<Op> = Ok<Op> extends { data: (infer I)[] } ? I : never;

export type SendRequest = JsonBody<operations['postV1FaxesSend']>;
export type SendResult = Ok<operations['postV1FaxesSend']>['data'];
export type Fax = Ok<operations['getV1FaxesJobId']>['data'];
export type FaxState = Fax['state'];
export type FaxListItem = Item<operations['getV1Faxes']>;
export type FaxListQuery = Omit<Query<operations['getV1Faxes']>, 'cursor'>;
export type ReceivedFax = Ok<operations['getV1ReceivedFaxesId']>['data'];
export type ReceivedFaxListItem = Item<operations['getV1ReceivedFaxes']>;
export type ReceivedFaxListQuery = Omit<Query<operations['getV1ReceivedFaxes']>, 'cursor'>;
export type Broadcast = Ok<operations['getV1BroadcastsBroadcastId']>['data'];

/** States a fax does not leave. */
export const finalStates: readonly FaxState[] = ['delivered', 'failed', 'cancelled', 'rejected'];

/** The envelope every answer of the API carries. */
export interface Envelope {
  status: number;
  message: string;
  data?: unknown;
}

/** A refusal of the API (or no answer at all: `http` 0), with the envelope's message. */
export class FaxlineError extends Error {
  override readonly name = 'FaxlineError';
  /** The HTTP status; 0 when the service could not be reached. */
  readonly http: number;
  /** The envelope's `status` (0 refused, 401 token refused); -1 when there was no envelope. */
  readonly status: number;
  /** The envelope's `data` (e.g. `{retry_after}` of a 429, `code` of a PDF check), if any. */
  readonly data: unknown;
  /** The request field the message names (`fax_number`, `fax_data[0]`), when it names one. */
  readonly field: string | undefined;
  /** Every `field: reason` the message lists (validation joins up to five with "; "). */
  readonly issues: { field: string | undefined; reason: string }[];
  /** The request id the service logged the request under (X-Request-Id), when it answered. */
  readonly requestId: string | undefined;

  constructor(http: number, body: Envelope, requestId?: string, options?: { cause?: unknown }) {
    super(body.message, options);
    this.http = http;
    this.status = body.status;
    this.data = body.data;
    this.requestId = requestId;
    this.issues = parseIssues(body.message);
    this.field = this.issues[0]?.field;
  }

  /** The service answered 401: the API key or the access token was refused. */
  get isAuth(): boolean {
    return this.http === 401;
  }
}

const FIELD = /^([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\]|\.[A-Za-z_][A-Za-z0-9_]*)*|Idempotency-Key): (.+)$/s;

/** "fax_number: must be …; fax_data[0]: give either …" → the fields and reasons, in order. */
function parseIssues(message: string): { field: string | undefined; reason: string }[] {
  const parts = message.split('; ');
  const issues = parts.map((p) => {
    const m = FIELD.exec(p);
    return m ? { field: m[1], reason: m[2]! } : null;
  });
  // A message is a list of issues only when every part names a field; else it is one sentence.
  if (issues.every((i) => i !== null)) return issues;
  return [{ field: undefined, reason: message }];
}

export interface RetryInfo {
  attempt: number;
  /** The status that is retried; 0 when the request got no answer (refused, reset). */
  http: number;
  delayMs: number;
  method: string;
  path: string;
}

export interface FaxlineClientOptions {
  /** The service's base address, e.g. `http://localhost:8080`. */
  baseUrl: string;
  /** An API key (`fxl_key_…`): exchanged for access tokens, never sent elsewhere. */
  apiKey: string;
  /**
   * Retries of a request answered 429 or 503, or of a repeatable request that got no answer (default
   * 4; 0 = none).
   */
  retries?: number;
  /** Longest wait before one retry, whatever Retry-After says (default 30 s). */
  maxRetryDelayMs?: number;
  /** First back-off when no Retry-After is given (default 500 ms; doubles each retry, with jitter). */
  retryBaseDelayMs?: number;
  /** Renew the token this long before it expires (default 5 minutes, at most a tenth of its life). */
  refreshBeforeExpiryMs?: number;
  /** Called before each retry (logging, progress). */
  onRetry?: (info: RetryInfo) => void;
  /** Replaces global fetch (tests, proxies). */
  fetch?: (input: Request) => Promise<Response>;
  /** Replaces Date.now (tests of token expiry). */
  now?: () => number;
}

interface Token {
  value: string;
  /** When to get a new one (ms since the epoch). */
  renewAt: number;
}

const RETRIED = new Set([429, 503]);

/**
 * Whether a request that got no answer may be sent again: reads and the other idempotent methods,
 * the token request, and any request with an Idempotency-Key (the service answers a repeat with the
 * first answer). Any other POST may have been carried out; it is not repeated, the caller is told.
 */
function repeatable(request: Request, headers: Headers): boolean {
  if (['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE'].includes(request.method)) return true;
  return new URL(request.url).pathname === '/v1/auth' || headers.has('idempotency-key');
}

export class FaxlineClient {
  /** Every endpoint, typed from the contract, with token handling and retries (openapi-fetch). */
  readonly api: Client<paths>;
  private readonly o: Required<Omit<FaxlineClientOptions, 'onRetry' | 'fetch'>> & {
    onRetry: FaxlineClientOptions['onRetry'] | undefined;
  };
  private readonly fetchImpl: (input: Request) => Promise<Response>;
  private token: Promise<Token> | undefined;

  constructor(options: FaxlineClientOptions) {
    if (!options.baseUrl) throw new TypeError('FaxlineClient: baseUrl is required');
    if (!options.apiKey) throw new TypeError('FaxlineClient: apiKey is required');
    this.o = {
      baseUrl: options.baseUrl.replace(/\/+$/, ''),
      apiKey: options.apiKey,
      retries: options.retries ?? 4,
      maxRetryDelayMs: options.maxRetryDelayMs ?? 30_000,
      retryBaseDelayMs: options.retryBaseDelayMs ?? 500,
      refreshBeforeExpiryMs: options.refreshBeforeExpiryMs ?? 300_000,
      now: options.now ?? Date.now,
      onRetry: options.onRetry,
    };
    this.fetchImpl = options.fetch ?? ((r) => fetch(r));
    this.api = createClient<paths>({ baseUrl: this.o.baseUrl, fetch: (r) => this.send(r) });
  }

  // ---- transport -------------------------------------------------------------------------------

  /** One request: the token added, 401 answered once with a fresh token, 429/503 retried (bounded). */
  private async send(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const isAuth = url.pathname === '/v1/auth';
    const body = request.body ? await request.arrayBuffer() : undefined;
    let renewed = false;
    for (let attempt = 0; ; attempt++) {
      const headers = new Headers(request.headers);
      let token: Token | undefined;
      if (!isAuth) {
        token = await this.currentToken();
        headers.set('authorization', `Bearer ${token.value}`);
      }
      let res: Response;
      try {
        res = await this.fetchImpl(
          new Request(request.url, {
            method: request.method,
            headers,
            signal: request.signal,
            ...(body !== undefined ? { body } : {}),
          }),
        );
      } catch (err) {
        // No answer at all: refused, reset (a kept-alive connection the server closed just as it was
        // reused), or timed out. Sent again only when sending it twice cannot do anything twice.
        if (!request.signal.aborted && repeatable(request, headers) && attempt < this.o.retries) {
          const delayMs = this.retryDelay(null, attempt);
          this.o.onRetry?.({
            attempt: attempt + 1,
            http: 0,
            delayMs,
            method: request.method,
            path: url.pathname,
          });
          await sleep(delayMs, request.signal);
          continue;
        }
        throw new FaxlineError(
          0,
          {
            status: -1,
            message: `cannot reach ${this.o.baseUrl}: ${(err as Error).cause ? String((err as Error & { cause: unknown }).cause) : (err as Error).message}`,
          },
          undefined,
          { cause: err },
        );
      }
      if (res.status === 401 && !isAuth && !renewed && token) {
        // Expired or revoked since we got it: one new token, then the answer stands.
        renewed = true;
        await this.forgetToken(token);
        await res.body?.cancel();
        continue;
      }
      if (RETRIED.has(res.status) && attempt < this.o.retries) {
        const delayMs = this.retryDelay(res, attempt);
        this.o.onRetry?.({
          attempt: attempt + 1,
          http: res.status,
          delayMs,
          method: request.method,
          path: url.pathname,
        });
        await res.body?.cancel();
        await sleep(delayMs, request.signal);
        continue;
      }
      return res;
    }
  }

  private retryDelay(res: Response | null, attempt: number): number {
    const header = res?.headers.get('retry-after') ?? null;
    let ms: number | undefined;
    if (header !== null) {
      const s = Number(header);
      if (Number.isFinite(s) && s >= 0) ms = s * 1000;
      else {
        const at = Date.parse(header);
        if (!Number.isNaN(at)) ms = Math.max(0, at - this.o.now());
      }
    }
    if (ms === undefined) {
      const base = this.o.retryBaseDelayMs * 2 ** attempt;
      ms = base / 2 + Math.random() * (base / 2);
    }
    return Math.min(ms, this.o.maxRetryDelayMs);
  }

  /** The token to use: the current one, or a new one when there is none or it is due for renewal. */
  private async currentToken(): Promise<Token> {
    const p = this.token;
    if (p) {
      const tok = await p.catch(() => undefined);
      if (tok && tok.renewAt > this.o.now()) return tok;
      // Several requests may find it due at once: the first replaces it, the others share that.
      if (this.token !== p) return this.currentToken();
    }
    const fresh = this.authenticate();
    this.token = fresh;
    fresh.catch(() => {
      if (this.token === fresh) this.token = undefined;
    });
    return fresh;
  }

  /** A token the service refused (401): drop it unless another request already replaced it. */
  private async forgetToken(tok: Token): Promise<void> {
    const p = this.token;
    if (p && (await p.catch(() => undefined)) === tok && this.token === p) this.token = undefined;
  }

  private async authenticate(): Promise<Token> {
    const r = await this.api.POST('/v1/auth', { body: { api_secret_key: this.o.apiKey } });
    const data = this.unwrap(r).data;
    const lifeMs = data.expires_in * 1000;
    const margin = Math.min(this.o.refreshBeforeExpiryMs, lifeMs / 10);
    return { value: data.access_token, renewAt: this.o.now() + lifeMs - margin };
  }

  /** The success body of an openapi-fetch answer, or a FaxlineError with its envelope. */
  private unwrap<T>(r: { data?: T; error?: unknown; response: Response }): T {
    if (r.response.ok && r.data !== undefined) return r.data;
    throw errorOf(r.response, r.error);
  }

  /** A binary download (PDF, TIFF) as a web stream, or a FaxlineError. */
  private async download(
    r: Promise<{ data?: unknown; error?: unknown; response: Response }>,
  ): Promise<Download> {
    const res = await r;
    if (!res.response.ok || !res.response.body) {
      throw errorOf(res.response, res.error ?? (await envelopeOf(res.response)));
    }
    return {
      body: res.response.body,
      contentType: res.response.headers.get('content-type') ?? 'application/octet-stream',
      fileName: fileNameOf(res.response.headers.get('content-disposition')),
    };
  }

  /** A valid access token (fetched or renewed as needed), e.g. for a request this client has no method for. */
  async accessToken(): Promise<string> {
    return (await this.currentToken()).value;
  }

  // ---- faxes -----------------------------------------------------------------------------------

  /**
   * Sends a fax (`fax_number`) or a broadcast (`recipients`). An Idempotency-Key is generated when
   * none is given, so the client's own retries never send twice; give your own to make retries of
   * your process safe too (the same key and body answer the first answer again).
   */
  async sendFax(
    body: SendRequest,
    o: { idempotencyKey?: string } = {},
  ): Promise<SendResult & { idempotency_key: string }> {
    const key = o.idempotencyKey ?? randomUUID();
    const r = await this.api.POST('/v1/faxes/send', {
      body,
      params: { header: { 'Idempotency-Key': key } },
    });
    return { ...this.unwrap(r).data, idempotency_key: key };
  }

  async getFax(jobId: string): Promise<Fax> {
    return this.unwrap(await this.api.GET('/v1/faxes/{job_id}', { params: { path: { job_id: jobId } } }))
      .data;
  }

  /** Every fax matching `query`, newest first, page by page (`limit` is the page size). */
  faxes(query: FaxListQuery = {}): AsyncGenerator<FaxListItem> {
    return this.paginate((cursor) =>
      this.api.GET('/v1/faxes', { params: { query: { ...query, ...(cursor ? { cursor } : {}) } } }),
    );
  }

  /** Cancels a fax that is not sent yet (scheduled or awaiting approval). */
  async cancelFax(jobId: string): Promise<Envelope> {
    return this.unwrap(await this.api.POST('/v1/faxes/cancel-schedule', { body: { job_id: jobId } }));
  }

  async getBroadcast(broadcastId: string): Promise<Broadcast> {
    const r = await this.api.GET('/v1/broadcasts/{broadcast_id}', {
      params: { path: { broadcast_id: broadcastId } },
    });
    return this.unwrap(r).data;
  }

  /** The transmission report (PDF) of a finished fax. */
  report(jobId: string): Promise<Download> {
    return this.download(
      this.api.GET('/v1/faxes/{job_id}/report', { params: { path: { job_id: jobId } }, parseAs: 'stream' }),
    );
  }

  /** The image of a finished fax as transmitted. */
  image(jobId: string, format: 'pdf' | 'tiff' = 'pdf'): Promise<Download> {
    return this.download(
      this.api.GET('/v1/faxes/{job_id}/image', {
        params: { path: { job_id: jobId }, query: { format } },
        parseAs: 'stream',
      }),
    );
  }

  // ---- received faxes --------------------------------------------------------------------------

  /** Every received fax matching `query`, newest first (`read: 'false'` for the unread ones). */
  receivedFaxes(query: ReceivedFaxListQuery = {}): AsyncGenerator<ReceivedFaxListItem> {
    return this.paginate((cursor) =>
      this.api.GET('/v1/received-faxes', { params: { query: { ...query, ...(cursor ? { cursor } : {}) } } }),
    );
  }

  async getReceivedFax(id: string): Promise<ReceivedFax> {
    return this.unwrap(await this.api.GET('/v1/received-faxes/{id}', { params: { path: { id } } })).data;
  }

  async markReceivedFax(id: string, read: boolean): Promise<ReceivedFax> {
    const r = await this.api.PATCH('/v1/received-faxes/{id}', { params: { path: { id } }, body: { read } });
    return this.unwrap(r).data;
  }

  /** A received fax's pages as a PDF (or the TIFF the fax engine wrote). */
  receivedFile(id: string, format: 'pdf' | 'tiff' = 'pdf'): Promise<Download> {
    const o = { params: { path: { id } }, parseAs: 'stream' } as const;
    return this.download(
      format === 'pdf'
        ? this.api.GET('/v1/received-faxes/{id}/pdf', o)
        : this.api.GET('/v1/received-faxes/{id}/tiff', o),
    );
  }

  // ---- lists -----------------------------------------------------------------------------------

  /** Follows `meta.next_cursor` until `has_more` is false; at most `maxPages` pages (default 10,000). */
  async *paginate<I>(
    page: (cursor: string | undefined) => Promise<{
      data?: { data: I[]; meta: { next_cursor: string | null; has_more: boolean } };
      error?: unknown;
      response: Response;
    }>,
    maxPages = 10_000,
  ): AsyncGenerator<I> {
    let cursor: string | undefined;
    for (let n = 0; n < maxPages; n++) {
      const body = this.unwrap(await page(cursor));
      yield* body.data;
      if (!body.meta.has_more || !body.meta.next_cursor) return;
      cursor = body.meta.next_cursor;
    }
  }
}

export interface Download {
  body: ReadableStream<Uint8Array>;
  contentType: string;
  /** The file name the service suggests (Content-Disposition), if any. */
  fileName: string | undefined;
}

function errorOf(res: Response, error: unknown): FaxlineError {
  const e = error as Partial<Envelope> | undefined;
  const body: Envelope =
    e && typeof e === 'object' && typeof e.message === 'string'
      ? { status: typeof e.status === 'number' ? e.status : -1, message: e.message, data: e.data }
      : { status: -1, message: `HTTP ${res.status} ${res.statusText}`.trim() };
  return new FaxlineError(res.status, body, res.headers.get('x-request-id') ?? undefined);
}

async function envelopeOf(res: Response): Promise<unknown> {
  try {
    return JSON.parse(await res.text());
  } catch {
    return undefined;
  }
}

function fileNameOf(disposition: string | null): string | undefined {
  const m = disposition ? /filename="([^"]+)"/.exec(disposition) : null;
  return m?.[1];
}

function sleep(ms: number, signal: AbortSignal | null): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
