// The ledger: after a fault or load run, what became of every fax that was accepted.
// - every accepted job is in a terminal state, or legitimately pending (e.g. scheduled for later);
// - no job attempt started more than one call (the only way to start a call is the fence into
//   `dialling`, so two `dialling` transitions for one attempt would be a duplicate transmission);
// - nothing lies in a dead-letter queue without a recorded reason.
import amqp from 'amqplib';
import pg from 'pg';
import { commandTypes, topologyNames } from '../../src/amqp/topology.ts';
import { terminalStates, type JobState } from '../../src/domain/states.ts';

export interface Ledger {
  accepted: number;
  delivered: number;
  failed: number;
  cancelled: number;
  unknown: number;
  pending: number;
  duplicates: number;
  lost: number;
  deadLetteredWithoutReason: number;
  byState: Record<string, number>;
}

export async function readLedger(
  databaseUrl: string,
  acceptedIds: readonly string[],
  o: { amqpUrl?: string; prefix?: string; pendingStates?: readonly JobState[] } = {},
): Promise<Ledger> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  const l: Ledger = {
    accepted: acceptedIds.length,
    delivered: 0,
    failed: 0,
    cancelled: 0,
    unknown: 0,
    pending: 0,
    duplicates: 0,
    lost: 0,
    deadLetteredWithoutReason: 0,
    byState: {},
  };
  try {
    const jobs = await c.query<{ id: string; state: JobState }>(
      'SELECT id, state FROM fax_jobs WHERE id = ANY($1::uuid[])',
      [acceptedIds],
    );
    const found = new Map(jobs.rows.map((r) => [r.id, r.state]));
    const pendingOk = new Set<JobState>(o.pendingStates ?? ['scheduled', 'awaiting_approval']);
    for (const id of acceptedIds) {
      const st = found.get(id);
      if (!st) {
        l.lost++;
        continue;
      }
      l.byState[st] = (l.byState[st] ?? 0) + 1;
      if (st === 'delivered') l.delivered++;
      else if (st === 'failed' || st === 'rejected') l.failed++;
      else if (st === 'cancelled') l.cancelled++;
      else if (st === 'unknown') l.unknown++;
      else if (pendingOk.has(st)) l.pending++;
      else if (!terminalStates.has(st)) l.lost++; // stuck in a working state after the run settled
    }
    const dup = await c.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM (
         SELECT job_id, attempt FROM fax_job_transitions
          WHERE to_state = 'dialling' AND job_id = ANY($1::uuid[])
          GROUP BY job_id, attempt HAVING count(*) > 1) d`,
      [acceptedIds],
    );
    l.duplicates = dup.rows[0]!.n;
  } finally {
    await c.end();
  }
  if (o.amqpUrl && o.prefix) {
    const conn = await amqp.connect(o.amqpUrl);
    try {
      const ch = await conn.createChannel();
      const t = topologyNames(o.prefix);
      for (const type of commandTypes) {
        for (;;) {
          const m = await ch.get(t.deadLetterQueue(type), { noAck: false });
          if (!m) break;
          if (!m.properties.headers?.['x-faxline-reason'] && !m.properties.headers?.['x-death'])
            l.deadLetteredWithoutReason++;
          ch.nack(m, false, true);
          break; // inspecting the head is enough to tell; requeued so nothing is consumed
        }
      }
      await ch.close();
    } finally {
      await conn.close();
    }
  }
  return l;
}

export function ledgerLine(name: string, l: Ledger): string {
  return (
    `ledger ${name}: accepted=${l.accepted} delivered=${l.delivered} failed=${l.failed} ` +
    `cancelled=${l.cancelled} unknown=${l.unknown} pending=${l.pending} duplicates=${l.duplicates} lost=${l.lost}` +
    (l.lost > 0 ? ` states=${JSON.stringify(l.byState)}` : '')
  );
}
