// Webhook delivery: claims due deliveries with a lease (so a crashed deliverer's work comes back),
// posts each payload signed as Standard Webhooks describes, records the attempt, and schedules the
// next one with exponential back-off. Deliveries of one job to one endpoint go out in order.
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { Webhook } from 'standardwebhooks';
import type { Pool } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import { AddressRefused, type AddressCheck } from './address.ts';
import { nextAttemptAt, type RetryPolicy } from './backoff.ts';
import { PollLoop } from '../poll-loop.ts';

export interface DeliveryResult {
  ok: boolean;
  status: number | null;
  error: string | null;
  durationMs: number;
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
): Promise<DeliveryResult> {
  const started = Date.now();
  const done = (ok: boolean, status: number | null, error: string | null): DeliveryResult => ({
    ok,
    status,
    error,
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
    return done(
      false,
      null,
      err instanceof AddressRefused ? err.message : `address check failed: ${String(err)}`,
    );
  }
  const signature = new Webhook(secret).sign(msgId, now, body);
  const lookupPinned: LookupFunction = (_host, opts, cb) => {
    if ((opts as { all?: boolean }).all)
      (cb as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [pinned]);
    else cb(null, pinned.address, pinned.family);
  };
  const mod = u.protocol === 'https:' ? https : http;
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
        signal: AbortSignal.timeout(timeoutMs),
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
        res.on('error', (err) => resolve(done(false, status, err.message)));
      },
    );
    req.on('error', (err) => {
      const timedOut = err.name === 'AbortError' || err.name === 'TimeoutError';
      resolve(done(false, null, timedOut ? `no answer within ${timeoutMs} ms` : err.message));
    });
    req.end(body);
  });
}

interface Claimed {
  id: string;
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
  batchSize?: number;
  pollMs?: number;
  onAttempt?: (ok: boolean) => void;
}

export class WebhookDeliverer {
  private readonly d: DelivererDeps;
  private readonly log: Logger;
  private readonly loop: PollLoop;

  constructor(d: DelivererDeps) {
    this.d = d;
    this.log = d.log.child({ component: 'webhooks' });
    // While deliveries are due it goes on at once; otherwise it polls.
    this.loop = new PollLoop({
      pass: () => this.runOnce(),
      again: (n) => n > 0,
      waitMs: () => d.pollMs ?? 250,
      onError: (err) => this.log.warn({ err: err.message }, 'webhook batch failed'),
    });
  }

  /** Claims and attempts one batch of due deliveries; returns how many were attempted. */
  async runOnce(): Promise<number> {
    const lease = Math.ceil(this.d.timeoutMs / 1000) + 30;
    const { rows } = await this.d.db.query<Claimed>(
      `UPDATE webhook_deliveries d
          SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $2)
         FROM webhook_endpoints w
        WHERE w.id = d.endpoint_id AND d.id IN (
          SELECT x.id FROM webhook_deliveries x
           WHERE x.state = 'pending' AND x.next_attempt_at <= now()
             AND NOT EXISTS (
               SELECT 1 FROM webhook_deliveries p
                WHERE p.endpoint_id = x.endpoint_id AND p.job_id = x.job_id
                  AND p.state = 'pending' AND p.sequence < x.sequence)
           ORDER BY x.next_attempt_at, x.id
           LIMIT $1
           FOR UPDATE SKIP LOCKED)
       RETURNING d.id, d.event_id, d.payload, d.attempts, d.created_at, w.url, w.secret`,
      [this.d.batchSize ?? 50, lease],
    );
    await Promise.all(rows.map((r) => this.attempt(r)));
    return rows.length;
  }

  private async attempt(r: Claimed): Promise<void> {
    const res = await postSigned(
      r.url,
      r.secret,
      r.event_id,
      JSON.stringify(r.payload),
      this.d.check,
      this.d.timeoutMs,
    );
    this.d.onAttempt?.(res.ok);
    const next = res.ok ? null : nextAttemptAt(new Date(), r.created_at, r.attempts, this.d.policy);
    const state = res.ok ? 'delivered' : next ? 'pending' : 'failed';
    await this.d.db.query(
      `WITH upd AS (
         UPDATE webhook_deliveries SET state = $2, last_status = $3, last_error = $4,
                next_attempt_at = COALESCE($5, next_attempt_at),
                delivered_at = CASE WHEN $2 = 'delivered' THEN now() END
          WHERE id = $1 RETURNING id)
       INSERT INTO webhook_attempts (delivery_id, attempt, http_status, error, duration_ms)
       SELECT id, $6, $3, $4, $7 FROM upd`,
      [r.id, state, res.status, res.error, next, r.attempts, res.durationMs],
    );
    this.log.info(
      { deliveryId: r.id, eventId: r.event_id, attempt: r.attempts, ok: res.ok, status: res.status, state },
      res.ok ? 'webhook delivered' : 'webhook attempt failed',
    );
  }

  start(): void {
    this.loop.start();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
  }
}
