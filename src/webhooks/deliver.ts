// Webhook delivery: claims due deliveries with a lease (so a crashed deliverer's work comes back),
// posts each payload signed as Standard Webhooks describes, records the attempt, and schedules the
// next one with exponential back-off. Deliveries of one job to one endpoint go out in order.
//
// Fair between accounts (issue 16, finding 4): a deliverer has `concurrency` slots and gives each
// account at most `accountConcurrency` of them. Each claim takes the oldest due deliveries of every
// account that has some, at most its free share, and fills free slots round-robin (every account's
// oldest before any account's second), so slow receivers of one account hold only that account's
// share and everyone else's deliveries go out at once. Attempts run independently: a slot is free
// again as soon as its own attempt ends, not when a whole batch has.
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { openText } from '../db/encryption.ts';
import type { Pool } from '../db/pool.ts';
import { webhookSecretContext } from '../db/sealed-columns.ts';
import type { Logger } from '../log.ts';
import { AddressRefused, type AddressCheck } from './address.ts';
import { endpointPauseSeconds, nextAttemptAt, type RetryPolicy } from './backoff.ts';
import { PollLoop } from '../poll-loop.ts';
import { inSpan } from '../trace.ts';

export interface DeliveryResult {
  ok: boolean;
  status: number | null;
  /** What the customer reads in the delivery log: generic, never an address or internal name. */
  error: string | null;
  /** The full story for the server log (resolver and socket errors, addresses). */
  detail: string | null;
  durationMs: number;
  /** The attempt was cut short by the deliverer's own shutdown: hand it back, record nothing. */
  interrupted?: boolean;
}

/**
 * The customer-facing words for a failed connection. Node's own messages carry the address
 * (`connect ECONNREFUSED 10.0.0.7:8080`) and the resolver's the host name, so only the error code
 * chooses the words; the message goes to the log.
 */
export function publicNetworkError(err: Error & { code?: unknown }): string {
  const code = typeof err.code === 'string' ? err.code : '';
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'ECONNRESET' || code === 'EPIPE') return 'connection reset';
  if (code === 'ETIMEDOUT' || code === 'ESOCKETTIMEDOUT') return 'timed out';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_FAIL' || code === 'EAI_NONAME')
    return 'DNS lookup failed';
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH' || code === 'EHOSTDOWN' || code === 'ENETDOWN')
    return 'host unreachable';
  if (code.startsWith('ERR_TLS') || code.startsWith('CERT_') || code.includes('SSL') || code.includes('CERT'))
    return 'TLS handshake failed';
  if (code === 'HPE_INVALID_CONSTANT' || code.startsWith('HPE_')) return 'invalid HTTP response';
  return 'connection failed';
}

/** One signed POST. Never follows redirects; connects only to the address the check approved. */
export async function postSigned(
  url: string,
  secret: string,
  msgId: string,
  body: string,
  check: AddressCheck,
  timeoutMs: number,
  now: Date = new Date(),
  stop?: AbortSignal,
): Promise<DeliveryResult> {
  const started = Date.now();
  const done = (
    ok: boolean,
    status: number | null,
    error: string | null,
    detail = error,
  ): DeliveryResult => ({
    ok,
    status,
    error,
    detail,
    durationMs: Date.now() - started,
  });
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return done(false, null, 'invalid URL');
  }
  let pinned: { address: string; family: 4 | 6 };
  try {
    pinned = await check(u);
  } catch (err) {
    return err instanceof AddressRefused
      ? done(false, null, err.kind, err.detail)
      : done(false, null, 'address check failed', `address check failed: ${String(err)}`);
  }
  const signature = new Webhook(secret).sign(msgId, now, body);
  const lookupPinned: LookupFunction = (_host, opts, cb) => {
    if ((opts as { all?: boolean }).all)
      (cb as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [pinned]);
    else cb(null, pinned.address, pinned.family);
  };
  const mod = u.protocol === 'https:' ? https : http;
  const timeout = AbortSignal.timeout(timeoutMs);
  const signal = stop ? AbortSignal.any([timeout, stop]) : timeout;
  return new Promise<DeliveryResult>((resolve) => {
    const req = mod.request(
      u,
      {
        method: 'POST',
        lookup: lookupPinned,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'user-agent': 'faxline-webhooks/1',
          'webhook-id': msgId,
          'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
          'webhook-signature': signature,
        },
        signal,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        res.resume(); // the body is not used; drain it
        res.on('end', () =>
          resolve(
            status >= 200 && status < 300
              ? done(true, status, null)
              : done(false, status, `receiver answered HTTP ${status}`),
          ),
        );
        res.on('error', (err) => resolve(done(false, status, publicNetworkError(err), err.message)));
      },
    );
    req.on('error', (err) => {
      if (stop?.aborted && !timeout.aborted) {
        resolve({ ...done(false, null, null, 'deliverer stopping'), interrupted: true });
        return;
      }
      const timedOut = timeout.aborted || err.name === 'AbortError' || err.name === 'TimeoutError';
      const pinnedAt = `${pinned.address} for ${u.host}`;
      resolve(
        timedOut
          ? done(false, null, `timed out: no answer within ${timeoutMs} ms`, `${err.message} (${pinnedAt})`)
          : done(false, null, publicNetworkError(err), `${err.message} (${pinnedAt})`),
      );
    });
    req.end(body);
  });
}

