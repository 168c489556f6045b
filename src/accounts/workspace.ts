// GET /v1/workspace: the account, the limits in force for it, and its usage this calendar month.
import type { Config } from '../config.ts';
import { RETENTION_JSON, type Retention } from './retention.ts';
import type { Queryable } from '../db/pool.ts';
import { jobStates, type JobState } from '../domain/states.ts';
import { TOKEN_TTL_SECONDS } from '../auth/service.ts';
import { MAX_LIMIT } from '../domain/page-size.ts';

/** The limits a customer runs into, by the name the workspace answer gives them. */
export type WorkspaceLimits = ReturnType<typeof workspaceLimits>;

export function workspaceLimits(cfg: Config) {
  return {
    rate_limit_per_second: cfg.RATE_LIMIT_PER_SECOND === 0 ? null : cfg.RATE_LIMIT_PER_SECOND,
    rate_limit_burst: cfg.RATE_LIMIT_PER_SECOND === 0 ? null : cfg.RATE_LIMIT_BURST,
    documents_per_fax: 20,
    document_bytes: cfg.MAX_DOCUMENT_BYTES,
    request_bytes: cfg.MAX_REQUEST_BYTES,
    pages_per_document: cfg.PDF_MAX_PAGES,
    pages_per_fax: cfg.FAX_MAX_PAGES,
    schedule_horizon_days: cfg.SCHEDULE_HORIZON_DAYS,
    document_retention_days: cfg.DOCUMENT_RETENTION_DAYS === 0 ? null : cfg.DOCUMENT_RETENTION_DAYS,
    page_size: MAX_LIMIT,
    contacts: cfg.CONTACTS_PER_ACCOUNT,
    fax_defaults: cfg.FAX_DEFAULTS_PER_ACCOUNT,
    smart_templates: cfg.SMART_TEMPLATES_PER_ACCOUNT,
    api_keys: cfg.API_KEYS_PER_ACCOUNT,
    tokens_per_key: cfg.AUTH_MAX_TOKENS_PER_KEY,
    token_lifetime_seconds: TOKEN_TTL_SECONDS,
    webhooks: cfg.WEBHOOK_ENDPOINTS_PER_ACCOUNT,
    default_caller_id: cfg.FAX_DEFAULT_CALLER_ID === '' ? null : cfg.FAX_DEFAULT_CALLER_ID,
  };
}

export interface StateUsage {
  /** Faxes created this month that are now in this state. */
  faxes: number;
  /** Their pages (documents, cover not counted), counted once a fax is prepared. */
  pages: number;
  /** Pages transmitted. */
  pages_sent: number;
}

export interface Usage {
  period: { from: string; to: string };
  faxes: number;
  pages: number;
  pages_sent: number;
  by_state: Record<JobState, StateUsage>;
}

/**
 * Faxes and pages of the account created in the current calendar month (UTC), by their state now.
 * One range scan of the index fax_jobs_account_page (account_id, created_at): it reads this month's
 * faxes of this account and nothing else, so it costs in proportion to them (see docs/api.md).
 */
export async function usageThisMonth(c: Queryable, accountId: string, now: Date): Promise<Usage> {
  const from = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  const to = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
  const r = await c.query<{ state: JobState; faxes: number; pages: number; pages_sent: number }>(
    `SELECT state, count(*)::int AS faxes, coalesce(sum(page_count), 0)::int AS pages,
            coalesce(sum(pages_sent), 0)::int AS pages_sent
       FROM fax_jobs
      WHERE account_id = $1 AND created_at >= $2 AND created_at < $3
      GROUP BY state`,
    [accountId, from, to],
  );
  const by = Object.fromEntries(jobStates.map((s) => [s, { faxes: 0, pages: 0, pages_sent: 0 }])) as Record<
    JobState,
    StateUsage
  >;
  for (const row of r.rows)
    by[row.state] = { faxes: row.faxes, pages: row.pages, pages_sent: row.pages_sent };
  const sum = (k: keyof StateUsage) => r.rows.reduce((n, row) => n + row[k], 0);
  return {
    period: { from: from.toISOString(), to: to.toISOString() },
    faxes: sum('faxes'),
    pages: sum('pages'),
    pages_sent: sum('pages_sent'),
    by_state: by,
  };
}

export interface WorkspaceAccount {
  id: string;
  name: string;
  /** IANA time zone of the dates printed on the faxes (cover page, header line) and reports. */
  time_zone: string;
  created_at: string;
  /** The account's retention of fax content (src/accounts/retention.ts). */
  retention: Retention;
}

const ACCOUNT_COLUMNS = `id, name, time_zone,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at,
  ${RETENTION_JSON} AS retention`;

export async function accountOfWorkspace(c: Queryable, accountId: string): Promise<WorkspaceAccount | null> {
  const r = await c.query<WorkspaceAccount>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts WHERE id = $1`, [
    accountId,
  ]);
  return r.rows[0] ?? null;
}

/** The form of an IANA zone name: Area/Location segments (Etc/GMT-14, EST5EDT); not an offset like +05:45. */
const ZONE_NAME = /^[A-Za-z][A-Za-z0-9_+-]*(?:\/[A-Za-z0-9_+-]+)*$/;

/**
 * Why `zone` is not an IANA time zone name this installation knows, or null when it is one. Known
 * means known to the time zone database every date is printed with (ICU, through Intl): current names
 * and their older aliases alike. Intl.supportedValuesOf('timeZone') is not the test: it lists one
 * name per zone, ICU's canonical one, which is often the older alias (Asia/Katmandu, Asia/Calcutta,
 * Europe/Kiev), and so refused Asia/Kathmandu, Asia/Kolkata and Europe/Kyiv.
 */
export function timeZoneProblem(zone: unknown): string | null {
  if (typeof zone !== 'string')
    return 'time_zone: must be a string, an IANA time zone name such as Europe/Paris';
  if (zone.length <= 64 && ZONE_NAME.test(zone)) {
    try {
      new Intl.DateTimeFormat('en-US', { timeZone: zone });
      return null;
    } catch {
      // not a zone this installation knows
    }
  }
  return `time_zone: "${zone.slice(0, 64)}" is not an IANA time zone name (e.g. Europe/Paris, America/New_York, UTC)`;
}

/** Sets the account's time zone (checked by timeZoneProblem first); the account as it is now. */
export async function setTimeZone(
  c: Queryable,
  accountId: string,
  zone: string,
): Promise<WorkspaceAccount | null> {
  const r = await c.query<WorkspaceAccount>(
    `UPDATE accounts SET time_zone = $2 WHERE id = $1 RETURNING ${ACCOUNT_COLUMNS}`,
    [accountId, zone],
  );
  return r.rows[0] ?? null;
}
