// Fixtures for tests that write jobs directly: a job row as the intake would build it, and a
// migrated database with demo accounts, an owner pool and a pipelined API-role pool (as the
// service's group commit uses).
import pg from 'pg';
import { seedDemo, type DemoSeed } from '../../src/admin/seed.ts';
import { apiDatabaseUrl } from '../../src/db/tenant-db.ts';
import { migrate } from '../../src/db/migrate.ts';
import { newId } from '../../src/domain/ids.ts';
import type { NewJob } from '../../src/jobs/repo.ts';
import { createDatabase } from './harness.ts';

/** An accepted send to a test number, not yet dispatched; `over` changes any field. */
export function jobFixture(accountId: string, over: Partial<NewJob> = {}): NewJob {
  return {
    id: newId(),
    accountId,
    kind: 'send',
    sourceJobId: null,
    state: 'accepted',
    faxNumber: '+15551234567',
    callerId: '+15550100001',
    faxQuality: 'standard',
    faxPriority: 'regular',
    faxDefaultId: null,
    smartDocumentId: null,
    scheduledAt: null,
    options: {},
    requestId: null,
    dispatched: false,
    ...over,
  };
}

export interface SeededDatabase {
  owner: pg.Pool;
  /** The API role (row-level security), pipelined like the group commit's pool. */
  api: pg.Pool;
  accounts: DemoSeed[];
  close(): Promise<void>;
}

/** A fresh migrated database with `accounts` demo accounts. */
export async function seededDatabase(accounts = 1): Promise<SeededDatabase> {
  const db = await createDatabase();
  const owner = new pg.Pool({ connectionString: db.url, max: 4 });
  // Dropping the database at the end terminates idle connections: expected, not a failure.
  owner.on('error', () => undefined);
  await migrate(owner);
  const seeds: DemoSeed[] = [];
  const c = await owner.connect();
  try {
    await c.query('BEGIN');
    for (let i = 0; i < accounts; i++) seeds.push(await seedDemo(c));
    await c.query('COMMIT');
  } finally {
    c.release();
  }
  const api = new pg.Pool({ connectionString: apiDatabaseUrl(db.url, ''), max: 4, pipeline: true });
  api.on('error', () => undefined);
  return {
    owner,
    api,
    accounts: seeds,
    close: async () => {
      await api.end();
      await owner.end();
      await db.drop();
    },
  };
}
