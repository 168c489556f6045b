// Tenant isolation: every endpoint tried with another account's ids answers exactly as for ids that
// do not exist and changes nothing; and PostgreSQL itself enforces it (row-level security, the API
// role cannot bypass it, the account is set per transaction only).
import { contactIds } from '../src/auth/contact-id.ts';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { DemoSeed } from '../src/admin/seed.ts';
import { apiDatabaseUrl, assertCannotBypassRls } from '../src/db/tenant-db.ts';
import { call, seedAccount, tokenFor, type Reply } from './support/client.ts';
import { startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

const NONE = '00000000-0000-4000-8000-000000000000';

describe('tenant isolation', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let a: DemoSeed;
  let b: DemoSeed;
  let tokenA: string;
  let tokenB: string;
  let owner: pg.Client;
  let bJob: string;
  let bScheduled: string;
  let bAwaiting: string;
  let pdf: string;

  before(async () => {
    s = await startService({ env: { RATE_LIMIT_PER_SECOND: '0' } });
    a = await seedAccount(s);
    b = await seedAccount(s);
    tokenA = await tokenFor(s.url, a.api_key);
    tokenB = await tokenFor(s.url, b.api_key);
    owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await owner.connect();
    pdf = await makePdfBase64(1);
    const doc = [{ file_name: 'b.pdf', file_data: pdf }];
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const sendB = async (extra: object) =>
      (
        await call(s.url, 'POST', '/v1/faxes/send', {
          token: tokenB,
          body: { fax_number: '+15551234567', fax_data: doc, ...extra },
        })
      ).body.data.job_id as string;
    bJob = await sendB({});
    bScheduled = await sendB({ scheduled_date: later });
    bAwaiting = await sendB({ approval_required: true });
  });
  after(async () => {
    await owner.end();
    await s.dropAll();
  });

  /** A's answer for B's id must equal A's answer for an id that does not exist. */
  const same = (theirs: Reply, missing: Reply, http: number) => {
    assert.equal(theirs.http, http, JSON.stringify(theirs.body));
    assert.equal(missing.http, http);
    assert.deepEqual(theirs.body, missing.body);
  };

  it('GET /v1/faxes/{job_id}', async () => {
    same(
      await call(s.url, 'GET', `/v1/faxes/${bJob}`, { token: tokenA }),
      await call(s.url, 'GET', `/v1/faxes/${NONE}`, { token: tokenA }),
      404,
    );
  });

  it('GET /v1/faxes/{job_id}/report and /image (finished or not, theirs is missing)', async () => {
    for (const id of [bJob, bScheduled])
      for (const path of ['report', 'image?format=tiff', 'image?format=pdf'])
        same(
          await call(s.url, 'GET', `/v1/faxes/${id}/${path}`, { token: tokenA }),
          await call(s.url, 'GET', `/v1/faxes/${NONE}/${path}`, { token: tokenA }),
          404,
        );
  });

  it('POST /v1/faxes/forward', async () => {
    const f = (id: string) =>
      call(s.url, 'POST', '/v1/faxes/forward', {
        token: tokenA,
        body: { job_id: id, fax_number: '+15550000000' },
      });
    same(await f(bJob), await f(NONE), 404);
    const n = await owner.query(`SELECT count(*)::int AS n FROM fax_jobs WHERE kind = 'forward'`);
    assert.equal(n.rows[0].n, 0);
  });

  it('POST /v1/faxes/cancel-schedule (scheduled, and scheduled awaiting approval)', async () => {
    const c = (id: string) =>
      call(s.url, 'POST', '/v1/faxes/cancel-schedule', { token: tokenA, body: { job_id: id } });
    same(await c(bScheduled), await c(NONE), 404);
    same(await c(bAwaiting), await c(NONE), 404);
    const st = await owner.query('SELECT state FROM fax_jobs WHERE id = $1', [bScheduled]);
    assert.equal(st.rows[0].state, 'scheduled');
  });

  it('POST /v1/faxes/approve and /reject', async () => {
    for (const path of ['/v1/faxes/approve', '/v1/faxes/reject']) {
      const c = (id: string) => call(s.url, 'POST', path, { token: tokenA, body: { job_id: id } });
      same(await c(bAwaiting), await c(NONE), 404);
    }
    const st = await owner.query('SELECT state FROM fax_jobs WHERE id = $1', [bAwaiting]);
    assert.equal(st.rows[0].state, 'awaiting_approval');
  });

  it('GET /v1/faxes lists only the own account (also by state)', async () => {
    const all = await call(s.url, 'GET', '/v1/faxes', { token: tokenA });
    assert.equal(all.http, 200);
    assert.deepEqual(all.body.data, []);
    const sched = await call(s.url, 'GET', '/v1/faxes?state=scheduled', { token: tokenA });
    assert.deepEqual(sched.body.data, []);
    const mine = await call(s.url, 'GET', '/v1/faxes', { token: tokenB });
    assert.equal(mine.body.data.length, 3);
  });

  it("POST /v1/faxes/send with another account's template_id or smart_document_id", async () => {
    const snd = (extra: object) =>
      call(s.url, 'POST', '/v1/faxes/send', {
        token: tokenA,
        body: { fax_number: '+15551234567', fax_data: [{ file_name: 'a.pdf', file_data: pdf }], ...extra },
      });
    same(await snd({ template_id: b.template_id }), await snd({ template_id: NONE }), 422);
    same(await snd({ smart_document_id: b.smart_document_id }), await snd({ smart_document_id: NONE }), 422);
  });

  it('POST /v1/contacts/delete', async () => {
    const d = (id: string) => call(s.url, 'POST', '/v1/contacts/delete', { token: tokenA, body: { id } });
    same(await d(b.contact_ids[0]!), await d(NONE), 422);
    const dbId = (await contactIds(owner)).decode(b.contact_ids[0]!);
    assert.equal((await owner.query('SELECT 1 FROM contacts WHERE id = $1', [dbId])).rowCount, 1);
  });

  it('the e-sign reads and the field-rule delete', async () => {
    const [bf] = b.esign_field_ids;
    const [br] = b.esign_field_rule_ids;
    same(
      await call(s.url, 'GET', `/v1/esign_templates/${b.esign_template_id}/fields/${bf}`, { token: tokenA }),
      await call(s.url, 'GET', `/v1/esign_templates/${NONE}/fields/${NONE}`, { token: tokenA }),
      404,
    );
    // Own template id with the other account's field id: still not found.
    assert.equal(
      (await call(s.url, 'GET', `/v1/esign_templates/${a.esign_template_id}/fields/${bf}`, { token: tokenA }))
        .http,
      404,
    );
    same(
      await call(s.url, 'GET', `/v1/esign_templates/${b.esign_template_id}/field_rule`, { token: tokenA }),
      await call(s.url, 'GET', `/v1/esign_templates/${NONE}/field_rule`, { token: tokenA }),
      404,
    );
    same(
      await call(s.url, 'DELETE', `/v1/esign_templates/${b.esign_template_id}/field_rule/${br}`, {
        token: tokenA,
      }),
      await call(s.url, 'DELETE', `/v1/esign_templates/${NONE}/field_rule/${NONE}`, { token: tokenA }),
      404,
    );
    assert.equal(
      (
        await call(s.url, 'DELETE', `/v1/esign_templates/${a.esign_template_id}/field_rule/${br}`, {
          token: tokenA,
        })
      ).http,
      404,
    );
    assert.equal((await owner.query('SELECT 1 FROM esign_field_rules WHERE id = $1', [br])).rowCount, 1);
    same(
      await call(s.url, 'GET', `/v1/esign_documents/${b.esign_document_id}/theme`, { token: tokenA }),
      await call(s.url, 'GET', `/v1/esign_documents/${NONE}/theme`, { token: tokenA }),
      404,
    );
  });

  it("GET /v1/numbers: only the own numbers; another account's cursor → 422", async () => {
    const own = new Set<string>();
    let cursor: string | null = null;
    do {
      const r: Reply = await call(s.url, 'GET', `/v1/numbers?limit=25${cursor ? `&cursor=${cursor}` : ''}`, {
        token: tokenA,
      });
      assert.equal(r.http, 200);
      for (const n of r.body.data) own.add(n.id);
      cursor = r.body.meta.next_cursor;
    } while (cursor);
    const mine = await owner.query('SELECT id FROM numbers WHERE account_id = $1', [a.account_id]);
    assert.deepEqual([...own].sort(), mine.rows.map((r: { id: string }) => r.id).sort());
    const bPage = await call(s.url, 'GET', '/v1/numbers?limit=5', { token: tokenB });
    const foreign = await call(s.url, 'GET', `/v1/numbers?cursor=${bPage.body.meta.next_cursor}`, {
      token: tokenA,
    });
    assert.equal(foreign.http, 422);
    assert.deepEqual(foreign.body, {
      status: 0,
      message: 'cursor: is not a cursor this list issued; pass next_cursor or previous_cursor unchanged',
    });
  });

  describe('in PostgreSQL', () => {
    let api: pg.Client;
    before(async () => {
      api = new pg.Client({ connectionString: apiDatabaseUrl(s.cfg.DATABASE_URL, '') });
      await api.connect();
    });
    after(async () => {
      await api.end();
    });

    it('the API role is not a superuser, has no BYPASSRLS and owns no table', async () => {
      const r = await api.query(
        `SELECT current_user AS u, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user`,
      );
      assert.deepEqual(r.rows[0], { u: 'faxline_api', rolsuper: false, rolbypassrls: false });
      const owned = await owner.query(
        `SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public' AND tableowner = 'faxline_api'`,
      );
      assert.equal(owned.rows[0].n, 0);
    });

    it('the service refuses to run request handling on a role that can bypass RLS', async () => {
      const superPool = new pg.Pool({ connectionString: s.cfg.DATABASE_URL, max: 1 });
      superPool.on('error', () => undefined); // teardown drops the database
      try {
        await assert.rejects(() => assertCannotBypassRls(superPool), /can bypass row-level security/);
      } finally {
        await superPool.end();
      }
    });

    it('every table with an account_id column has row-level security enabled', async () => {
      const r = await owner.query<{ t: string; rls: boolean }>(
        `SELECT c.relname AS t, c.relrowsecurity AS rls FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'account_id' AND NOT a.attisdropped
          WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')`,
      );
      assert.ok(r.rows.length >= 15);
      const open = r.rows.filter((x) => !x.rls).map((x) => x.t);
      assert.deepEqual(open, [], `tables without RLS (add a policy in their migration): ${open.join(', ')}`);
    });

    it('a query with no WHERE clause sees only the account set for the transaction, and nothing without one', async () => {
      const count = async (t: string) => (await api.query(`SELECT count(*)::int AS n FROM ${t}`)).rows[0].n;
      for (const t of ['fax_jobs', 'contacts', 'numbers', 'fax_defaults', 'esign_templates', 'accounts'])
        assert.equal(await count(t), 0, `${t} without an account`);
      await api.query('BEGIN');
      await api.query(`SELECT set_config('faxline.account_id', $1, true)`, [b.account_id]);
      assert.equal(await count('numbers'), 60);
      assert.equal(await count('fax_jobs'), 3);
      assert.equal(await count('accounts'), 1);
      // Writes are confined too: another account's rows cannot be changed or created.
      const upd = await api.query(`UPDATE fax_jobs SET fax_priority = 'high' WHERE account_id = $1`, [
        a.account_id,
      ]);
      assert.equal(upd.rowCount, 0);
      const del = await api.query('DELETE FROM contacts WHERE account_id = $1', [a.account_id]);
      assert.equal(del.rowCount, 0);
      await api.query('COMMIT');
      // SET LOCAL semantics: the account does not outlive the transaction on a pooled connection.
      assert.equal(await count('numbers'), 0);
      await api.query('BEGIN');
      await api.query(`SELECT set_config('faxline.account_id', $1, true)`, [b.account_id]);
      await assert.rejects(
        () =>
          api.query(
            `INSERT INTO fax_jobs (id, account_id, kind, state, fax_number, caller_id, fax_quality, fax_priority)
             VALUES (gen_random_uuid(), $1, 'send', 'accepted', '+15550000000', '+15550000000', 'standard', 'regular')`,
            [a.account_id],
          ),
        /row-level security/,
      );
      await api.query('ROLLBACK');
    });

    it('with no account set, the API role reads no row of any table it may read (webhook_attempts too)', async () => {
      // A finished webhook delivery of B with one attempt, written as the deliverer (the owner) writes
      // it; 'delivered', so the running deliverer leaves it alone.
      const ep = await owner.query<{ id: string }>(
        `INSERT INTO webhook_endpoints (account_id, url, secret) VALUES ($1, 'https://example.com/h', 's')
         RETURNING id`,
        [b.account_id],
      );
      const dl = await owner.query<{ id: string }>(
        `INSERT INTO webhook_deliveries (endpoint_id, account_id, event_id, event_type, job_id, sequence, payload, state)
         VALUES ($1, $2, gen_random_uuid(), 'fax.accepted', $3, 1, '{}', 'delivered') RETURNING id`,
        [ep.rows[0]!.id, b.account_id, bJob],
      );
      await owner.query(
        `INSERT INTO webhook_attempts (delivery_id, attempt, http_status, duration_ms) VALUES ($1, 1, 500, 3)`,
        [dl.rows[0]!.id],
      );
      const tables = await owner.query<{ t: string }>(
        `SELECT c.relname AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
            AND has_table_privilege('faxline_api', c.oid, 'SELECT') ORDER BY 1`,
      );
      const names = tables.rows.map((r) => r.t);
      assert.ok(names.includes('webhook_attempts') && names.includes('fax_jobs'), names.join(', '));
      const seen: string[] = [];
      for (const t of names) {
        const mine = await owner.query(`SELECT count(*)::int AS n FROM ${t}`);
        const theirs = await api.query(`SELECT count(*)::int AS n FROM ${t}`);
        if (theirs.rows[0].n !== 0) seen.push(`${t} (${theirs.rows[0].n} of ${mine.rows[0].n})`);
      }
      // faxline_migrations holds no tenant data: the migration list is not a secret.
      assert.deepEqual(
        seen.filter((x) => !x.startsWith('faxline_migrations ')),
        [],
        `rows visible to faxline_api with no account set: ${seen.join(', ')}`,
      );
      // The policy still lets the API read its own account's delivery log, and only its own. Counted
      // for this delivery: B's job may still be moving, and its new events are delivered to the
      // endpoint made above (attempts of their own: 3 instead of 1 on a slow machine).
      const attempts = async (account: string) => {
        await api.query('BEGIN');
        await api.query(`SELECT set_config('faxline.account_id', $1, true)`, [account]);
        const r = await api.query('SELECT count(*)::int AS n FROM webhook_attempts WHERE delivery_id = $1', [
          dl.rows[0]!.id,
        ]);
        await api.query('COMMIT');
        return r.rows[0].n as number;
      };
      assert.equal(await attempts(b.account_id), 1);
      assert.equal(await attempts(a.account_id), 0);
    });

    it('API keys and tokens are not readable by the API role at all', async () => {
      await assert.rejects(() => api.query('SELECT * FROM api_keys'), /permission denied/);
      await assert.rejects(() => api.query('SELECT * FROM access_tokens'), /permission denied/);
      await assert.rejects(() => api.query('SELECT * FROM server_secrets'), /permission denied/);
    });
  });
});