interface Claimed {
  id: string;
  account_id: string;
  endpoint_id: string;
  event_id: string;
  payload: unknown;
  attempts: number;
  created_at: Date;
  url: string;
  secret: string;
}

export interface DelivererDeps {
  db: Pool;
  log: Logger;
  check: AddressCheck;
  timeoutMs: number;
  policy: RetryPolicy;
  /** Attempts in flight at once in this deliverer (default 50). */
  concurrency?: number;
  /** Of those, at most this many for one account (default 4). */
  accountConcurrency?: number;
  pollMs?: number;
  onAttempt?: (ok: boolean) => void;
}

// Claims due deliveries fairly. $1: free slots; $2: lease seconds; $3: per-account share;
// $4: {account_id: attempts already in flight here}. The recursive CTE walks the distinct accounts
// with pending deliveries through webhook_deliveries_account_due (migration 011) without reading
// their rows; per account, LATERAL takes the oldest due heads (no earlier pending delivery of the
// same job to the same endpoint), at most the account's free share; the outer ORDER BY deals them
// out round-robin: every account's first, then every account's second, … Deliveries of an endpoint
// whose circuit breaker is open (paused_until ahead) wait, whatever their own schedule says.
const CLAIM_SQL = `
WITH RECURSIVE accounts AS (
  (SELECT account_id FROM webhook_deliveries WHERE state = 'pending' ORDER BY account_id LIMIT 1)
  UNION ALL
  SELECT (SELECT x.account_id FROM webhook_deliveries x
           WHERE x.state = 'pending' AND x.account_id > a.account_id
           ORDER BY x.account_id LIMIT 1)
    FROM accounts a WHERE a.account_id IS NOT NULL
), picked AS (
  SELECT c.id FROM accounts a CROSS JOIN LATERAL (
    SELECT y.id, y.next_attempt_at, row_number() OVER (ORDER BY y.next_attempt_at, y.id) AS turn
      FROM (SELECT x.id, x.next_attempt_at FROM webhook_deliveries x
             WHERE x.account_id = a.account_id AND x.state = 'pending' AND x.next_attempt_at <= now()
               AND NOT EXISTS (
                 SELECT 1 FROM webhook_deliveries p
                  WHERE p.endpoint_id = x.endpoint_id AND p.job_id = x.job_id
                    AND p.state = 'pending' AND p.sequence < x.sequence)
               AND NOT EXISTS (
                 SELECT 1 FROM webhook_endpoints e WHERE e.id = x.endpoint_id AND e.paused_until > now())
             ORDER BY x.next_attempt_at, x.id
             LIMIT GREATEST(0, $3::int - COALESCE(($4::jsonb ->> a.account_id::text)::int, 0))
             FOR UPDATE SKIP LOCKED) y) c
   WHERE a.account_id IS NOT NULL
   ORDER BY c.turn, c.next_attempt_at, c.id
   LIMIT $1)
UPDATE webhook_deliveries d
   SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $2)
  FROM picked, webhook_endpoints w
 WHERE d.id = picked.id AND w.id = d.endpoint_id
RETURNING d.id, d.account_id, d.endpoint_id, d.event_id, d.payload, d.attempts, d.created_at, w.url, w.secret`;

