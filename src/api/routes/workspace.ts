// GET /v1/workspace: the account, the limits in force, and this calendar month's usage (UTC).
// PATCH /v1/workspace: the account's settings (its time zone, for the dates printed on faxes and reports;
// its retention of fax content, docs/audit-retention.md).
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import {
  accountOfWorkspace,
  setTimeZone,
  timeZoneProblem,
  type Usage,
  usageThisMonth,
} from '../../accounts/workspace.ts';
import { MAX_RETENTION_DAYS, type Retention, setRetention } from '../../accounts/retention.ts';
import { jobStates } from '../../domain/states.ts';
import { accountOf } from '../auth-hook.ts';
import { ApiError, ok } from '../../domain/envelope.ts';
import { answer, bodyErrors, envelope, operation, refusal, tokenErrors } from '../openapi.ts';
import { parseBody } from '../../domain/validate.ts';
import type { RouteDeps } from '../deps.ts';

const count = z.number().int();
const stateUsage = z.object({ faxes: count, pages: count, pages_sent: count });
const limit = z.number().nullable();

const retentionView = z
  .object({
    sent_days: z.number().nullable().describe('Days a final fax keeps its content; null: default_days.'),
    received_days: z
      .number()
      .nullable()
      .describe('Days a received fax keeps its images; null: default_days.'),
    zero_footprint: z
      .boolean()
      .describe(
        "true: a sent fax's content is deleted as soon as it is final, a received fax's images once downloaded or marked read.",
      ),
    default_days: z
      .number()
      .nullable()
      .describe("The installation's retention (DOCUMENT_RETENTION_DAYS); null: kept for ever."),
  })
  .describe('How long fax content is kept (docs/audit-retention.md).');

const accountView = z.object({
  id: z.string(),
  name: z.string(),
  time_zone: z
    .string()
    .describe(
      'IANA time zone of the dates printed on faxes (cover page, header line) and transmission reports; default UTC.',
    ),
  created_at: z.string(),
  retention: retentionView,
});

const days = z
  .number({
    message: `must be a whole number of days from 1 to ${MAX_RETENTION_DAYS}, or null for the default`,
  })
  .int({ message: `must be a whole number of days from 1 to ${MAX_RETENTION_DAYS}, or null for the default` })
  .min(1, {
    message: `must be a whole number of days from 1 to ${MAX_RETENTION_DAYS}, or null for the default`,
  })
  .max(MAX_RETENTION_DAYS, {
    message: `must be a whole number of days from 1 to ${MAX_RETENTION_DAYS}, or null for the default`,
  })
  .nullable();

const retentionBody = z.strictObject(
  {
    sent_days: days.optional().describe('Days a final fax keeps its content (1-36500); null: the default.'),
    received_days: days
      .optional()
      .describe('Days a received fax keeps its images (1-36500); null: the default.'),
    zero_footprint: z
      .boolean({ message: 'must be true or false' })
      .optional()
      .describe('true: delete content as soon as a fax is final (received: once downloaded or marked read).'),
  },
  {
    error: (i: { code?: string; keys?: string[] }) =>
      i.code === 'unrecognized_keys'
        ? (i.keys ?? []).map((k) => `${k}: is not a setting of retention`).join('; ')
        : undefined,
  },
);

const patchBody = z.strictObject(
  {
    time_zone: z
      .string({ message: 'must be a string, an IANA time zone name such as Europe/Paris' })
      .optional()
      .describe('IANA time zone name, e.g. Europe/Paris, America/New_York, UTC.'),
    retention: retentionBody.optional(),
  },
  {
    error: (i: { code?: string; keys?: string[] }) =>
      i.code === 'unrecognized_keys'
        ? (i.keys ?? []).map((k) => `${k}: is not a setting of the workspace`).join('; ')
        : undefined,
  },
);

const patchContract = operation({
  tag: 'Workspace',
  summary: "Change the account's settings (its time zone, its retention of fax content)",
  description:
    'time_zone: the zone of the dates and times printed on cover pages and header lines (at preparation) and on ' +
    'transmission reports. Faxes already prepared keep what was printed. retention: how long content is kept ' +
    '(each field optional; null: the installation default); the purge runs on a schedule (RETENTION_PURGE_CRON), ' +
    "and a purged fax's image, report and download endpoints then answer 410 Gone.",
  auth: true,
  body: patchBody,
  responses: {
    '200': answer('The account as it is now.', envelope(accountView)),
    ...bodyErrors,
    '422': refusal(
      'Not an IANA time zone name, or an unknown field.',
      'time_zone: "Mars/Olympus" is not an IANA time zone name (e.g. Europe/Paris, America/New_York, UTC)',
    ),
    ...tokenErrors,
  },
});

