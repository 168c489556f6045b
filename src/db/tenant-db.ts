// The customer API's database access. Request handling connects as a role that cannot bypass
// row-level security (faxline_api, see migration 002) and sets the account for each transaction
// with set_config(..., true) (the same as SET LOCAL): it ends with the transaction, so a pooled
// connection never carries an account from one request to the next. A query the code forgets to
// scope with `WHERE account_id = …` still sees only the account's rows.
import pg from 'pg';
import type { Pool, PoolClient, Queryable } from './pool.ts';
import { editPgUrl } from './hosts.ts';
import { isId } from '../domain/ids.ts';

export const API_ROLE = 'faxline_api';

/** The SQL that opens a transaction for an account. `accountId` must be a UUID (checked). */
export function beginFor(accountId: string): string {
  if (!isId(accountId)) throw new Error('account id is not a UUID');
  return `BEGIN; SELECT set_config('faxline.account_id', '${accountId}', true)`;
}

/** Set the account for the rest of an open transaction (group commit switches between accounts). */
export async function switchAccount(c: Queryable, accountId: string): Promise<void> {
  await c.query(`SELECT set_config('faxline.account_id', $1, true)`, [accountId]);
}

export class TenantDb {
  readonly pool: Pool;
  constructor(pool: Pool) {
    this.pool = pool;
  }

  /** Runs `fn` in one transaction scoped to `accountId`; commits when it resolves. */
  async tx<T>(accountId: string, fn: (c: PoolClient) => Promise<T>): Promise<T> {
    const c = await this.pool.connect();
    try {
      await c.query(beginFor(accountId));
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (err) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      c.release();
    }
  }

  /**
   * A pool-shaped view for code written against `db: Pool` (transition(), getJob(), withTx()): each
   * statement outside a transaction runs in its own scoped transaction, and a BEGIN on a client from
   * `connect()` opens a scoped one.
   */
  scoped(accountId: string): Pool {
    const pool = this.pool;
    const view = {
      query: (text: string, values?: unknown[]) => this.tx(accountId, (c) => c.query(text, values)),
      async connect(): Promise<PoolClient> {
        const client = await pool.connect();
        let inTx = false;
        const run = client.query.bind(client) as (t: string, v?: unknown[]) => Promise<pg.QueryResult>;
        const query = async (text: string, values?: unknown[]) => {
          const verb = /^\s*(\w+)/.exec(text)?.[1]?.toUpperCase();
          if (verb === 'BEGIN' || verb === 'START') {
            await run(text);
            await switchAccount(client, accountId);
            inTx = true;
            return { rows: [], rowCount: null, command: 'BEGIN', fields: [], oid: 0 };
          }
          if (verb === 'COMMIT' || verb === 'ROLLBACK' || verb === 'END' || verb === 'ABORT') {
            inTx = false;
            return run(text);
          }
          if (inTx) return run(text, values);
          await run(beginFor(accountId));
          try {
            const r = await run(text, values);
            await run('COMMIT');
            return r;
          } catch (err) {
            await run('ROLLBACK').catch(() => undefined);
            throw err;
          }
        };
        return new Proxy(client, {
          get: (target, prop, recv) => (prop === 'query' ? query : Reflect.get(target, prop, recv)),
        });
      },
    };
    return view as unknown as Pool;
  }
}

/** Refuses to run the API on a role that could bypass row-level security. */
export async function assertCannotBypassRls(pool: Pool): Promise<void> {
  const r = await pool.query<{ user: string; rolsuper: boolean; rolbypassrls: boolean; owns: number }>(
    `SELECT current_user AS user, r.rolsuper, r.rolbypassrls,
            (SELECT count(*)::int FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
                AND pg_has_role(current_user, c.relowner, 'USAGE')) AS owns
       FROM pg_roles r WHERE r.rolname = current_user`,
  );
  const row = r.rows[0];
  if (!row) throw new Error('cannot read the API database role');
  if (row.rolsuper || row.rolbypassrls || row.owns > 0)
    throw new Error(
      `API_DATABASE_URL connects as "${row.user}", which can bypass row-level security ` +
        `(superuser: ${row.rolsuper}, bypassrls: ${row.rolbypassrls}, owns tables: ${row.owns}); ` +
        `use the role ${API_ROLE} (see docs/security.md)`,
    );
}

/** API_DATABASE_URL, or DATABASE_URL with the API role as user and no password. */
export function apiDatabaseUrl(databaseUrl: string, apiUrl: string): string {
  if (apiUrl !== '') return apiUrl;
  return editPgUrl(databaseUrl, (u) => {
    u.username = API_ROLE;
    u.password = '';
  });
}

/** Lets the API role use pg-boss's tables (it enqueues a scheduled fax inside its own transaction). */
export async function grantSchedulerSchema(owner: Queryable, schema: string): Promise<void> {
  const s = pg.escapeIdentifier(schema);
  await owner.query(`GRANT USAGE ON SCHEMA ${s} TO ${API_ROLE};
    GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA ${s} TO ${API_ROLE};
    GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ${s} TO ${API_ROLE};
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${s} TO ${API_ROLE}`);
}