export class WebhookDeliverer {
  private readonly d: DelivererDeps;
  private readonly log: Logger;
  private readonly loop: PollLoop;
  private readonly concurrency: number;
  private readonly accountConcurrency: number;
  /** Attempts in flight, and how many of them each account has. */
  private readonly inFlight = new Set<Promise<void>>();
  private readonly perAccount = new Map<string, number>();
  private readonly stopping = new AbortController();
  private stopped: Promise<void> | undefined;

  constructor(d: DelivererDeps) {
    this.d = d;
    this.log = d.log.child({ component: 'webhooks' });
    this.concurrency = d.concurrency ?? 50;
    this.accountConcurrency = Math.min(d.accountConcurrency ?? 4, this.concurrency);
    // While deliveries are due and slots are free it goes on at once; otherwise it polls (a slot
    // that frees up is filled at the next poll).
    this.loop = new PollLoop({
      pass: () => this.runOnce(),
      again: (n) => n > 0,
      // Idle: one look into the due index instead of the fair-share claim; none while no slot is free.
      probe: () => (this.inFlight.size >= this.concurrency ? Promise.resolve(false) : this.anyDue()),
      waitMs: () => d.pollMs ?? 250,
      onError: (err) => this.log.warn({ err: err.message }, 'webhook claim failed'),
    });
  }

  /** Attempts in flight now (all accounts). */
  get busy(): number {
    return this.inFlight.size;
  }

