// The parts of the customer API that the wiring (src/app.ts) builds: the API role's pool and the
// scoped database access, group commit, cursor codec, rate limiter, and the idempotency-key sweep.
import { type ContactIds, contactIds } from '../auth/contact-id.ts';
import { randomBytes } from 'node:crypto';
import type { Clock } from '../clock.ts';
import type { Config } from '../config.ts';
import { createPool, type Pool } from '../db/pool.ts';
import { GroupCommit } from '../intake/group-commit.ts';
import type { Scheduler } from '../scheduler/scheduler.ts';
import { intakeFlush, type JobWrite } from '../intake/send.ts';
import type { Logger } from '../log.ts';
import { CursorCodec } from './cursor.ts';
import { RateLimiter } from './rate-limit.ts';
import { apiDatabaseUrl, assertCannotBypassRls, grantSchedulerSchema, TenantDb } from '../db/tenant-db.ts';

export interface ApiParts {
  tenant: TenantDb;
  commits: GroupCommit<JobWrite>;
  cursors: CursorCodec;
  contactIds: ContactIds;
  limiter: RateLimiter;
  idempotencyTtlHours: number;
  stop(): Promise<void>;
}

/** The HMAC key of cursors: CURSOR_SECRET, else one random key per installation, kept in PostgreSQL. */
async function cursorKey(cfg: Config, owner: Pool): Promise<Buffer> {
  if (cfg.CURSOR_SECRET !== '') return Buffer.from(cfg.CURSOR_SECRET, 'utf8');
  await owner.query(
    `INSERT INTO server_secrets (name, value) VALUES ('cursor_hmac', $1) ON CONFLICT (name) DO NOTHING`,
    [randomBytes(32)],
  );
  const r = await owner.query<{ value: Buffer }>(
    `SELECT value FROM server_secrets WHERE name = 'cursor_hmac'`,
  );
  return r.rows[0]!.value;
}

export async function createApiParts(
  cfg: Config,
  owner: Pool,
  log: Logger,
  clock: Clock,
  scheduler: Pick<Scheduler, 'scheduleMany'>,
): Promise<ApiParts> {
  try {
    await grantSchedulerSchema(owner, cfg.PGBOSS_SCHEMA);
  } catch (err) {
    // Concurrent GRANTs from replicas starting together can collide; the first one did the work.
    log.warn({ err: (err as Error).message }, 'could not grant the scheduler schema to the API role');
  }
  const pool = createPool(apiDatabaseUrl(cfg.DATABASE_URL, cfg.API_DATABASE_URL), cfg.DB_POOL_SIZE, log);
  try {
    await assertCannotBypassRls(pool);
  } catch (err) {
    await pool.end();
    throw err;
  }
  const tenant = new TenantDb(pool);
  // Group commit has connections of its own, pipelined (BEGIN and COMMIT travel with other statements).
  const commitPool = createPool(
    apiDatabaseUrl(cfg.DATABASE_URL, cfg.API_DATABASE_URL),
    cfg.INTAKE_COMMIT_CONCURRENCY,
    log,
    { pipeline: true },
  );
  const commits = new GroupCommit<JobWrite>(
    commitPool,
    { maxBatch: cfg.INTAKE_BATCH_MAX, concurrency: cfg.INTAKE_COMMIT_CONCURRENCY },
    intakeFlush(scheduler),
  );
  const sweep = setInterval(() => {
    owner
      .query('DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(hours => $1)', [
        cfg.IDEMPOTENCY_TTL_HOURS,
      ])
      .catch((err: unknown) => log.warn({ err: (err as Error).message }, 'idempotency sweep failed'));
  }, 600_000);
  sweep.unref();
  return {
    tenant,
    commits,
    cursors: new CursorCodec(await cursorKey(cfg, owner)),
    contactIds: await contactIds(owner),
    limiter: new RateLimiter(cfg.RATE_LIMIT_PER_SECOND, cfg.RATE_LIMIT_BURST, clock),
    idempotencyTtlHours: cfg.IDEMPOTENCY_TTL_HOURS,
    stop: async () => {
      clearInterval(sweep);
      await Promise.all([pool.end(), commitPool.end()]);
    },
  };
}
