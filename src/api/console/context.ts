// What the console's page modules share (kept apart from plugin.ts, which imports the pages).
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
    o: { jobId?: string | null; requestId?: string | null },
  ): Promise<void>;
}
