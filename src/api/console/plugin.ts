// The web console at /console/ (issue 29, docs/console.md): server-rendered pages from html.ts,
// plain forms, sessions in PostgreSQL, a CSRF token per session on every state-changing request plus
// an Origin check, strict security headers. Its routes use `schema: internal`: they are not part of
// the customer API's contract (/openapi.json). Every action calls the service the API route calls.
import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { type SessionUser, sessionUser, sweepSessions } from '../../auth/console-users.ts';
import { enqueueMail } from '../../accounts/mail.ts';
import { recordAudit } from '../../audit/record.ts';
import { allowList } from '../../events/component.ts';
import type { Config } from '../../config.ts';
import type { Queryable } from '../../db/pool.ts';
import { ApiError } from '../../domain/envelope.ts';
import type { ApiDeps, ConsoleSettings, InviteMailer } from '../deps.ts';
import { internal } from '../openapi.ts';
import { html } from './html.ts';
import { type Assets, may, page, type PageContext } from './layout.ts';
import { consoleAudit, COOKIE, type ConsoleDeps, type Form, type Upload } from './context.ts';
import { registerAuthPages } from './pages-auth.ts';
import { registerFaxPages } from './pages-fax.ts';
import { registerInboxPages } from './pages-inbox.ts';
import { registerTeamPages } from './pages-team.ts';
import { registerSettingsPages } from './pages-settings.ts';
import { registerDefaultsPages } from './pages-defaults.ts';
import { registerAuditPages } from './pages-audit.ts';

/**
 * Invitation mails: with no outgoing mail server (SMTP_RELAY unset) nothing is sent and the console
 * shows the link to the inviter, who passes it on (it is shown either way).
 */
export const sendInvitationMail: InviteMailer = async () => undefined;

/**
 * With SMTP_RELAY set, an invitation is queued in PostgreSQL's outgoing mail (mail_outbox, sent by the
 * mail component with back-off: docs/mail.md), so it survives a restart and any replica may send it.
 */
export function queuedInvitationMail(db: Queryable): InviteMailer {
  return async (to, link, invitedBy, accountId) => {
    // Sealed with the workspace's data key: the one-time link in it sets a password.
    await enqueueMail(db, {
      accountId,
      to,
      subject: 'You are invited to a faxline workspace',
      text:
        `${invitedBy} invited you to their faxline workspace.\n\n` +
        `Set your password with this one-time link:\n${link}\n\n` +
        'If you did not expect this mail, ignore it: nothing happens until the link is used.\n',
    });
  };
}

export const defaultConsoleSettings: ConsoleSettings = {
  timeouts: { idleSeconds: 30 * 60, absoluteSeconds: 12 * 3600 },
  limits: { perEmail: 5, perAddress: 20, windowSeconds: 900 },
  cookieSecure: 'auto',
  inviteSeconds: 72 * 3600,
  mailInvite: sendInvitationMail,
};

export function consoleSettings(cfg: Config, db?: Queryable): ConsoleSettings {
  return {
    timeouts: {
      idleSeconds: cfg.CONSOLE_SESSION_IDLE_MINUTES * 60,
      absoluteSeconds: cfg.CONSOLE_SESSION_MAX_HOURS * 3600,
    },
    limits: {
      perEmail: cfg.CONSOLE_SIGNIN_FAILURES_PER_EMAIL,
      perAddress: cfg.CONSOLE_SIGNIN_FAILURES_PER_ADDRESS,
      windowSeconds: cfg.CONSOLE_SIGNIN_WINDOW_SECONDS,
    },
    cookieSecure: cfg.CONSOLE_COOKIE_SECURE,
    inviteSeconds: cfg.CONSOLE_INVITE_HOURS * 3600,
    mailInvite: db && cfg.SMTP_RELAY !== '' ? queuedInvitationMail(db) : sendInvitationMail,
    webhooks: { allow: allowList(cfg), maxEndpoints: cfg.WEBHOOK_ENDPOINTS_PER_ACCOUNT },
  };
}

const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'self'; img-src 'self' data:; script-src 'self'; style-src 'self'; object-src 'none'; " +
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'same-origin',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'permissions-policy': 'camera=(), microphone=(), geolocation=()',
};

/** Sends the user to sign in (GET) or refuses (any other method). */
class SignInNeeded extends Error {}
class Forbidden extends Error {}

