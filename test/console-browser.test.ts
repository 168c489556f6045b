// The web console in a real browser (issue 29): Debian's chromium, headless, driven by
// playwright-core. One browser, one context per person. Every page visited gets an axe-core check
// (no serious or critical violation) and a screenshot in test-output/console-screenshots/
// (git-ignored; FAXLINE_SCREENSHOTS overrides the folder).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import axe from 'axe-core';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { DemoSeed } from '../src/admin/seed.ts';
import { createUser } from '../src/auth/console-users.ts';
import { seedAccount } from './support/client.ts';
import { seedReceived } from './support/console.ts';
import { startService } from './support/harness.ts';
import { makePdf } from './support/pdf.ts';
import { skipUnless } from './support/skips.ts';

const CHROMIUM = '/usr/bin/chromium';
const PW = 'correct horse battery';
const SHOTS =
  process.env.FAXLINE_SCREENSHOTS ?? join(import.meta.dirname, '..', 'test-output', 'console-screenshots');
const axeSource = axe.source;

describe(
  'web console in chromium',
  skipUnless(
    existsSync(CHROMIUM) ? false : `no ${CHROMIUM} (apt-get install chromium; scripts/system-packages.sh)`,
  ),
  () => {
    let s: Awaited<ReturnType<typeof startService>>;
    let a: DemoSeed;
    let b: DemoSeed;
    let browser: Browser;
    let received: string;
    const checked: string[] = [];
    // The tests below are one visit in four steps (each within its own time bound: on a slow, busy
    // machine the whole visit, with an axe check and a screenshot of every page, took longer than
    // one test's 180 s, CI of stop 39): the nurse's page and the fax she sent carry over.
    let page: Page;
    let jobId = '';

    before(async () => {
      mkdirSync(SHOTS, { recursive: true });
      // The simulated line at 4x: a one-page fax takes seconds, so the Outbox shows it change.
      s = await startService({ env: { SIM_SPEEDUP: '4' } });
      a = await seedAccount(s);
      b = await seedAccount(s);
      const owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
      await owner.connect();
      try {
        await createUser(owner, {
          accountId: a.account_id,
          email: 'nurse@example.com',
          role: 'owner',
          password: PW,
        });
        await createUser(owner, {
          accountId: a.account_id,
          email: 'reader@example.com',
          role: 'viewer',
          password: PW,
        });
        await createUser(owner, {
          accountId: b.account_id,
          email: 'elsewhere@example.com',
          role: 'owner',
          password: PW,
        });
      } finally {
        await owner.end();
      }
      received = await seedReceived(s.cfg.DATABASE_URL, {
        accountId: a.account_id,
        to: a.numbers[0]!,
        remoteIdent: 'LAB <b>RESULTS</b>',
      });
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        headless: true,
        timeout: 120_000,
        args: [
          ...(process.getuid?.() === 0 ? ['--no-sandbox'] : []),
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-sync',
          '--disable-quic',
          '--no-first-run',
          '--disable-dev-shm-usage',
        ],
      });
    });
    after(async () => {
      await browser?.close();
      await s?.dropAll();
    });

    /** axe-core in the page: no serious or critical violation; then a screenshot named `name`. */
    async function check(page: Page, name: string): Promise<void> {
      await page.evaluate(axeSource);
      const violations = (await page.evaluate(
        `axe.run(document, { resultTypes: ['violations'] }).then(r => r.violations.map(v => ({ id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 3) })))`,
      )) as { id: string; impact: string; nodes: string[] }[];
      const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
      assert.deepEqual(bad, [], `${name}: ${JSON.stringify(bad)}`);
      await page.screenshot({
        path: join(SHOTS, `${String(checked.length + 1).padStart(2, '0')}-${name}.png`),
        fullPage: true,
      });
      checked.push(name);
    }

    async function signIn(email: string): Promise<Page> {
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      page.setDefaultTimeout(60_000);
      await page.goto(`${s.url}/console/`);
      await page.getByLabel('Email').fill(email);
      await page.getByLabel('Password').fill(PW);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL(/\/console\/(send|outbox)$/);
      return page;
    }

    it('signs in, previews a PDF, sends it and watches it reach delivered in the Outbox without reloading', async () => {
      const ctx = await browser.newContext();
      page = await ctx.newPage();
      page.setDefaultTimeout(60_000);
      await page.goto(`${s.url}/console/`);
      await check(page, 'sign-in');
      await page.getByLabel('Email').fill('nurse@example.com');
      await page.getByLabel('Password').fill(PW);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL(/\/console\/send$/);
      await check(page, 'new-fax');

      await page.getByLabel('To').fill('+15551234567');
      await page
        .getByLabel('Document')
        .setInputFiles({ name: 'referral.pdf', mimeType: 'application/pdf', buffer: await makePdf(2) });
      await page.getByLabel('Subject').fill('Referral');
      await page.getByRole('button', { name: 'Preview' }).click();
      await page.getByRole('heading', { name: 'Preview' }).waitFor();
      assert.match((await page.locator('#page-count').textContent())!, /2\s+page\(s\)/);
      const images = page.locator('.pages img');
      assert.equal(await images.count(), 2);
      assert.ok(
        await images
          .first()
          .evaluate(
            (img) => (img as unknown as { complete: boolean; naturalWidth: number }).naturalWidth > 1000,
          ),
      );
      await check(page, 'preview');

      await page.getByRole('button', { name: 'Send' }).click();
      await page.waitForURL(/\/console\/outbox\/[0-9a-f-]{36}$/);
      jobId = page.url().split('/').pop()!;
      await check(page, 'fax');

      await page.getByRole('link', { name: 'Outbox' }).click();
      await page.waitForURL(/\/console\/outbox$/);
      const cell = page.locator(`[data-live-job="${jobId}"]`);
      const first = (await cell.textContent())!.trim();
      assert.notEqual(
        first,
        'delivered',
        'shown before it was delivered (else nothing would be seen to change)',
      );
      await page.evaluate('window.__notReloaded = true');
      // A function, not a string: the page's CSP forbids eval.
      await page.waitForFunction(
        (id) =>
          (globalThis as any).document.querySelector(`[data-live-job="${id}"]`)?.textContent === 'delivered',
        jobId,
        { timeout: 150_000 }, // within the test's own 180 s, so that this says what was waited for
      );
      assert.equal(await page.evaluate('window.__notReloaded'), true, 'the page was not reloaded');
      await check(page, 'outbox');

      await page.goto(`${s.url}/console/outbox/${jobId}`);
      assert.match((await page.locator('main').textContent())!, /nurse@example\.com/);
      await check(page, 'fax-delivered');
    });

    it('shows the Inbox: the unread badge, a received fax as images, its CSID as text', async () => {
      assert.ok(jobId, 'the first test sent no fax');
      // The Inbox: unread badge, the received fax in the page as images, its CSID as text.
      const badge = page.locator('.badge');
      assert.equal((await badge.textContent())!.trim(), '1');
      await page.getByRole('link', { name: 'Inbox' }).click();
      await check(page, 'inbox');
      await page.locator(`a[href="/console/inbox/${received}"]`).click();
      await page.waitForURL(new RegExp(`/console/inbox/${received}$`));
      await page.locator('.pages img').first().waitFor();
      await page.waitForFunction(() => {
        const img = (globalThis as any).document.querySelector('.pages img');
        return !!img && img.complete && img.naturalWidth > 1000;
      });
      assert.equal((await page.locator('#csid').textContent())!.trim(), 'LAB <b>RESULTS</b>');
      assert.equal(await page.locator('#csid b').count(), 0, 'the CSID is text, not markup');
      await check(page, 'inbox-fax');
    });

    it('passes axe on every page of the console; adds a webhook; opens a Fax Default and the report', async () => {
      assert.ok(jobId, 'the first test sent no fax');
      for (const [link, name] of [
        ['Contacts', 'contacts'],
        ['Numbers', 'numbers'],
        ['Users', 'users'],
        ['API keys', 'api-keys'],
        ['Cover pages', 'cover-pages'],
        ['Fax Defaults', 'fax-defaults'],
        ['Webhooks', 'webhooks'],
        ['Mail senders', 'mail-senders'],
        ['Audit', 'audit'],
      ] as const) {
        await page.getByRole('link', { name: link, exact: true }).click();
        await page.getByRole('heading', { name: link, exact: true }).waitFor();
        await check(page, name);
      }

      // The fax's transmission report through the console session (a PDF, not an API path).
      const report = await page.request.get(`${s.url}/console/outbox/${jobId}/report`);
      assert.equal(report.status(), 200);
      assert.equal(report.headers()['content-type'], 'application/pdf');

      // A webhook added with the keyboard-labelled form; its secret shown once; its URL as text.
      await page.getByRole('link', { name: 'Webhooks', exact: true }).click();
      await page.getByLabel('URL').fill('https://example.com/<b>hook</b>');
      await page.getByLabel('fax.delivered').check();
      await page.getByRole('button', { name: 'Add webhook' }).click();
      await page.locator('#webhook-secret').waitFor();
      assert.match((await page.locator('#webhook-secret').textContent())!, /^whsec_/);
      assert.equal(await page.locator('td.webhook-url b').count(), 0, 'the URL is text, not markup');
      await check(page, 'webhook-created');

      // A Fax Default's edit page.
      await page.getByRole('link', { name: 'Fax Defaults', exact: true }).click();
      await page
        .getByRole('link', { name: /^Edit / })
        .first()
        .click();
      await page.getByRole('heading', { name: /^Fax Default / }).waitFor();
      await check(page, 'fax-default-edit');
    });

    it('signs out and is refused after; another account’s user sees none of it', async () => {
      assert.ok(jobId, 'the first test sent no fax');
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByText('You are signed out').waitFor();
      await check(page, 'signed-out');
      await page.goto(`${s.url}/console/outbox`);
      assert.match(page.url(), /\/console\/sign-in$/, 'refused after sign-out');
      await page.goto(`${s.url}/console/outbox/${jobId}`);
      assert.match(page.url(), /\/console\/sign-in$/);
      await page.context().close();

      // Another account's user sees none of it.
      const other = await signIn('elsewhere@example.com');
      await other.getByRole('link', { name: 'Outbox' }).click();
      assert.equal(await other.locator(`[data-live-job="${jobId}"]`).count(), 0);
      assert.match((await other.locator('main').textContent())!, /No faxes yet/);
      await check(other, 'other-account-outbox');
      await other.getByRole('link', { name: 'Inbox' }).click();
      assert.match((await other.locator('main').textContent())!, /No received faxes/);
      const theirs = await other.goto(`${s.url}/console/outbox/${jobId}`);
      assert.equal(theirs?.status(), 404);
      const theirFax = await other.goto(`${s.url}/console/inbox/${received}`);
      assert.equal(theirFax?.status(), 404);
      await other.context().close();
    });

    it('a viewer has no "New fax" link', async () => {
      const page = await signIn('reader@example.com');
      assert.equal(await page.getByRole('link', { name: 'New fax' }).count(), 0);
      assert.equal(await page.getByRole('link', { name: 'Outbox' }).count(), 1);
      assert.equal(await page.getByRole('link', { name: 'Users' }).count(), 0);
      for (const hidden of ['Webhooks', 'Mail senders', 'Audit'])
        assert.equal(await page.getByRole('link', { name: hidden, exact: true }).count(), 0, hidden);
      assert.equal(
        await page.getByRole('link', { name: 'Fax Defaults', exact: true }).count(),
        1,
        'read only',
      );
      await check(page, 'viewer-outbox');
      const refused = await page.goto(`${s.url}/console/send`);
      assert.equal(refused?.status(), 403);
      await page.context().close();
    });
  },
);
