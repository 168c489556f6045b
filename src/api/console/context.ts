// What the console's page modules share (kept apart from plugin.ts, which imports the pages).
import type { AuditEvent } from '../../audit/record.ts';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SessionUser } from '../../auth/console-users.ts';
import type { ApiDeps, ConsoleSettings } from '../deps.ts';
import type { Html } from './html.ts';
import type { Ability, Assets } from './layout.ts';

declare module 'fastify' {
  interface FastifyRequest {
    consoleUser?: SessionUser | null;
  }
}

export const COOKIE = 'faxline_console';

/** One field of a submitted form: text values, or uploaded files. */
export interface Upload {
  fileName: string;
  data: Buffer;
}
export interface Form {
  get(name: string): string | undefined;
  all(name: string): string[];
  files(name: string): Upload[];
}

/** What the page modules share. */
export interface ConsoleDeps {
  d: ApiDeps;
  s: ConsoleSettings;
  assets: Assets;
  /** The owner's pool: the authentication tables (users, sessions, invites, throttle). */
  auth: ApiDeps['db'];
  /** Renders a page with the request's user and unread badge. */
  render(
    req: FastifyRequest,
    reply: FastifyReply,
    title: string,
    body: Html,
    o?: { status?: number; current?: string },
  ): Promise<FastifyReply>;
  /** The signed-in user, or a redirect to the sign-in page (GET) / 401 (other methods); 403 without `need`. */
  userOf(req: FastifyRequest, need?: Ability): SessionUser;
  form(req: FastifyRequest): Form;
  setCookie(req: FastifyRequest, reply: FastifyReply, value: string, maxAgeSeconds: number): void;
  /** Records what a user did, for the fax history and the audit trail (docs/console.md). */
  record(
    u: SessionUser,
    action: string,
    o: {
      req: FastifyRequest;
      jobId?: string | null;
      requestId?: string | null;
      /** The audit event's object when it is not the fax `jobId`. */
      object?: { type: string; id: string };
    },
  ): Promise<void>;
}

/** An audit event of a console user's request (actor type `user`). */
export function consoleAudit(
  accountId: string,
  userId: string,
  req: FastifyRequest,
  action: string,
  o: { object?: AuditEvent['object']; result?: AuditEvent['result']; status?: number } = {},
): AuditEvent {
  return {
    accountId,
    actor: { type: 'user', id: userId },
    action: action.startsWith('console.') || action.includes('.') ? action : `console.${action}`,
    object: o.object ?? null,
    ip: req.ip,
    userAgent: req.headers['user-agent'] ?? null,
    result: o.result ?? 'ok',
    status: o.status ?? null,
  };
}