const contract = operation({
  tag: 'Workspace',
  summary: 'The account, its limits and its usage this month',
  description:
    'Usage counts the faxes created in the current calendar month in UTC (from the 1st, 00:00 UTC), by the state they are in now; `pages` counts document pages once a fax is prepared (cover pages not counted), `pages_sent` pages transmitted. Usage is recounted at most every 10 seconds per account and API process.',
  auth: true,
  responses: {
    '200': answer(
      'The workspace.',
      envelope(
        z.object({
          account: accountView,
          limits: z
            .object({
              rate_limit_per_second: limit,
              rate_limit_burst: limit,
              documents_per_fax: limit,
              document_bytes: limit,
              request_bytes: limit,
              pages_per_document: limit,
              pages_per_fax: limit,
              schedule_horizon_days: limit,
              document_retention_days: limit.describe('null: documents are kept.'),
              page_size: limit,
              contacts: limit,
              fax_defaults: limit,
              smart_templates: limit,
              api_keys: limit,
              tokens_per_key: limit,
              token_lifetime_seconds: limit,
              webhooks: limit,
              default_caller_id: z.string().nullable(),
            })
            .describe('null: no limit (or, for default_caller_id, none set).'),
          usage: z.object({
            period: z.object({ from: z.string(), to: z.string() }).describe('[from, to) in UTC.'),
            faxes: count,
            pages: count,
            pages_sent: count,
            by_state: z.object(Object.fromEntries(jobStates.map((s) => [s, stateUsage]))),
          }),
        }),
      ),
    ),
    ...tokenErrors,
  },
});

/**
 * Usage is read at most once per USAGE_TTL_MS per account and API process: counting costs about 1 µs
 * per fax of the month (docs/api.md), so an account with a million faxes this month polling the
 * workspace at its full rate limit would otherwise keep a database core busy. The cache holds the
 * count while it runs too: a burst of requests of one account waits for one count, rather than each
 * running its own and holding a connection of the pool every account shares.
 */
const USAGE_TTL_MS = 10_000;
const USAGE_CACHE_MAX = 10_000;

export function registerWorkspaceRoutes(app: FastifyInstance, d: RouteDeps): void {
  const cache = new Map<string, { at: number; until: number; usage: Promise<Usage> }>();
  const usageOf = (accountId: string, now: Date): Promise<Usage> => {
    const t = now.getTime();
    const hit = cache.get(accountId);
    if (hit && t - hit.at < USAGE_TTL_MS && t < hit.until) return hit.usage;
    const entry = {
      at: t,
      until: Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1),
      usage: d.tenant.tx(accountId, (c) => usageThisMonth(c, accountId, now)),
    };
    cache.delete(accountId);
    if (cache.size >= USAGE_CACHE_MAX) cache.delete(cache.keys().next().value!);
    cache.set(accountId, entry);
    // A failed count is not kept: the next request counts again.
    entry.usage.catch(() => {
      if (cache.get(accountId) === entry) cache.delete(accountId);
    });
    return entry.usage;
  };
  const defaultDays = d.accountLimits.document_retention_days;
  const withDefault = <A extends { retention: Retention }>(account: A) => ({
    ...account,
    retention: { ...account.retention, default_days: defaultDays },
  });
  app.get('/v1/workspace', { schema: contract, preHandler: d.auth }, async (req) => {
    const accountId = accountOf(req);
    const found = await d.tenant.tx(accountId, (c) => accountOfWorkspace(c, accountId));
    const account = found ? withDefault(found) : null;
    if (!account) throw new ApiError(404, 'Account not found');
    const usage = await usageOf(accountId, d.clock.now());
    return ok('Workspace retrieved successfully', { account, limits: d.accountLimits, usage });
  });
  app.patch('/v1/workspace', { schema: patchContract, preHandler: d.auth }, async (req) => {
    const body = parseBody(patchBody, req.body);
    if (body.time_zone === undefined && body.retention === undefined)
      throw new ApiError(422, 'Name a setting to change: time_zone or retention');
    const zone = body.time_zone;
    const problem = zone === undefined ? null : timeZoneProblem(zone);
    if (problem) throw new ApiError(422, problem);
    const accountId = accountOf(req);
    const found = await d.tenant.tx(accountId, async (c) => {
      await setRetention(c, accountId, withoutUndefined(body.retention ?? {}));
      return zone === undefined ? accountOfWorkspace(c, accountId) : setTimeZone(c, accountId, zone);
    });
    const account = found ? withDefault(found) : null;
    if (!account) throw new ApiError(404, 'Account not found');
    return ok('Workspace updated successfully', account);
  });
}

/** The fields given (exactOptionalPropertyTypes: undefined is not a value of Retention's fields). */
function withoutUndefined(o: {
  sent_days?: number | null | undefined;
  received_days?: number | null | undefined;
  zero_footprint?: boolean | undefined;
}): Partial<Retention> {
  const out: Partial<Retention> = {};
  if (o.sent_days !== undefined) out.sent_days = o.sent_days;
  if (o.received_days !== undefined) out.received_days = o.received_days;
  if (o.zero_footprint !== undefined) out.zero_footprint = o.zero_footprint;
  return out;
}
