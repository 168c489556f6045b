// Sign in, sign out, and the one-time invitation link that sets a new user's password.
import type { FastifyInstance } from 'fastify';
import { recordAudit } from '../../audit/record.ts';
import {
  acceptInvite,
  ConsoleUserError,
  inviteEmail,
  PASSWORD_MIN,
  signIn,
  signOut,
} from '../../auth/console-users.ts';
import { internal } from '../openapi.ts';
import { html } from './html.ts';
import { consoleAudit, COOKIE, type ConsoleDeps } from './context.ts';
import { describedBy, fieldError } from './layout.ts';

/** One message for an unknown email, a wrong password and a disabled user: nothing to enumerate. */
export const SIGNIN_FAILED = 'Email or password is not correct, or the user is disabled.';

function signInForm(email: string, error?: string) {
  return html`${error ? html`<p class="alert" role="alert" id="signin-error">${error}</p>` : ''}
    <form method="post" action="/console/sign-in">
      <label for="email">Email</label>
      <input
        id="email"
        name="email"
        type="email"
        autocomplete="username"
        required
        value="${email}"
        ${error ? html` aria-describedby="signin-error"` : ''}
      />
      <label for="password">Password</label>
      <input id="password" name="password" type="password" autocomplete="current-password" required />
      <button type="submit">Sign in</button>
    </form>`;
}

export function registerAuthPages(app: FastifyInstance, cd: ConsoleDeps): void {
  const { d, s } = cd;

  app.get('/console/sign-in', { schema: internal }, async (req, reply) => {
    if (req.consoleUser) return reply.redirect('/console/outbox', 303);
    return cd.render(req, reply, 'Sign in', signInForm(''));
  });

  app.post('/console/sign-in', { schema: internal }, async (req, reply) => {
    const f = cd.form(req);
    const email = f.get('email') ?? '';
    const r = await signIn(cd.auth, {
      email,
      password: (f.get('password') ?? '').slice(0, 1024),
      address: req.ip,
      now: d.clock.now(),
      limits: s.limits,
    });
    if (!r.ok) {
      // A failed sign-in to an existing user is in its account's audit trail (an unknown email has no
      // account to record it in; both are counted by the throttle).
      if (r.reason === 'invalid' && r.user) {
        const who = r.user;
        await d.tenant.tx(who.accountId, (c) =>
          recordAudit(
            c,
            consoleAudit(who.accountId, who.userId, req, 'console.sign_in', {
              result: 'refused',
              status: 401,
            }),
          ),
        );
      }
      if (r.reason === 'throttled') {
        void reply.header('retry-after', String(r.retryAfterSeconds));
        return cd.render(
          req,
          reply,
          'Sign in',
          signInForm(
            email,
            `Too many failed sign-ins; try again in ${Math.ceil(r.retryAfterSeconds / 60)} minute(s).`,
          ),
          { status: 429 },
        );
      }
      return cd.render(req, reply, 'Sign in', signInForm(email, SIGNIN_FAILED), { status: 401 });
    }
    // An earlier session of this browser ends: a new sign-in never reuses a session id.
    const old = req.headers.cookie?.match(new RegExp(`(?:^|;\\s*)${COOKIE}=([^;]+)`))?.[1];
    if (old) await signOut(cd.auth, old);
    cd.setCookie(req, reply, r.cookie, s.timeouts.absoluteSeconds);
    req.log.info({ userId: r.user.userId, accountId: r.user.accountId }, 'console sign-in');
    const who = r.user;
    await d.tenant.tx(who.accountId, (c) =>
      recordAudit(c, consoleAudit(who.accountId, who.userId, req, 'console.sign_in', { status: 303 })),
    );
    return reply.redirect(r.user.role === 'viewer' ? '/console/outbox' : '/console/send', 303);
  });

  app.post('/console/sign-out', { schema: internal }, async (req, reply) => {
    const cookie = req.headers.cookie?.match(new RegExp(`(?:^|;\\s*)${COOKIE}=([^;]+)`))?.[1];
    if (cookie) await signOut(cd.auth, cookie);
    cd.setCookie(req, reply, '', 0);
    req.consoleUser = null;
    return cd.render(
      req,
      reply,
      'Signed out',
      html`<p class="notice">You are signed out.</p>
        <p><a href="/console/sign-in">Sign in</a> again.</p>`,
    );
  });

  const inviteForm = (token: string, email: string, error?: string) =>
    html`<p>Choose a password for <strong>${email}</strong> (at least ${PASSWORD_MIN} characters).</p>
      <form method="post" action="/console/invite/${token}">
        <label for="password">New password</label>
        <input
          id="password"
          name="password"
          type="password"
          autocomplete="new-password"
          required
          minlength="${PASSWORD_MIN}"
          ${describedBy('password', error)}
        />
        ${fieldError('password', error)}
        <button type="submit">Set password</button>
      </form>`;
  const invalid = html`<p class="alert">
    This invitation link is not valid: it was used already, it expired, or it was mistyped. Ask whoever
    invited you for a new one.
  </p>`;

  app.get<{ Params: { token: string } }>(
    '/console/invite/:token',
    { schema: internal },
    async (req, reply) => {
      void reply.header('referrer-policy', 'no-referrer');
      const email = await inviteEmail(cd.auth, req.params.token, d.clock.now());
      if (!email) return cd.render(req, reply, 'Invitation', invalid, { status: 404 });
      return cd.render(req, reply, 'Invitation', inviteForm(req.params.token, email));
    },
  );

  app.post<{ Params: { token: string } }>(
    '/console/invite/:token',
    { schema: internal },
    async (req, reply) => {
      const now = d.clock.now();
      const email = await inviteEmail(cd.auth, req.params.token, now);
      if (!email) return cd.render(req, reply, 'Invitation', invalid, { status: 404 });
      try {
        const okay = await acceptInvite(cd.auth, req.params.token, cd.form(req).get('password') ?? '', now);
        if (!okay) return cd.render(req, reply, 'Invitation', invalid, { status: 404 });
      } catch (err) {
        if (err instanceof ConsoleUserError)
          return cd.render(req, reply, 'Invitation', inviteForm(req.params.token, email, err.message), {
            status: 422,
          });
        throw err;
      }
      return cd.render(
        req,
        reply,
        'Invitation',
        html`<p class="notice">Your password is set.</p>
          <p><a href="/console/sign-in">Sign in</a></p>`,
      );
    },
  );
}
