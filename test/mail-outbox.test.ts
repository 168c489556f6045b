// The outgoing mail queue's hygiene (issue 30; docs/mail.md "The outgoing queue"): a mail the relay
// keeps refusing is given up after MAIL_GIVE_UP_HOURS (marked failed, counted, logged without content)
// while a younger one is still retried; sent and given-up rows go MAIL_KEEP_DAYS after they ended, in
// batches, by the retention schedule; the queue's own text (a refusal repeats the sender's subject) is
// stored sealed and arrives readable.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { enqueue, purgeOutbox } from '../src/accounts/mail.ts';
import { twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { eventually } from './support/harness.ts';
import { startCapture, type Capture } from './support/mail.ts';

describe('mail outbox: giving up, purging, sealed text', () => {
  let t: TwoAccounts;
  let relayPort: number;
  let capture: Capture | null = null;

  before(async () => {
    const c0 = await startCapture();
    relayPort = c0.port;
    await c0.close(); // the relay is down until a test starts it again on this port
    t = await twoAccounts({
      SMTP_RELAY: `smtp://127.0.0.1:${relayPort}`,
      MAIL_POLL_MS: '100',
      MAIL_RETRY_SECONDS: '1',
      MAIL_GIVE_UP_HOURS: '48',
      MAIL_KEEP_DAYS: '7',
      RETENTION_PURGE_CRON: '* * * * *',
    });
  });
  after(async () => {
    await t?.close();
    await capture?.close();
  });

  const row = async (id: string) =>
    (
      await t.owner.query<{
        attempts: number;
        failed_at: Date | null;
        sent_at: Date | null;
        subject: string | null;
        body: string | null;
      }>('SELECT attempts, failed_at, sent_at, subject, body FROM mail_outbox WHERE id = $1', [id])
    ).rows[0];

  it('a mail refused past MAIL_GIVE_UP_HOURS is marked failed and not tried again; a younger one is retried', async () => {
    const old = await enqueue(t.owner, {
      accountId: t.a.account_id,
      kind: 'refused',
      to: ['doctor@clinic.test'],
      subject: 'Fax not sent: Lab results of Jane Roe',
      body: 'Reason: the attachment "jane-roe.docx" is not a PDF',
    });
    await t.owner.query(`UPDATE mail_outbox SET created_at = now() - interval '49 hours' WHERE id = $1`, [
      old,
    ]);
    const young = await enqueue(t.owner, {
      accountId: t.a.account_id,
      kind: 'text',
      to: ['someone@clinic.test'],
      subject: 'Young',
      body: 'still retried',
    });
    await eventually(async () => (await row(old))?.failed_at != null, 60_000);
    const given = (await row(old))!;
    assert.equal(given.sent_at, null);
    await eventually(async () => ((await row(young))?.attempts ?? 0) >= 2, 60_000);
    assert.equal((await row(young))!.failed_at, null, 'the young mail is still retried');
    assert.equal((await row(old))!.attempts, given.attempts, 'the given-up mail is not tried again');
    const m = await fetch(`${t.s.url}/metrics`).then((r) => r.text());
    assert.match(m, /faxline_mail_outgoing_total\{[^}]*kind="refused"[^}]*outcome="failed"[^}]*\} 1/);
    const line = t.s.logs.lines.find((l) => l.includes('given up after MAIL_GIVE_UP_HOURS'));
    assert.ok(line, 'logged');
    assert.match(line, new RegExp(`"mailId":"${old}"`));
    assert.doesNotMatch(line, /Jane|Roe|clinic\.test|Lab results/, 'without content or address');
  });

  it('sent and given-up rows go MAIL_KEEP_DAYS after they ended, in batches, by the retention schedule', async () => {
    const ins = async (sql: string) =>
      (
        await t.owner.query<{ id: string }>(
          `INSERT INTO mail_outbox (account_id, kind, to_addr, attempts, created_at, sent_at, failed_at)
           VALUES ($1, 'text', ARRAY['x@clinic.test'], 1, ${sql}) RETURNING id::text`,
          [t.a.account_id],
        )
      ).rows[0]!.id;
    const gone = [
      await ins(`now() - interval '9 days', now() - interval '8 days', NULL`),
      await ins(`now() - interval '9 days', now() - interval '8 days', NULL`),
      await ins(`now() - interval '9 days', now() - interval '8 days', NULL`),
      await ins(`now() - interval '12 days', NULL, now() - interval '10 days'`),
    ];
    const kept = [
      await ins(`now() - interval '2 days', now() - interval '1 day', NULL`),
      await ins(`now() - interval '9 days', NULL, now() - interval '6 days'`),
    ];
    // Pending (neither sent nor given up, however old) is never purged: give it a far next attempt.
    const pending = await ins(`now() - interval '30 days', NULL, NULL`);
    await t.owner.query(`UPDATE mail_outbox SET next_attempt_at = now() + interval '1 day' WHERE id = $1`, [
      pending,
    ]);
    // One bounded batch, as the schedule runs them.
    const n = await purgeOutbox(t.owner, new Date(), 7, 2);
    assert.equal(n, 2);
    // The retention schedule (every minute here) takes the rest.
    await eventually(async () => {
      const r = await t.owner.query(
        'SELECT count(*)::int AS n FROM mail_outbox WHERE id = ANY($1::bigint[])',
        [gone],
      );
      return r.rows[0].n === 0;
    }, 150_000);
    const left = await t.owner.query<{ id: string }>(
      'SELECT id::text FROM mail_outbox WHERE id = ANY($1::bigint[]) ORDER BY id',
      [[...kept, pending]],
    );
    assert.deepEqual(
      left.rows.map((r) => r.id),
      [...kept, pending],
    );
  });

  it('the subject and body of a queued mail are stored sealed and arrive readable', async () => {
    const id = await enqueue(t.owner, {
      accountId: t.b.account_id,
      kind: 'refused',
      to: ['tech@lab.test'],
      subject: 'Fax not sent: Biopsy of John Doe',
      body: 'Reason: the attachment "john-doe.docx" is not a PDF',
    });
    const stored = (await row(id))!;
    assert.match(stored.subject!, /^fxc1:/);
    assert.match(stored.body!, /^fxc1:/);
    const raw = await t.owner.query(
      `SELECT count(*)::int AS n FROM mail_outbox WHERE id = $1
      AND (subject LIKE '%John%' OR body LIKE '%john%')`,
      [id],
    );
    assert.equal(raw.rows[0].n, 0, 'no clear text in the row');
    capture = await startCapture(relayPort);
    await eventually(
      async () => capture!.messages.some((m) => m.mail.subject === 'Fax not sent: Biopsy of John Doe'),
      90_000,
    );
    const m = capture.messages.find((x) => x.mail.subject === 'Fax not sent: Biopsy of John Doe')!;
    assert.match(m.mail.text ?? '', /"john-doe\.docx" is not a PDF/);
    assert.deepEqual(m.envelopeTo, ['tech@lab.test']);
  });
});
