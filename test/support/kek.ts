// The key-encryption key of the tests (docs/encryption.md): one per test process, shared by every
// service and child process it starts, on every database. A process holds one key ring (installed by
// each service it starts in-process), so a second service on a new database with a key of its own
// would take the first one's key away (a 500 "data key ... wrapped by kek-..., which is not
// configured" in test/fax-options.test.ts). Tests run with encryption on unless they set ENCRYPTION,
// KEK or KEK_FILE themselves (test/encryption.test.ts does, for rotation and foreign keys).
import { randomBytes } from 'node:crypto';

const processKek = randomBytes(32).toString('base64');

/** The tests' key-encryption key (the same for every database of this test process). */
export function testKek(_databaseUrl: string): string {
  return processKek;
}

/** `env` with the database's test KEK added, unless it chooses its own keys (or encryption off). */
export function withTestKek(env: Record<string, string | undefined>): Record<string, string> {
  const own = 'ENCRYPTION' in env || 'KEK' in env || 'KEK_FILE' in env;
  const db = env.DATABASE_URL ?? '';
  return {
    ...(env as Record<string, string>),
    ...(own ? {} : { ENCRYPTION: 'on', KEK: testKek(db) }),
  };
}