  /** Whether a pending delivery is due now (paused endpoints' too: the claim skips those). */
  async anyDue(): Promise<boolean> {
    const r = await this.d.db.query<{ due: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM webhook_deliveries
                       WHERE state = 'pending' AND next_attempt_at <= now()) AS due`,
    );
    return r.rows[0]?.due ?? true;
  }

  /** Claims due deliveries into the free slots and starts them; returns how many it started. */
  async runOnce(): Promise<number> {
    const free = this.concurrency - this.inFlight.size;
    if (free <= 0 || this.stopping.signal.aborted) return 0;
    const lease = Math.ceil(this.d.timeoutMs / 1000) + 30;
    const { rows } = await this.d.db.query<Claimed>(CLAIM_SQL, [
      free,
      lease,
      this.accountConcurrency,
      JSON.stringify(Object.fromEntries(this.perAccount)),
    ]);
    for (const r of rows) {
      this.perAccount.set(r.account_id, (this.perAccount.get(r.account_id) ?? 0) + 1);
      const p: Promise<void> = this.attempt(r)
        .catch((err: unknown) =>
          // The lease brings the delivery back; say why it did not end normally.
          this.log.warn({ deliveryId: r.id, err: (err as Error).message }, 'webhook attempt not recorded'),
        )
        .finally(() => {
          this.inFlight.delete(p);
          const n = (this.perAccount.get(r.account_id) ?? 1) - 1;
          if (n > 0) this.perAccount.set(r.account_id, n);
          else this.perAccount.delete(r.account_id);
        });
      this.inFlight.add(p);
    }
    return rows.length;
  }

  /** Resolves when every attempt started so far has ended (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  private async attempt(r: Claimed): Promise<void> {
    const secret = await openText(this.d.db, webhookSecretContext(r.account_id, r.endpoint_id), r.secret);
    // Ids, the attempt number and the answer's status: never the endpoint's URL.
    const res = await inSpan(
      'webhook.deliver',
      {
        attributes: {
          'faxline.delivery_id': r.id,
          'faxline.account_id': r.account_id,
          'faxline.endpoint_id': r.endpoint_id,
          'faxline.event_id': r.event_id,
          'faxline.attempt': r.attempts,
        },
      },
      async (span) => {
        const out = await postSigned(
          r.url,
          secret,
          r.event_id,
          JSON.stringify(r.payload),
          this.d.check,
          this.d.timeoutMs,
          new Date(),
          this.stopping.signal,
        );
        span?.setAttributes({
          'faxline.ok': out.ok,
          'http.response.status_code': out.status ?? 0,
          'faxline.duration_ms': out.durationMs,
        });
        return out;
      },
    );
    if (res.interrupted) {
      // Shutting down: hand the delivery back as it was, due at once for the next deliverer.
      await this.d.db.query(
        `UPDATE webhook_deliveries SET attempts = attempts - 1, next_attempt_at = now()
          WHERE id = $1 AND state = 'pending'`,
        [r.id],
      );
      this.log.info({ deliveryId: r.id, accountId: r.account_id }, 'webhook attempt handed back on shutdown');
      return;
    }
    this.d.onAttempt?.(res.ok);
    // A failure moves the breaker before the attempt is recorded: once recorded as pending, the
    // delivery can be claimed again, and a pause written after that could land behind the next
    // attempt's success.
    await this.breaker(r, res);
    const next = res.ok ? null : nextAttemptAt(new Date(), r.created_at, r.attempts, this.d.policy);
    const state = res.ok ? 'delivered' : next ? 'pending' : 'failed';
    await this.d.db.query(
      `WITH upd AS (
         UPDATE webhook_deliveries SET state = $2, last_status = $3, last_error = $4,
                next_attempt_at = COALESCE($5, next_attempt_at),
                delivered_at = CASE WHEN $2 = 'delivered' THEN now() END
          -- Fenced by the lease: a late writer (its lease ran out and another attempt took over)
          -- must not turn a delivered row back to pending.
          WHERE id = $1 AND state = 'pending' AND attempts = $6 RETURNING id),
       -- A 2xx closes the endpoint's breaker in the same statement, so nobody reads the delivery
       -- as delivered while its endpoint still shows a pause.
       closed AS (
         UPDATE webhook_endpoints SET failures_in_row = 0, paused_until = NULL
          WHERE $9 AND id = $8 AND (failures_in_row > 0 OR paused_until IS NOT NULL))
       INSERT INTO webhook_attempts (delivery_id, attempt, http_status, error, duration_ms)
       SELECT id, $6, $3, $4, $7 FROM upd`,
      [r.id, state, res.status, res.error, next, r.attempts, res.durationMs, r.endpoint_id, res.ok],
    );
    this.log.info(
      {
        deliveryId: r.id,
        accountId: r.account_id,
        endpointId: r.endpoint_id,
        eventId: r.event_id,
        attempt: r.attempts,
        ok: res.ok,
        status: res.status,
        state,
        durationMs: res.durationMs,
        ...(res.ok ? {} : { error: res.detail }),
      },
      res.ok ? 'webhook delivered' : 'webhook attempt failed',
    );
  }

  /**
   * Per-endpoint circuit breaker: an attempt without an HTTP answer counts, and from the
   * BREAKER_FAILURES-th in a row on the endpoint pauses (all its deliveries wait); any 2xx closes it.
   * An HTTP error answer (4xx/5xx) neither counts nor closes: it is quick and says the receiver lives.
   */
  private async breaker(r: Claimed, res: DeliveryResult): Promise<void> {
    // A 2xx closed it together with the outcome (record()); an HTTP error answer leaves it as it is.
    if (res.ok || res.status !== null) return;
    const { rows } = await this.d.db.query<{ failures_in_row: number }>(
      'UPDATE webhook_endpoints SET failures_in_row = failures_in_row + 1 WHERE id = $1 RETURNING failures_in_row',
      [r.endpoint_id],
    );
    const n = rows[0]?.failures_in_row ?? 0;
    const pause = endpointPauseSeconds(n, this.d.policy);
    if (pause === null) return;
    await this.d.db.query(
      `UPDATE webhook_endpoints SET paused_until = GREATEST(paused_until, now() + make_interval(secs => $2))
        WHERE id = $1`,
      [r.endpoint_id, pause],
    );
    this.log.warn(
      { endpointId: r.endpoint_id, accountId: r.account_id, failuresInRow: n, pauseSeconds: pause },
      'webhook endpoint paused: no answer several times in a row',
    );
  }

  start(): void {
    this.loop.start();
  }

  /** Stops claiming, cuts attempts in flight short and hands them back; twice: the same promise. */
  stop(): Promise<void> {
    this.stopped ??= (async () => {
      this.stopping.abort();
      await this.loop.stop();
      await this.idle();
    })();
    return this.stopped;
  }
}
