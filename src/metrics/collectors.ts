// Gauges computed when Prometheus scrapes: values that live in PostgreSQL (jobs by state, the
// outbox, scheduled faxes) or in this process's connections. The database read (three queries) is
// shared by all gauges of a scrape and cached for `cacheMs` (METRICS_DB_SECONDS), so several
// scrapers, or a dashboard hammering /metrics, cost one read per window.
import client from 'prom-client';
import type { Queryable } from '../db/pool.ts';
import { jobStates, terminalStates, type JobState } from '../domain/states.ts';
import type { Metrics } from './registry.ts';

/** States a job waits in: the backlog. Terminal states are counted by faxline_job_transitions_total. */
export const openStates: readonly JobState[] = jobStates.filter((s) => !terminalStates.has(s));

export interface CollectorDeps {
  db: Queryable & { totalCount?: number; idleCount?: number; waitingCount?: number };
  broker: { isConnected: boolean; consumersAttached: number; consumersRegistered: number };
  /**
   * Export the service-wide gauges read from PostgreSQL (jobs by state, outbox, scheduled). Every
   * process that does reports the same values; recording rules take max() across them.
   */
  databaseGauges: boolean;
  cacheMs?: number;
}

interface JobCounts {
  byState: Map<string, { n: number; oldest: number }>;
  scheduledOverdue: number;
  scheduledOverdueSeconds: number;
  outboxPending: number;
  outboxOldest: number;
}

/** One read of everything the database gauges show. */
export async function readJobCounts(db: Queryable): Promise<JobCounts> {
  const states = await db.query<{ state: string; n: string; oldest: number | null }>(
    `SELECT state, count(*) AS n, extract(epoch FROM now() - min(updated_at))::float8 AS oldest
       FROM fax_jobs WHERE state = ANY($1::text[]) GROUP BY state`,
    [openStates],
  );
  const sched = await db.query<{ n: string; overdue: number | null }>(
    `SELECT count(*) AS n, extract(epoch FROM now() - min(scheduled_at))::float8 AS overdue
       FROM fax_jobs WHERE state = 'scheduled' AND scheduled_at < now()`,
  );
  // The outbox: accepted jobs whose command publish has not been confirmed: jobs not marked
  // dispatched (the partial index fax_jobs_undispatched serves this) and the jobs of intake lots
  // (not those of lots a send worker parked: they wait on purpose).
  const outbox = await db.query<{ n: string; oldest: number | null }>(
    `SELECT sum(n) AS n, extract(epoch FROM now() - min(oldest))::float8 AS oldest FROM (
       SELECT count(*) AS n, min(created_at) AS oldest
         FROM fax_jobs WHERE dispatched_at IS NULL AND state = 'accepted'
       UNION ALL
       SELECT coalesce(sum(cardinality(job_ids)), 0), min(created_at) FROM intake_lots WHERE NOT parked) AS x`,
  );
  const byState = new Map<string, { n: number; oldest: number }>();
  for (const r of states.rows) byState.set(r.state, { n: Number(r.n), oldest: Math.max(0, r.oldest ?? 0) });
  return {
    byState,
    scheduledOverdue: Number(sched.rows[0]?.n ?? 0),
    scheduledOverdueSeconds: Math.max(0, sched.rows[0]?.overdue ?? 0),
    outboxPending: Number(outbox.rows[0]?.n ?? 0),
    outboxOldest: Math.max(0, outbox.rows[0]?.oldest ?? 0),
  };
}

/** Registers the scrape-time gauges on `metrics.registry`. */
export function attachCollectors(metrics: Metrics, d: CollectorDeps): void {
  if (!metrics.enabled) return;
  const registers = [metrics.registry];

  const pool = d.db;
  new client.Gauge({
    name: 'faxline_db_pool_connections',
    help: 'PostgreSQL pool connections of this process: total open, idle, and requests waiting for one.',
    labelNames: ['state'] as const,
    registers,
    collect() {
      this.set({ state: 'total' }, pool.totalCount ?? 0);
      this.set({ state: 'idle' }, pool.idleCount ?? 0);
      this.set({ state: 'waiting' }, pool.waitingCount ?? 0);
    },
  });
  new client.Gauge({
    name: 'faxline_amqp_connected',
    help: '1 when this process has a working RabbitMQ connection and publish channel, else 0.',
    registers,
    collect() {
      this.set(d.broker.isConnected ? 1 : 0);
    },
  });
  new client.Gauge({
    name: 'faxline_amqp_consumers',
    help: 'RabbitMQ consumers of this process: registered, and attached to their queue right now.',
    labelNames: ['status'] as const,
    registers,
    collect() {
      this.set({ status: 'registered' }, d.broker.consumersRegistered);
      this.set({ status: 'attached' }, d.broker.consumersAttached);
    },
  });

  if (!d.databaseGauges) return;

  const cacheMs = d.cacheMs ?? 15_000;
  let cached: { at: number; value: Promise<JobCounts | null> } | undefined;
  const read = (): Promise<JobCounts | null> => {
    const now = Date.now();
    if (!cached || now - cached.at >= cacheMs) {
      cached = {
        at: now,
        value: readJobCounts(d.db).catch(() => {
          metrics.collectorErrors.inc({ collector: 'jobs' });
          return null; // the series disappear for this scrape rather than show stale numbers
        }),
      };
    }
    return cached.value;
  };

  new client.Gauge({
    name: 'faxline_jobs',
    help: 'Fax jobs in each non-terminal state (service-wide, read from PostgreSQL).',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      this.reset();
      const c = await read();
      if (c) for (const s of openStates) this.set({ state: s }, c.byState.get(s)?.n ?? 0);
    },
  });
  new client.Gauge({
    name: 'faxline_jobs_oldest_seconds',
    help: 'Time since the last state change of the longest-waiting job in each non-terminal state (0 when none).',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      this.reset();
      const c = await read();
      if (c) for (const s of openStates) this.set({ state: s }, c.byState.get(s)?.oldest ?? 0);
    },
  });
  new client.Gauge({
    name: 'faxline_scheduled_pending',
    help: 'Scheduled faxes waiting for their time (service-wide).',
    registers,
    async collect() {
      this.reset();
      const c = await read();
      if (c) this.set(c.byState.get('scheduled')?.n ?? 0);
    },
  });
  new client.Gauge({
    name: 'faxline_scheduled_overdue',
    help: 'Scheduled faxes whose time has passed but that are still scheduled.',
    registers,
    async collect() {
      this.reset();
      const c = await read();
      if (c) this.set(c.scheduledOverdue);
    },
  });
  new client.Gauge({
    name: 'faxline_scheduled_overdue_seconds',
    help: 'How far past its time the most overdue still-scheduled fax is (0 when none).',
    registers,
    async collect() {
      this.reset();
      const c = await read();
      if (c) this.set(c.scheduledOverdueSeconds);
    },
  });
  new client.Gauge({
    name: 'faxline_outbox_pending',
    help: 'Accepted jobs whose command publish is not confirmed yet (the sweep of the command publisher republishes them).',
    registers,
    async collect() {
      this.reset();
      const c = await read();
      if (c) this.set(c.outboxPending);
    },
  });
  new client.Gauge({
    name: 'faxline_outbox_oldest_seconds',
    help: 'Age of the oldest unconfirmed command in the outbox (0 when empty).',
    registers,
    async collect() {
      this.reset();
      const c = await read();
      if (c) this.set(c.outboxOldest);
    },
  });
}