function loadAssets(): { files: Map<string, { body: Buffer; type: string; etag: string }>; names: Assets } {
  const files = new Map<string, { body: Buffer; type: string; etag: string }>();
  const names: Record<string, string> = {};
  for (const [file, ext, type] of [
    ['console.css', 'css', 'text/css; charset=utf-8'],
    ['console.js', 'js', 'text/javascript; charset=utf-8'],
  ] as const) {
    const body = readFileSync(new URL(`./assets/${file}`, import.meta.url));
    const hash = createHash('sha256').update(body).digest('hex').slice(0, 12);
    const name = `console.${hash}.${ext}`;
    files.set(name, { body, type, etag: `"${hash}"` });
    names[ext] = name;
  }
  return { files, names: { css: names.css!, js: names.js! } };
}

function parseCookies(h: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (h ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0) out.set(part.slice(0, i).trim(), part.slice(i + 1).trim());
  }
  return out;
}

const LOOPBACK = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/i;

/** The request's own origin, as the browser names it (scheme from the proxy only when trusted). */
function ownOrigin(req: FastifyRequest): string {
  return `${req.protocol}://${req.headers.host ?? ''}`;
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Builds the Form of a request, from a urlencoded body or a multipart one (files with their names). */
function formOf(req: FastifyRequest): Form {
  const text = new Map<string, string[]>();
  const files = new Map<string, Upload[]>();
  const body = req.body as unknown;
  if (body instanceof URLSearchParams) {
    for (const [k, v] of body) text.set(k, [...(text.get(k) ?? []), v]);
  } else if (body && typeof body === 'object') {
    for (const [k, raw] of Object.entries(body as Record<string, unknown>)) {
      for (const part of [raw].flat() as { type?: string; value?: unknown; filename?: string }[]) {
        if (!part || typeof part !== 'object') continue;
        if (part.type === 'file') {
          const data = part.value as Buffer;
          // An empty file input still sends one part, with no name and no bytes: not a document.
          if (part.filename || data.length > 0)
            files.set(k, [...(files.get(k) ?? []), { fileName: part.filename ?? '', data }]);
        } else text.set(k, [...(text.get(k) ?? []), String(part.value ?? '')]);
      }
    }
  }
  return {
    get: (n) => text.get(n)?.[0],
    all: (n) => text.get(n) ?? [],
    files: (n) => files.get(n) ?? [],
  };
}

export async function registerConsole(app: FastifyInstance, d: ApiDeps): Promise<void> {
  const s = d.console ?? defaultConsoleSettings;
  const { files, names } = loadAssets();

  await app.register(multipart, {
    attachFieldsToBody: true,
    // Files are read whole (a fax's documents are checked and stored whole anyway), within the API's limits.
    onFile: async (part) => {
      (part as unknown as { value: Buffer }).value = await part.toBuffer();
    },
    limits: {
      fileSize: d.maxDocumentBytes,
      files: 20,
      fields: 200,
      // Hidden fields carry a previewed fax's documents (Base64) to "Send".
      fieldSize: d.maxRequestBytes,
      parts: 240,
    },
  });
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) =>
    done(null, new URLSearchParams(body as string)),
  );

  let lastSweep = 0;
  app.addHook('onRequest', async (req, reply) => {
    void reply.headers(SECURITY_HEADERS);
    if (req.url.startsWith('/console/assets/')) return;
    const cookie = parseCookies(req.headers.cookie).get(COOKIE);
    const now = d.clock.now();
    req.consoleUser = cookie ? await sessionUser(d.db, cookie, now, s.timeouts) : null;
    if (now.getTime() - lastSweep > 600_000) {
      lastSweep = now.getTime();
      void sweepSessions(d.db, now, s.timeouts).catch((err: unknown) =>
        req.log.warn({ err }, 'console session sweep failed'),
      );
    }
  });

  // Every request that changes something: the Origin (when the browser sends one, as all current ones
  // do on POST) must be this site's, and the form must carry the session's CSRF token.
  app.addHook('preHandler', async (req) => {
    if (req.method === 'GET' || req.method === 'HEAD') return;
    const origin = req.headers.origin;
    if (origin !== undefined && origin !== ownOrigin(req))
      throw new ApiError(403, 'This request came from another site and was refused.');
    const url = req.routeOptions.url ?? '';
    if (url === '/console/sign-in' || url.startsWith('/console/invite/')) return; // no session yet
    const u = req.consoleUser;
    if (!u) throw new SignInNeeded();
    const given = formOf(req).get('_csrf') ?? (req.headers['x-csrf-token'] as string | undefined) ?? '';
    if (!sameText(given, u.csrf))
      throw new ApiError(
        403,
        'The form is out of date or incomplete (its security token is missing or wrong); reload the page and try again.',
      );
  });

  const unreadCount = async (u: SessionUser): Promise<number> =>
    (
      await d.tenant.tx(u.accountId, (c) =>
        c.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM received_faxes WHERE read_at IS NULL AND deleted_at IS NULL AND status <> 'receiving'",
        ),
      )
    ).rows[0]!.n;

  const cd: ConsoleDeps = {
    d,
    s,
    assets: names,
    auth: d.db,
    async render(req, reply, title, body, o = {}) {
      const u = req.consoleUser ?? null;
      const ctx: PageContext = {
        user: u,
        assets: names,
        ...(u ? { unread: await unreadCount(u) } : {}),
        ...(o.current !== undefined ? { current: o.current } : {}),
      };
      return reply
        .code(o.status ?? 200)
        .type('text/html; charset=utf-8')
        .header('cache-control', 'no-store')
        .send(page(title, ctx, body));
    },
    userOf(req, need) {
      const u = req.consoleUser;
      if (!u) throw new SignInNeeded();
      if (need && !may(u.role, need)) throw new Forbidden();
      return u;
    },
    form: formOf,
    setCookie(req, reply, value, maxAge) {
      const secure =
        s.cookieSecure === 'true' ||
        (s.cookieSecure === 'auto' && (req.protocol === 'https' || LOOPBACK.test(req.headers.host ?? '')));
      void reply.header(
        'set-cookie',
        `${COOKIE}=${value}; Path=/console; HttpOnly; SameSite=Lax; Max-Age=${maxAge}${secure ? '; Secure' : ''}`,
      );
    },
    async record(u, action, o) {
      await d.tenant.tx(u.accountId, async (c) => {
        await c.query(
          'INSERT INTO console_actions (account_id, user_id, email, action, job_id, request_id) VALUES ($1, $2, $3, $4, $5, $6)',
          [u.accountId, u.userId, u.email, action, o.jobId ?? null, o.requestId ?? null],
        );
        // The audit trail (docs/audit-retention.md) gets the action without what follows its ':'
        // (a target user's email stays in console_actions, out of the trail), in the same transaction.
        await recordAudit(
          c,
          consoleAudit(u.accountId, u.userId, o.req, action.split(':')[0]!, {
            object: o.object ?? (o.jobId ? { type: 'fax', id: o.jobId } : null),
          }),
        );
      });
    },
  };

  app.setErrorHandler(async (err, req, reply) => {
    if (err instanceof SignInNeeded) {
      if (req.method === 'GET') return reply.redirect('/console/sign-in', 303);
      return cd.render(
        req,
        reply,
        'Sign in needed',
        html`<p class="alert">Your session has ended. <a href="/console/sign-in">Sign in</a> again.</p>`,
        { status: 401 },
      );
    }
    if (err instanceof Forbidden)
      return cd.render(
        req,
        reply,
        'Not allowed',
        html`<p class="alert">Your role (${req.consoleUser?.role ?? ''}) may not do this.</p>`,
        { status: 403 },
      );
    const e = err as { code?: string; statusCode?: number; message?: string };
    const status =
      err instanceof ApiError
        ? err.http
        : e.code === 'FST_REQ_FILE_TOO_LARGE' || e.code === 'FST_ERR_CTP_BODY_TOO_LARGE'
          ? 413
          : e.statusCode && e.statusCode >= 400 && e.statusCode < 500
            ? e.statusCode
            : 500;
    const message =
      err instanceof ApiError
        ? err.message
        : status === 413
          ? `A document or the form is too large (documents up to ${d.maxDocumentBytes} bytes).`
          : status < 500
            ? (e.message ?? 'Bad request')
            : 'Something went wrong; try again.';
    if (status >= 500) req.log.error({ err }, 'console request failed');
    return cd.render(
      req,
      reply,
      status === 404 ? 'Not found' : 'Cannot do that',
      html`<p class="alert">${message}</p>`,
      { status },
    );
  });

  app.get<{ Params: { name: string } }>('/console/assets/:name', { schema: internal }, async (req, reply) => {
    const f = files.get(req.params.name);
    if (!f) throw new ApiError(404, 'No such file.');
    void reply.header('etag', f.etag).header('cache-control', 'public, max-age=31536000, immutable');
    if (req.headers['if-none-match'] === f.etag) return reply.code(304).send();
    return reply.type(f.type).send(f.body);
  });

  app.get('/console', { schema: internal }, async (_req, reply) => reply.redirect('/console/', 301));
  app.get('/console/', { schema: internal }, async (req, reply) =>
    reply.redirect(req.consoleUser ? '/console/outbox' : '/console/sign-in', 303),
  );

  registerAuthPages(app, cd);
  registerFaxPages(app, cd);
  registerInboxPages(app, cd);
  registerTeamPages(app, cd);
  registerSettingsPages(app, cd);
  registerDefaultsPages(app, cd);
  registerAuditPages(app, cd);
}
