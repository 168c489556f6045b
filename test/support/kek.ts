// The key-encryption key of each test database (docs/encryption.md): services and processes started
// on one database (an API and a worker, a restart) share it; each new database gets a new one. Tests
// run with encryption on unless they set ENCRYPTION, KEK or KEK_FILE themselves.
import { randomBytes } from 'node:crypto';

const keks = new Map<string, string>();

export function testKek(databaseUrl: string): string {
  let k = keks.get(databaseUrl);
  if (!k) {
    k = randomBytes(32).toString('base64');
    keks.set(databaseUrl, k);
  }
  return k;
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
