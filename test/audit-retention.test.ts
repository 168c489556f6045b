// Issue 32, items 2 and 3: the audit trail (one event per audited request, with its actor, object,
// address, user agent and result; append-only for the service's roles; GET /v1/audit-events in cursor
// pages and CSV, confined to the account) and retention per account (PATCH /v1/workspace retention,
// the purge of content with its audit events, 410 Gone afterwards, zero footprint, DELETE .../content).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { retentionPass } from '../src/accounts/retention.ts';
import { auditAsQuery, recordAuditAs, type AuditEvent } from '../src/audit/record.ts';
import type { DemoSeed } from '../src/admin/seed.ts';
import { csvCell } from '../src/api/routes/audit-events.ts';
import { apiDatabaseUrl } from '../src/db/tenant-db.ts';
import { RETENTION_QUEUE } from '../src/scheduler/retention.ts';
import { assertRefused, twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { call, type Reply } from './support/client.ts';
import { eventually } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

const UA = 'audit-test/1.0 (=not a formula)';

interface EventRow {
  id: string;
  account_id: string;
  actor_type: string;
  actor_id: string | null;
  action: string;
  object_type: string | null;
  object_id: string | null;
  ip: string | null;
  user_agent: string | null;
  result: string;
  status: number | null;
  detail: Record<string, unknown> | null;
}

describe('audit trail and retention', () => {
  let s: TwoAccounts['s'], a: DemoSeed, b: DemoSeed, tokenA: string, tokenB: string, owner: pg.Client;
  let close: TwoAccounts['close'];
  let keyA: string;
  let pdf: string;

  before(async () => {
    ({ s, a, b, tokenA, tokenB, owner, close } = await twoAccounts());
    pdf = await makePdfBase64(1);
    keyA = (
      await owner.query<{ id: string }>('SELECT id FROM api_keys WHERE account_id = $1', [a.account_id])
    ).rows[0]!.id;
  });
  after(() => close());

  const api = (method: string, path: string, token: string, body?: unknown): Promise<Reply> =>
    call(s.url, method, path, {
      token,
      headers: { 'user-agent': UA },
      ...(body !== undefined ? { body } : {}),
    });
  const send = async (token: string, extra: object = {}): Promise<string> => {
    const r = await api('POST', '/v1/faxes/send', token, {
      fax_number: '+15551234567',
      fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
      ...extra,
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    return r.body.data.job_id as string;
  };
  const final = async (token: string, id: string): Promise<void> => {
    await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${id}`, { token });
      return ['delivered', 'failed'].includes(r.body.data?.state as string);
    }, 180_000); // a bound for a hang: beside seven other engineers' tests a fax took over 60 s
  };
  const events = async (accountId: string, where = 'true', values: unknown[] = []): Promise<EventRow[]> =>
    (
      await owner.query<EventRow>(
        `SELECT * FROM audit_events WHERE account_id = $1 AND ${where} ORDER BY created_at, id`,
        [accountId, ...values],
      )
    ).rows;
  const receivedFax = async (accountId: string): Promise<string> =>
    (
      await owner.query<{ id: string }>(
        `INSERT INTO received_faxes (account_id, to_number, status, pages, received_at, tiff, tiff_bytes)
         VALUES ($1, '+15550000000', 'received', 1, now(), '\\x49492a00'::bytea, 4) RETURNING id`,
        [accountId],
      )
    ).rows[0]!.id;

  it('writes exactly one event per audited request, with actor, object, address, user agent and result', async () => {
    const before = (await events(a.account_id)).length;
    const expected: {
      action: string;
      object_type: string | null;
      object_id: string | null;
      status: number;
    }[] = [];
    const expect = (r: Reply, action: string, object_type: string | null, object_id: string | null) =>
      expected.push({ action, object_type, object_id, status: r.http });

    const sent = await send(tokenA);
    expected.push({ action: 'fax.send', object_type: 'fax', object_id: sent, status: 200 });
    await final(tokenA, sent);
    const fwd = await api('POST', '/v1/faxes/forward', tokenA, { job_id: sent, fax_number: '+15557654321' });
    assert.equal(fwd.http, 200, JSON.stringify(fwd.body));
    expect(fwd, 'fax.forward', 'fax', fwd.body.data.job_id);
    const later = await send(tokenA, { scheduled_date: new Date(Date.now() + 86_400_000).toISOString() });
    expected.push({ action: 'fax.send', object_type: 'fax', object_id: later, status: 200 });
    const cancel = await api('POST', '/v1/faxes/cancel-schedule', tokenA, { job_id: later });
    assert.equal(cancel.http, 200, JSON.stringify(cancel.body));
    expect(cancel, 'fax.cancel', 'fax', later);
    const image = await call(s.url, 'GET', `/v1/faxes/${sent}/image`, {
      token: tokenA,
      headers: { 'user-agent': UA },
    });
    expected.push({ action: 'fax.image_download', object_type: 'fax', object_id: sent, status: image.http });
    const report = await call(s.url, 'GET', `/v1/faxes/${sent}/report`, {
      token: tokenA,
      headers: { 'user-agent': UA },
    });
    assert.equal(report.http, 200);
    expected.push({ action: 'fax.report_download', object_type: 'fax', object_id: sent, status: 200 });

    // Another account's fax: refused like a missing one, and recorded as refused in A's trail.
    const foreign = await send(tokenB);
    const refused = await api('GET', `/v1/faxes/${foreign}/report`, tokenA);
    assert.equal(refused.http, 404);
    expect(refused, 'fax.report_download', 'fax', foreign);

    const contact = await api('POST', '/v1/contacts', tokenA, {
      name: 'Dr. Audit',
      fax_number: '+15557770001',
    });
    assert.equal(contact.http, 200, JSON.stringify(contact.body));
    const cid = contact.body.data.id as string;
    expect(contact, 'contact.create', 'contact', cid);
    const cupd = await api('PATCH', `/v1/contacts/${cid}`, tokenA, { company: 'Lakeside' });
    assert.equal(cupd.http, 200, JSON.stringify(cupd.body));
    expect(cupd, 'contact.update', 'contact', cid);
    const cdel = await api('POST', '/v1/contacts/delete', tokenA, { id: cid });
    assert.equal(cdel.http, 200, JSON.stringify(cdel.body));
    expect(cdel, 'contact.delete', 'contact', cid);

    const fd = await api('POST', '/v1/fax-defaults', tokenA, { name: 'Audit default', fax_as: a.numbers[0] });
    assert.equal(fd.http, 200, JSON.stringify(fd.body));
    const fdid = fd.body.data.id as string;
    expect(fd, 'fax_default.create', 'fax_default', fdid);
    const fdupd = await api('PATCH', `/v1/fax-defaults/${fdid}`, tokenA, { name: 'Audit default 2' });
    assert.equal(fdupd.http, 200, JSON.stringify(fdupd.body));
    expect(fdupd, 'fax_default.update', 'fax_default', fdid);
    const fddel = await api('DELETE', `/v1/fax-defaults/${fdid}`, tokenA);
    assert.equal(fddel.http, 200, JSON.stringify(fddel.body));
    expect(fddel, 'fax_default.delete', 'fax_default', fdid);

    const key = await api('POST', '/v1/api-keys', tokenA, { name: 'second' });
    assert.equal(key.http, 200, JSON.stringify(key.body));
    const kid = key.body.data.id as string;
    expect(key, 'api_key.create', 'api_key', kid);
    const revoke = await api('DELETE', `/v1/api-keys/${kid}`, tokenA);
    assert.equal(revoke.http, 200, JSON.stringify(revoke.body));
    expect(revoke, 'api_key.revoke', 'api_key', kid);

    const ws = await api('PATCH', '/v1/workspace', tokenA, { time_zone: 'Europe/Paris' });
    assert.equal(ws.http, 200, JSON.stringify(ws.body));
    expect(ws, 'workspace.update', 'workspace', null);
    const badWs = await api('PATCH', '/v1/workspace', tokenA, { retention: { sent_days: 0 } });
    assert.equal(badWs.http, 422);
    expect(badWs, 'workspace.update', 'workspace', null);

    const rid = await receivedFax(a.account_id);
    const view = await api('GET', `/v1/received-faxes/${rid}`, tokenA);
    assert.equal(view.http, 200, JSON.stringify(view.body));
    expect(view, 'received_fax.view', 'received_fax', rid);
    const tiff = await call(s.url, 'GET', `/v1/received-faxes/${rid}/tiff`, {
      token: tokenA,
      headers: { 'user-agent': UA },
    });
    assert.equal(tiff.http, 200);
    expected.push({
      action: 'received_fax.download',
      object_type: 'received_fax',
      object_id: rid,
      status: 200,
    });
    const rdel = await api('DELETE', `/v1/received-faxes/${rid}`, tokenA);
    assert.equal(rdel.http, 200, JSON.stringify(rdel.body));
    expect(rdel, 'received_fax.delete', 'received_fax', rid);

    // Not audited: reading the list of faxes (no content), and a request without a token (no account).
    assert.equal((await api('GET', '/v1/faxes', tokenA)).http, 200);
    assert.equal((await call(s.url, 'GET', `/v1/faxes/${sent}/report`)).http, 401);

    const got = (await events(a.account_id)).slice(before);
    assert.equal(got.length, expected.length, JSON.stringify(got.map((e) => e.action)));
    for (const [i, want] of expected.entries()) {
      const e = got[i]!;
      assert.equal(e.action, want.action, `event ${i}`);
      assert.equal(e.object_type, want.object_type, `event ${i} (${want.action})`);
      assert.equal(e.object_id, want.object_id, `event ${i} (${want.action})`);
      assert.equal(e.status, want.status, `event ${i} (${want.action})`);
      assert.equal(e.result, want.status < 400 ? 'ok' : 'refused', `event ${i} (${want.action})`);
      assert.equal(e.actor_type, 'api_key');
      assert.equal(e.actor_id, keyA, 'the key whose token made the request');
      assert.equal(e.ip, '127.0.0.1');
      assert.equal(e.user_agent, UA);
    }
    assert.equal(got.find((e) => e.status === 404)!.detail?.message, 'Fax not found');
    assert.equal((await events(b.account_id, `action = 'fax.report_download'`)).length, 0);
  });

  it("the API's role writes an event in one statement, only as the account that statement sets", async () => {
    const role = new pg.Client({ connectionString: apiDatabaseUrl(s.cfg.DATABASE_URL, '') });
    await role.connect();
    try {
      const event = (accountId: string, action: string): AuditEvent => ({
        accountId,
        actor: { type: 'system', id: null },
        action,
        object: null,
        ip: null,
        userAgent: null,
        result: 'ok',
        status: 200,
        detail: null,
      });
      const action = 'test.one_statement';
      await recordAuditAs(role, event(a.account_id, action));
      assert.equal((await events(a.account_id, `action = '${action}'`)).length, 1);
      // The setting ended with the statement: this connection carries no account into its next one.
      const left = await role.query(`SELECT coalesce(current_setting('faxline.account_id', true), '') AS v`);
      assert.equal(left.rows[0].v, '');
      // The policy checks the row against the account the statement set: B's event set as A is refused.
      const q = auditAsQuery(event(b.account_id, action), a.account_id);
      await assert.rejects(role.query(q.text, q.values), (err: { code?: string; message: string }) => {
        assert.equal(err.code, '42501', err.message);
        return true;
      });
      assert.equal((await events(b.account_id, `action = '${action}'`)).length, 0);
    } finally {
      await role.end();
    }
  });

  it("the API's database role cannot change or delete an event; the owner is stopped by the trigger", async () => {
    await api('PATCH', '/v1/workspace', tokenA, { time_zone: 'UTC' });
    const role = new pg.Client({ connectionString: apiDatabaseUrl(s.cfg.DATABASE_URL, '') });
    await role.connect();
    try {
      const asA = async (sql: string) => {
        await role.query('BEGIN');
        try {
          await role.query(`SELECT set_config('faxline.account_id', $1, true)`, [a.account_id]);
          return await role.query(sql);
        } finally {
          await role.query('ROLLBACK');
        }
      };
      assert.ok(((await asA('SELECT 1 FROM audit_events')).rowCount ?? 0) > 0, 'it reads its own');
      for (const sql of [
        `UPDATE audit_events SET result = 'ok'`,
        'DELETE FROM audit_events',
        'TRUNCATE audit_events',
        `SELECT faxline_purge_audit_events(now() - interval '2 days', 10)`,
      ])
        await assert.rejects(asA(sql), (err: { code?: string; message: string }) => {
          assert.equal(err.code, '42501', `${sql}: ${err.message}`);
          assert.match(err.message, /permission denied/);
          return true;
        });
    } finally {
      await role.end();
    }
    for (const sql of [
      `UPDATE audit_events SET result = 'ok'`,
      'DELETE FROM audit_events',
      'TRUNCATE audit_events',
    ])
      await assert.rejects(owner.query(sql), /audit_events is append-only/);
    // The retention of events: only through the purge function, and only past the cutoff.
    await owner.query('BEGIN');
    await owner.query('ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only');
    await owner.query(
      `INSERT INTO audit_events (account_id, actor_type, action, result, created_at)
       VALUES ($1, 'system', 'test.old_event', 'ok', now() - interval '10 days')`,
      [a.account_id],
    );
    await owner.query('ALTER TABLE audit_events ENABLE TRIGGER audit_events_append_only');
    await owner.query('COMMIT');
    const total = async () => Number((await owner.query('SELECT count(*) FROM audit_events')).rows[0].count);
    const n = await total();
    await assert.rejects(
      owner.query(`SELECT faxline_purge_audit_events(now(), 10)`),
      /kept at least one day/,
    );
    const r = await retentionPass(owner, { now: new Date(), defaultDays: 30, auditDays: 5 });
    assert.equal(r.auditEvents, 1);
    assert.equal(await total(), n - 1);
    assert.equal((await events(a.account_id, `action = 'test.old_event'`)).length, 0);
  });

  it('lists the account’s events in cursor pages, filters them, answers CSV; never another account’s', async () => {
    const all = await events(a.account_id);
    assert.ok(all.length >= 10);
    const seen: string[] = [];
    let path = '/v1/audit-events?limit=3';
    for (let i = 0; i < 100; i++) {
      const r = await api('GET', path, tokenA);
      assert.equal(r.http, 200, JSON.stringify(r.body));
      assert.ok(r.body.data.length <= 3);
      seen.push(...r.body.data.map((e: { id: string }) => e.id));
      if (!r.body.meta.next_cursor) break;
      path = `/v1/audit-events?limit=3&cursor=${encodeURIComponent(r.body.meta.next_cursor as string)}`;
    }
    // Newest first; the listing itself is audited, so events after `all` was read appear at the top.
    const ids = new Set(all.map((e) => e.id));
    const listed = seen.filter((id) => ids.has(id));
    assert.equal(new Set(seen).size, seen.length, 'no event twice');
    assert.equal(listed.length, all.length, 'every event of the account, once');
    const ofB = await api('GET', '/v1/audit-events?limit=100', tokenB);
    assert.equal(ofB.http, 200);
    for (const e of ofB.body.data as { id: string; actor_id: string }[]) {
      assert.ok(!ids.has(e.id), "never another account's event");
      assert.notEqual(e.actor_id, keyA);
    }
    // A cursor of A's list is refused on B's.
    const first = await api('GET', '/v1/audit-events?limit=1', tokenA);
    assertRefused(
      await api(
        'GET',
        `/v1/audit-events?limit=1&cursor=${encodeURIComponent(first.body.meta.next_cursor)}`,
        tokenB,
      ),
      422,
      /cursor/,
    );

    const byAction = await api('GET', '/v1/audit-events?action=contact.update', tokenA);
    assert.equal(byAction.body.data.length, 1);
    assert.equal(byAction.body.data[0].action, 'contact.update');
    const objectId = byAction.body.data[0].object_id as string;
    const byObject = await api('GET', `/v1/audit-events?object=${objectId}`, tokenA);
    assert.deepEqual(byObject.body.data.map((e: { action: string }) => e.action).sort(), [
      'contact.create',
      'contact.delete',
      'contact.update',
    ]);
    const byActor = await api('GET', `/v1/audit-events?actor=${keyA}&limit=1`, tokenA);
    assert.equal(byActor.body.data[0].actor_id, keyA);
    const future = await api(
      'GET',
      `/v1/audit-events?from=${new Date(Date.now() + 3_600_000).toISOString()}`,
      tokenA,
    );
    assert.equal(future.body.data.length, 0);
    const past = await api('GET', `/v1/audit-events?to=2000-01-01`, tokenA);
    assert.equal(past.body.data.length, 0);
    assertRefused(await api('GET', '/v1/audit-events?from=yesterday', tokenA), 422, /from: must be a date/);
    assertRefused(
      await api('GET', '/v1/audit-events?actor_type=robot', tokenA),
      422,
      /actor_type: must be one of/,
    );

    const csv = await fetch(`${s.url}/v1/audit-events?action=contact.update`, {
      headers: { authorization: `Bearer ${tokenA}`, accept: 'text/csv', 'user-agent': '=HYPERLINK("x")' },
    });
    assert.equal(csv.status, 200);
    assert.match(csv.headers.get('content-type') ?? '', /^text\/csv/);
    const lines = (await csv.text()).trim().split('\r\n');
    assert.equal(
      lines[0],
      'created_at,id,actor_type,actor_id,action,object_type,object_id,result,status,ip,user_agent,detail',
    );
    assert.equal(lines.length, 2);
    assert.match(lines[1]!, /,"api_key","[0-9a-f-]{36}","contact.update","contact",/);
    assert.ok(lines[1]!.includes(`"${UA.replace(/"/g, '""')}"`));
    // The CSV request itself was audited with its user agent, which begins with "=": made inert.
    const listing = await fetch(`${s.url}/v1/audit-events?action=audit_event.list&limit=1`, {
      headers: { authorization: `Bearer ${tokenA}`, accept: 'text/csv' },
    });
    const row = (await listing.text()).trim().split('\r\n')[1]!;
    assert.ok(row.includes(`"'=HYPERLINK(""x"")"`), row);
    for (const lead of ['=', '+', '-', '@']) assert.equal(csvCell(`${lead}1+1`), `"'${lead}1+1"`);
    assert.equal(csvCell('a "b"'), '"a ""b"""');
  });

  it('PATCH /v1/workspace sets retention, checks it, and GET shows it', async () => {
    const w = await api('GET', '/v1/workspace', tokenB);
    assert.deepEqual(w.body.data.account.retention, {
      sent_days: null,
      received_days: null,
      zero_footprint: false,
      default_days: 30,
    });
    for (const [body, message] of [
      [
        { retention: { sent_days: 0 } },
        /retention\.sent_days: must be a whole number of days from 1 to 36500/,
      ],
      [{ retention: { received_days: 1.5 } }, /retention\.received_days: must be a whole number/],
      [{ retention: { sent_days: 36501 } }, /retention\.sent_days/],
      [{ retention: { zero_footprint: 'yes' } }, /retention\.zero_footprint: must be true or false/],
      [{ retention: { keep: 1 } }, /keep: is not a setting of retention/],
      [{}, /Name a setting to change/],
    ] as const)
      assertRefused(await api('PATCH', '/v1/workspace', tokenB, body), 422, message);
    const set = await api('PATCH', '/v1/workspace', tokenB, {
      retention: { sent_days: 7, received_days: 90 },
    });
    assert.equal(set.http, 200, JSON.stringify(set.body));
    assert.deepEqual(set.body.data.retention, {
      sent_days: 7,
      received_days: 90,
      zero_footprint: false,
      default_days: 30,
    });
    const back = await api('PATCH', '/v1/workspace', tokenB, { retention: { sent_days: null } });
    assert.equal(back.body.data.retention.sent_days, null, 'null: back to the default');
    assert.equal(back.body.data.retention.received_days, 90, 'what is not named is unchanged');
    assert.equal((await api('GET', '/v1/workspace', tokenB)).body.data.account.retention.received_days, 90);
  });

  it('purges content past the account’s retention: gone from the tables, 410, record and history kept', async () => {
    await api('PATCH', '/v1/workspace', tokenA, { retention: { sent_days: 2 } });
    const id = await send(tokenA, { subject: 'Purge me', recipient_name: 'Dr Gone' });
    await final(tokenA, id);
    const detailBefore = await api('GET', `/v1/faxes/${id}`, tokenA);
    assert.equal(detailBefore.body.data.options.subject, 'Purge me');
    const transitions = async () =>
      Number(
        (await owner.query('SELECT count(*) FROM fax_job_transitions WHERE job_id = $1', [id])).rows[0].count,
      );
    const history = await transitions();
    const content = async () =>
      (
        await owner.query<{ docs: number; renders: number }>(
          `SELECT (SELECT count(*)::int FROM fax_documents WHERE job_id = $1 AND (content IS NOT NULL OR file_url IS NOT NULL)) AS docs,
                  (SELECT count(*)::int FROM fax_renders WHERE job_id = $1) AS renders`,
          [id],
        )
      ).rows[0]!;
    assert.equal((await content()).docs, 1);
    // One day later: within the account's two days (the installation's 30 do not matter).
    await retentionPass(owner, { now: new Date(Date.now() + 86_400_000), defaultDays: 30, auditDays: 2192 });
    assert.equal((await content()).docs, 1, 'kept within the retention');
    await retentionPass(owner, {
      now: new Date(Date.now() + 3 * 86_400_000),
      defaultDays: 30,
      auditDays: 2192,
    });
    assert.deepEqual(await content(), { docs: 0, renders: 0 }, 'documents and image gone');
    assert.deepEqual(
      (await api('GET', `/v1/faxes/${id}`, tokenA)).body.data.options,
      { approval_required: false },
      'the cover text is gone with the content',
    );
    const name = await owner.query('SELECT file_name, deleted_reason FROM fax_documents WHERE job_id = $1', [
      id,
    ]);
    assert.deepEqual(name.rows, [{ file_name: '(deleted)', deleted_reason: 'retention' }]);
    const image = await api('GET', `/v1/faxes/${id}/image`, tokenA);
    assertRefused(image, 410, 'Fax image not available: it was deleted with the documents (retention)');
    const detail = await api('GET', `/v1/faxes/${id}`, tokenA);
    assert.equal(detail.http, 200);
    assert.equal(detail.body.data.state, detailBefore.body.data.state, 'the record stays');
    assert.equal(await transitions(), history, 'its history stays');
    const purge = await events(a.account_id, `action = 'fax.content_purge' AND object_id = $2`, [id]);
    assert.equal(purge.length, 1);
    assert.equal(purge[0]!.actor_type, 'system');
    assert.deepEqual(purge[0]!.detail, { reason: 'retention' });
    await api('PATCH', '/v1/workspace', tokenA, { retention: { sent_days: null } });
  });

  it('zero footprint: content goes at the first pass after a fax is final, a received fax’s after download', async () => {
    const z = await api('PATCH', '/v1/workspace', tokenB, { retention: { zero_footprint: true } });
    assert.equal(z.body.data.retention.zero_footprint, true);
    const id = await send(tokenB);
    const scheduled = await send(tokenB, { scheduled_date: new Date(Date.now() + 86_400_000).toISOString() });
    await final(tokenB, id);
    const rid = await receivedFax(b.account_id);
    const untouched = await receivedFax(b.account_id);
    await retentionPass(owner, { now: new Date(), defaultDays: 30, auditDays: 2192 });
    const docs = await owner.query<{ job_id: string; gone: boolean }>(
      'SELECT job_id, content IS NULL AS gone FROM fax_documents WHERE job_id = ANY($1::uuid[])',
      [[id, scheduled]],
    );
    assert.equal(docs.rows.find((d) => d.job_id === id)!.gone, true, 'final: gone');
    assert.equal(docs.rows.find((d) => d.job_id === scheduled)!.gone, false, 'not final: kept');
    assertRefused(
      await api('GET', `/v1/faxes/${id}/report`, tokenB),
      410,
      "Transmission report not available: the fax's content was deleted (zero footprint)",
    );
    assertRefused(await api('GET', `/v1/faxes/${id}/image`, tokenB), 410, /Fax image not available/);
    assert.equal((await api('GET', `/v1/faxes/${id}`, tokenB)).http, 200, 'the record stays');

    // Received: kept until downloaded, then gone at the next pass.
    const tiff = async (x: string) =>
      (
        await owner.query<{ held: boolean }>(
          'SELECT tiff IS NOT NULL AS held FROM received_faxes WHERE id = $1',
          [x],
        )
      ).rows[0]!.held;
    assert.equal(await tiff(rid), true);
    assert.equal((await call(s.url, 'GET', `/v1/received-faxes/${rid}/tiff`, { token: tokenB })).http, 200);
    await retentionPass(owner, { now: new Date(), defaultDays: 30, auditDays: 2192 });
    assert.equal(await tiff(rid), false, 'downloaded: gone');
    assert.equal(await tiff(untouched), true, 'not downloaded: kept');
    assertRefused(await api('GET', `/v1/received-faxes/${rid}/tiff`, tokenB), 410, /removed|deleted/i);
    const purges = await events(
      b.account_id,
      `action IN ('fax.content_purge', 'received_fax.content_purge') AND object_id = ANY($2::text[])`,
      [[id, rid, scheduled, untouched]],
    );
    assert.deepEqual(
      purges.map((e) => [e.action, e.object_id, e.detail?.reason]),
      [
        ['fax.content_purge', id, 'zero_footprint'],
        ['received_fax.content_purge', rid, 'zero_footprint'],
      ],
    );
    await api('PATCH', '/v1/workspace', tokenB, { retention: { zero_footprint: false } });
  });

  it('DELETE /v1/faxes/{id}/content: only when final, only the account’s, record and history kept', async () => {
    const id = await send(tokenA, { message: 'Delete me' });
    const scheduled = await send(tokenA, { scheduled_date: new Date(Date.now() + 86_400_000).toISOString() });
    await final(tokenA, id);
    assertRefused(
      await api('DELETE', `/v1/faxes/${scheduled}/content`, tokenA),
      409,
      /Fax not final: .*current state: scheduled/,
    );
    assertRefused(await api('DELETE', `/v1/faxes/${id}/content`, tokenB), 404, 'Fax not found');
    assertRefused(await api('DELETE', `/v1/faxes/not-an-id/content`, tokenA), 404, 'Fax not found');
    const hadImage = Number(
      (await owner.query('SELECT count(*) FROM fax_renders WHERE job_id = $1', [id])).rows[0].count,
    );
    const del = await api('DELETE', `/v1/faxes/${id}/content`, tokenA);
    assert.equal(del.http, 200, JSON.stringify(del.body));
    assert.deepEqual(del.body.data, { documents: 1, images: hadImage });
    const left = await owner.query(
      `SELECT 1 FROM fax_documents WHERE job_id = $1 AND (content IS NOT NULL OR file_url IS NOT NULL)
       UNION ALL SELECT 1 FROM fax_renders WHERE job_id = $1`,
      [id],
    );
    assert.equal(left.rowCount, 0);
    assertRefused(
      await api('GET', `/v1/faxes/${id}/image`, tokenA),
      410,
      'Fax image not available: it was deleted with the documents (request)',
    );
    const record = await api('GET', `/v1/faxes/${id}`, tokenA);
    assert.equal(record.http, 200, 'the record stays');
    assert.deepEqual(record.body.data.options, { approval_required: false }, 'without its cover text');
    assert.equal(
      (await api('GET', `/v1/faxes/${id}/report`, tokenA)).http,
      200,
      'the report stays (no page)',
    );
    const again = await api('DELETE', `/v1/faxes/${id}/content`, tokenA);
    assert.deepEqual(again.body.data, { documents: 0, images: 0 });
    const ev = await events(a.account_id, `action = 'fax.content_delete' AND object_id = $2`, [id]);
    assert.deepEqual(
      ev.map((e) => [e.result, e.status]),
      [
        ['ok', 200],
        ['ok', 200],
      ],
    );
    const refusedEv = await events(a.account_id, `action = 'fax.content_delete' AND object_id = $2`, [
      scheduled,
    ]);
    assert.deepEqual(
      refusedEv.map((e) => [e.result, e.status]),
      [['refused', 409]],
    );
  });

  it('the retention pass is a pg-boss schedule of the scheduler component', async () => {
    const r = await owner.query<{ cron: string; timezone: string | null }>(
      `SELECT cron, timezone FROM ${s.cfg.PGBOSS_SCHEMA}.schedule WHERE name = $1`,
      [RETENTION_QUEUE],
    );
    assert.deepEqual(r.rows, [{ cron: '* * * * *', timezone: 'UTC' }]);
  });
});
