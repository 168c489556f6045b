// RabbitMQ users allowed to publish to the AMQP intake, each mapped to one account.
import type { Queryable } from '../db/pool.ts';

export async function registerSender(db: Queryable, brokerUser: string, accountId: string): Promise<void> {
  await db.query(
    `INSERT INTO amqp_senders (broker_user, account_id) VALUES ($1, $2)
     ON CONFLICT (broker_user) DO UPDATE SET account_id = EXCLUDED.account_id`,
    [brokerUser, accountId],
  );
}

export async function removeSender(db: Queryable, brokerUser: string): Promise<boolean> {
  const r = await db.query('DELETE FROM amqp_senders WHERE broker_user = $1', [brokerUser]);
  return (r.rowCount ?? 0) > 0;
}

export async function listSenders(db: Queryable): Promise<{ broker_user: string; account_id: string }[]> {
  const r = await db.query<{ broker_user: string; account_id: string }>(
    'SELECT broker_user, account_id FROM amqp_senders ORDER BY broker_user',
  );
  return r.rows;
}

/** broker user → account id, cached briefly (a removed sender stops within `ttlMs`). */
export function senderLookup(db: Queryable, ttlMs = 5000): (user: string) => Promise<string | null> {
  // The promise is cached, so a burst of commands from one user waiting on the first lookup shares it.
  const cache = new Map<string, { account: Promise<string | null>; until: number }>();
  return (user) => {
    const hit = cache.get(user);
    if (hit && hit.until > Date.now()) return hit.account;
    const account = db
      .query<{ account_id: string }>('SELECT account_id FROM amqp_senders WHERE broker_user = $1', [user])
      .then((r) => r.rows[0]?.account_id ?? null);
    if (cache.size > 10_000) cache.clear();
    const entry = { account, until: Date.now() + ttlMs };
    cache.set(user, entry);
    account.catch(() => {
      if (cache.get(user) === entry) cache.delete(user);
    });
    return account;
  };
}
