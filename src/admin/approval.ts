// Approval from the admin CLI: an operator acts on any account's fax, through the owner's pool.
import { Broker } from '../amqp/broker.ts';
import { ApiError, messages } from '../domain/envelope.ts';
import { systemClock } from '../clock.ts';
import type { Config } from '../config.ts';
import { type Pool, withTx } from '../db/pool.ts';
import { isId } from '../domain/ids.ts';
import { openJobOptions } from '../db/sealed-columns.ts';
import { approveFax } from '../intake/approval.ts';
import { Scheduler } from '../scheduler/scheduler.ts';
import { CommandPublisher } from '../jobs/command-publisher.ts';
import type { Logger } from '../log.ts';

export async function accountOfJob(db: Pool, jobId: string): Promise<string> {
  const r = isId(jobId)
    ? await db.query<{ account_id: string }>('SELECT account_id FROM fax_jobs WHERE id = $1', [jobId])
    : { rows: [] };
  const row = r.rows[0];
  if (!row) throw new ApiError(404, messages.faxNotFound);
  return row.account_id;
}

export async function listAwaiting(db: Pool, accountId: string | undefined) {
  if (accountId !== undefined && !isId(accountId)) return [];
  const r = await db.query(
    `SELECT id AS job_id, account_id, fax_number, caller_id, scheduled_at, options, created_at
       FROM fax_jobs WHERE state = 'awaiting_approval' ${accountId ? 'AND account_id = $1' : ''}
      ORDER BY created_at LIMIT 1000`,
    accountId ? [accountId] : [],
  );
  // The options as given (their content fields are sealed in the row).
  const out = [];
  for (const row of r.rows as { job_id: string; account_id: string; options: unknown }[])
    out.push({ ...row, options: await openJobOptions(db, row.account_id, row.job_id, row.options) });
  return out;
}

/** Approves: publishes the send command (RabbitMQ) or enqueues the due-time job (pg-boss). */
export async function approveFromCli(cfg: Config, db: Pool, log: Logger, jobId: string) {
  const accountId = await accountOfJob(db, jobId);
  const broker = new Broker(
    {
      url: cfg.AMQP_URL,
      prefix: cfg.QUEUE_PREFIX,
      queueType: cfg.QUEUE_TYPE,
      deliveryLimit: cfg.DELIVERY_LIMIT,
    },
    log,
  );
  const scheduler = new Scheduler({
    databaseUrl: cfg.DATABASE_URL,
    schema: cfg.PGBOSS_SCHEMA,
    clock: systemClock,
    log,
  });
  await broker.start(3);
  const publisher = new CommandPublisher(db, broker, log);
  try {
    await scheduler.start();
    const row = await approveFax(
      { tx: (fn) => withTx(db, fn), scheduler, publisher, clock: systemClock },
      accountId,
      jobId,
      { by: 'admin' },
    );
    return { job_id: row.id, state: row.state };
  } finally {
    await publisher.stop();
    await scheduler.stop();
    await broker.close();
  }
}
