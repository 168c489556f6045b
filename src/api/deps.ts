// What the HTTP adapter's modules share: the dependencies the wiring passes to buildServer, the
// limits at the HTTP edge, and the request context (the account set by the token check). Routes import
// these types from here, never from server.ts, so server.ts can import the routes without a cycle.
import type { TemplateSandbox } from '../accounts/smart-templates.ts';
import type { WorkspaceLimits } from '../accounts/workspace.ts';
import type { Broker } from '../amqp/broker.ts';
import type { ContactIds } from '../auth/contact-id.ts';
import type { Actor } from '../audit/record.ts';
import type { ConsoleTimeouts, SigninLimits } from '../auth/console-users.ts';
import type { Clock } from '../clock.ts';
import type { RouteAudit } from './audit.ts';
import type { Pool } from '../db/pool.ts';
import type { TenantDb } from '../db/tenant-db.ts';
import type { DocumentChecks, Fetcher } from '../documents/prepare.ts';
import type { RenderPool } from '../documents/render/pool.ts';
import type { GroupCommit } from '../intake/group-commit.ts';
import type { BroadcastLimits } from '../intake/recipient-limit.ts';
import type { JobWrite } from '../intake/send.ts';
import type { CommandPublisher } from '../jobs/command-publisher.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';
import type { Scheduler } from '../scheduler/scheduler.ts';
import type { requireToken } from './auth-hook.ts';
import type { CursorCodec } from './cursor.ts';
import type { RateLimiter } from './rate-limit.ts';
import type { Readiness } from './routes/ops.ts';

export interface ApiDeps {
  /** The owner's pool: readiness checks only. Request handling uses `tenant` (row-level security). */
  db: Pool;
  tenant: TenantDb;
  commits: GroupCommit<JobWrite>;
  cursors: CursorCodec;
  /** Encrypts and decrypts the contact ids customers see. */
  contactIds: ContactIds;
  limiter: RateLimiter;
  idempotencyTtlHours: number;
  broker: Broker;
  publisher: CommandPublisher;
  scheduler: Scheduler;
  clock: Clock;
  log: Logger;
  metrics: Metrics;
  readiness: Readiness;
  maxRequestBytes: number;
  maxDocumentBytes: number;
  /** Fetches file_url documents for previews (the workers' safe fetcher); without it they are refused. */
  fetcher?: Fetcher;
  /** What previews check with (the PDF sandbox and the fax's limits, as a send) and render in. */
  previews: { checks: DocumentChecks; renderPool: Pick<RenderPool, 'run'> };
  /** What Smart Template uploads are checked and their forms read with: the same PDF sandbox. */
  templateChecks: TemplateSandbox;
  /** The limits an account runs into (GET /v1/workspace, contact and key caps), from the configuration. */
  accountLimits: WorkspaceLimits;
  /** FAX_DEFAULT_CALLER_ID: the caller id any account may present ('' = none). */
  defaultCallerId?: string;
  /** BROADCAST_MAX_RECIPIENTS: most recipients of one broadcast. */
  maxBroadcastRecipients?: number;
  /** BROADCAST_RECIPIENTS_PER_SECOND, BROADCAST_RECIPIENTS_BURST, ACCOUNT_MAX_OPEN_JOBS. */
  broadcastLimits?: BroadcastLimits;
  /** Limits at the HTTP edge (timeouts, JSON depth, /v1/auth failures); defaults when absent. */
  edge?: Partial<HttpEdge>;
  /** The web console's sessions, sign-in limits and invitation mail (CONSOLE_*); defaults when absent. */
  console?: ConsoleSettings;
}

/** Sends an invitation link by mail (a no-op until mail is configured). */
/** Mails an invitation; `accountId` is the workspace the user joins (its data key seals the queued mail). */
export type InviteMailer = (to: string, link: string, invitedBy: string, accountId: string) => Promise<void>;

export interface ConsoleSettings {
  timeouts: ConsoleTimeouts;
  limits: SigninLimits;
  cookieSecure: 'auto' | 'true' | 'false';
  inviteSeconds: number;
  mailInvite: InviteMailer;
  /** WEBHOOK_ALLOW and WEBHOOK_ENDPOINTS_PER_ACCOUNT, for the Webhooks page (defaults when absent). */
  webhooks?: { allow: string[]; maxEndpoints: number };
}

/** Limits at the HTTP edge, from the configuration (docs/configuration.md, SECURITY.md "HTTP edge"). */
export interface HttpEdge {
  requestTimeoutSeconds: number;
  headersTimeoutSeconds: number;
  /** Fastify's trustProxy: comma-separated addresses or CIDRs; empty: the TCP peer is the client. */
  trustProxy: string;
  maxJsonDepth: number;
  authFailuresPerAddress: number;
  authFailuresPerKey: number;
  authFailureWindowSeconds: number;
  maxTokensPerKey: number;
}

/** What route modules receive: the dependencies and the token check (auth + rate limit). */
export type RouteDeps = ApiDeps & { auth: ReturnType<typeof requireToken> };

declare module 'fastify' {
  interface FastifyRequest {
    accountId?: string;
    /** Who makes the request (the audit trail's actor): set by the token check with the account. */
    actor?: Actor;
  }
  interface FastifyContextConfig {
    /** The audit event this route writes (src/api/audit.ts); absent: the route is not audited. */
    audit?: RouteAudit;
  }
}
