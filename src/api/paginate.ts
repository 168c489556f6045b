// Keyset pagination over (created_at, id): a stable order that inserts and deletes cannot shift.
import type { Queryable } from '../db/pool.ts';
import type { TenantDb } from '../db/tenant-db.ts';
import { ApiError } from '../domain/envelope.ts';
import { parseLimit } from '../domain/page-size.ts';
import type { CursorCodec, Position } from './cursor.ts';

export interface PageMeta {
  next_cursor: string | null;
  previous_cursor: string | null;
  has_more: boolean;
  limit: number;
}

export interface PageQuery {
  /** FROM clause (a table name). */
  from: string;
  /** Columns to return. */
  columns: string;
  /** Extra conditions (AND-ed), with their values numbered from $1. */
  where: string[];
  values: unknown[];
  /** Order of the list: oldest first ('asc') or newest first ('desc'). */
  order: 'asc' | 'desc';
  limit: number;
  cursor: Position | null;
}

const EDGE = `to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS _t`;

/** One page and its meta. `context` binds the cursors to this list, filter and account. */
export async function page<R extends { id: string }>(
  db: Queryable,
  codec: CursorCodec,
  context: string,
  q: PageQuery,
): Promise<{ rows: R[]; meta: PageMeta }> {
  const backward = q.cursor?.d === 'p';
  // Travelling forward in an ascending list, or backward in a descending one, means "greater than".
  const up = (q.order === 'asc') !== backward;
  const values = [...q.values];
  const where = [...q.where];
  const pos = (p: Position) => {
    values.push(p.t, p.i);
    return `($${values.length - 1}::timestamptz, $${values.length}::uuid)`;
  };
  if (q.cursor) where.push(`(created_at, id) ${up ? '>' : '<'} ${pos(q.cursor)}`);
  const dir = up ? 'ASC' : 'DESC';
  values.push(q.limit + 1);
  const r = await db.query<R & { _t: string }>(
    `SELECT ${q.columns}, ${EDGE} FROM ${q.from}
      ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
      ORDER BY ${q.from}.created_at ${dir}, ${q.from}.id ${dir} LIMIT $${values.length}`,
    values,
  );
  let rows = r.rows;
  const more = rows.length > q.limit;
  if (more) rows = rows.slice(0, q.limit);
  if (backward) rows = rows.reverse();

  // Is there anything on the other side of where we came from?
  const exists = async (p: Position, greater: boolean): Promise<boolean> => {
    const v = [...q.values, p.t, p.i];
    const w = [
      ...q.where,
      `(created_at, id) ${greater ? '>' : '<'} ($${v.length - 1}::timestamptz, $${v.length}::uuid)`,
    ];
    const e = await db.query(`SELECT 1 FROM ${q.from} WHERE ${w.join(' AND ')} LIMIT 1`, v);
    return (e.rowCount ?? 0) > 0;
  };
  const first = rows[0];
  const last = rows[rows.length - 1];
  const asc = q.order === 'asc';
  let hasAfter: boolean;
  let hasBefore: boolean;
  if (!backward) {
    hasAfter = more;
    hasBefore = q.cursor ? await exists(first ? edge(first) : q.cursor, !asc) : false;
  } else {
    hasBefore = more;
    hasAfter = await exists(last ? edge(last) : q.cursor!, asc);
  }
  const meta: PageMeta = {
    next_cursor: hasAfter ? codec.encode({ ...(last ? edge(last) : q.cursor!), d: 'n' }, context) : null,
    previous_cursor: hasBefore
      ? codec.encode({ ...(first ? edge(first) : q.cursor!), d: 'p' }, context)
      : null,
    has_more: hasAfter,
    limit: q.limit,
  };
  return { rows: rows.map(({ _t, ...rest }) => rest as unknown as R), meta };
}

function edge(row: { _t: string; id: string }): Position {
  return { t: row._t, i: row.id, d: 'n' };
}

/**
 * One page of an account's list for a GET route: `limit` and `cursor` read from the query string
 * (422 when either is wrong), the cursor bound to `context` (the list, its filter and the account,
 * so it cannot be replayed on another list), the query run under the account's row-level security.
 */
export async function listPage<R extends { id: string }>(
  d: { cursors: CursorCodec; tenant: TenantDb },
  accountId: string,
  query: Record<string, unknown>,
  context: string,
  q: Omit<PageQuery, 'limit' | 'cursor'>,
): Promise<{ rows: R[]; meta: PageMeta }> {
  const limit = parseLimit(query.limit);
  const raw = query.cursor;
  if (raw !== undefined && typeof raw !== 'string') throw new ApiError(422, 'cursor: must be given once');
  const cursor = raw ? d.cursors.decode(raw, context) : null;
  return d.tenant.tx(accountId, (c) => page<R>(c, d.cursors, context, { ...q, limit, cursor }));
}
