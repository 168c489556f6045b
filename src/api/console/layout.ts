// The console's page frame: landmarks (header with navigation, main, a skip link), the navigation a
// role may use, "Sign out" on every page, the stylesheet and script by their hashed names.
import type { ConsoleRole, SessionUser } from '../../auth/console-users.ts';
import { html, type Html } from './html.ts';

export type Ability = 'send' | 'write' | 'manage' | 'audit';

/**
 * What each role may do: `send` faxes and act on them, `write` contacts and the inbox, `manage` the
 * team, keys and settings, `audit` read the audit trail (owners only, as GET /v1/audit-events).
 */
const abilities: Record<ConsoleRole, readonly Ability[]> = {
  owner: ['send', 'write', 'manage', 'audit'],
  admin: ['send', 'write', 'manage'],
  sender: ['send', 'write'],
  viewer: [],
};

export function may(role: ConsoleRole, a: Ability): boolean {
  return abilities[role].includes(a);
}

export interface Assets {
  css: string;
  js: string;
}

export interface PageContext {
  user: SessionUser | null;
  assets: Assets;
  unread?: number;
  current?: string;
}

const nav: { href: string; label: string; need?: Ability }[] = [
  { href: '/console/send', label: 'New fax', need: 'send' },
  { href: '/console/outbox', label: 'Outbox' },
  { href: '/console/inbox', label: 'Inbox' },
  { href: '/console/contacts', label: 'Contacts' },
  { href: '/console/cover-pages', label: 'Cover pages' },
  { href: '/console/fax-defaults', label: 'Fax Defaults' },
  { href: '/console/numbers', label: 'Numbers' },
  { href: '/console/users', label: 'Users', need: 'manage' },
  { href: '/console/api-keys', label: 'API keys', need: 'manage' },
  { href: '/console/webhooks', label: 'Webhooks', need: 'manage' },
  { href: '/console/mail-senders', label: 'Mail senders', need: 'manage' },
  { href: '/console/audit', label: 'Audit', need: 'audit' },
];

/** The hidden CSRF field every state-changing form carries. */
export function csrfField(user: SessionUser): Html {
  return html`<input type="hidden" name="_csrf" value="${user.csrf}" />`;
}

export function page(title: string, ctx: PageContext, body: Html): string {
  const u = ctx.user;
  const links = u
    ? nav
        .filter((n) => n.need === undefined || may(u.role, n.need))
        .map(
          (n) =>
            html`<li>
              <a href="${n.href}" ${ctx.current === n.href ? html` aria-current="page"` : ''}>${n.label}</a>${
                n.label === 'Inbox' && (ctx.unread ?? 0) > 0
                  ? html` <span class="badge" aria-label="${ctx.unread} unread">${ctx.unread}</span>`
                  : ''
              }
            </li>`,
        )
    : [];
  const header = u
    ? html`<header class="top">
        <p class="brand">faxline</p>
        <nav aria-label="Main">
          <ul>
            ${links}
          </ul>
        </nav>
        <div class="who">
          <span>${u.email} (${u.role})</span>
          <form class="inline" method="post" action="/console/sign-out">
            ${csrfField(u)}<button class="secondary" type="submit">Sign out</button>
          </form>
        </div>
      </header>`
    : html`<header class="top"><p class="brand">faxline</p></header>`;
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${title} · faxline</title>
        <link rel="stylesheet" href="/console/assets/${ctx.assets.css}" />
        <script src="/console/assets/${ctx.assets.js}" defer></script>
      </head>
      <body>
        <a class="skip" href="#main">Skip to content</a>
        ${header}
        <main id="main">
          <h1>${title}</h1>
          ${body}
        </main>
      </body>
    </html> `.text;
}

/** A field's error next to it (role=alert not used: the page is a fresh load; the text is in the label's vicinity). */
export function fieldError(id: string, msg: string | undefined): Html {
  return msg ? html`<p class="error" id="${id}-error">${msg}</p>` : html``;
}

/** aria attributes tying a field to its error. */
export function describedBy(id: string, msg: string | undefined): Html {
  return msg ? html` aria-invalid="true" aria-describedby="${id}-error"` : html``;
}

export function when(d: Date | string | null | undefined): string {
  if (!d) return '';
  const t = typeof d === 'string' ? new Date(d) : d;
  return t.toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
}
