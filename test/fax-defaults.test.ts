// /v1/fax-defaults against the real service (PostgreSQL, RabbitMQ, the send worker): every operation,
// another account's ids, invalid fields, one default per account, a deleted Fax Default never used
// again, faxes keeping the values they were accepted with, and a preview showing an update at once.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { CoverValues } from '../src/documents/cover.ts';
import { bilevelToPng } from '../src/documents/render/png.ts';
import { RenderPool } from '../src/documents/render/pool.ts';
import { getRender } from '../src/documents/render/store.ts';
import { X_DPI, Y_DPI } from '../src/documents/render/raster.ts';
import { twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually } from './support/harness.ts';

const pdf = readFileSync(new URL('./fixtures/letter-text-2p.pdf', import.meta.url)).toString('base64');
const NOT_FOUND = { status: 0, message: 'Fax Default not found' };

describe('/v1/fax-defaults', () => {
  let s: TwoAccounts['s'];
  let db: pg.Client;
  let token: string;
  let other: string;
  let seed: Awaited<ReturnType<typeof seedAccount>>;
  let otherSeed: Awaited<ReturnType<typeof seedAccount>>;
  /** Render processes of the test's own, for the expected cover images. */
  const pool = new RenderPool({ size: 1 });

  let close: TwoAccounts['close'];

  before(async () => {
    ({
      s,
      a: seed,
      b: otherSeed,
      tokenA: token,
      tokenB: other,
      owner: db,
      close,
    } = await twoAccounts({ RENDER_PAGE_SECONDS: '1', FAX_DEFAULTS_PER_ACCOUNT: '6' }, { cover: true }));
  });
  after(async () => {
    await pool.close();
    await close();
  });

  const create = (body: Record<string, unknown>, t = token) =>
    call(s.url, 'POST', '/v1/fax-defaults', { token: t, body });
  const defaults = async (accountId: string) =>
    (
      await db.query<{ id: string }>(
        'SELECT id FROM fax_defaults WHERE account_id = $1 AND is_default ORDER BY id',
        [accountId],
      )
    ).rows.map((r) => r.id);

  it('creates, gets, lists in cursor pages, updates and deletes', async () => {
    const c = await create({
      name: '  Billing  ',
      fax_as: seed.numbers[10]!,
      fax_quality: 'low',
      sender_name: 'Billing Office',
      sender_phone: '+15550109998',
      sender_email: 'billing@example.org',
      cover_footer: 'Confidential',
    });
    assert.equal(c.http, 200, JSON.stringify(c.body));
    assert.equal(c.body.message, 'Fax Default created successfully');
    const fd = c.body.data;
    assert.match(fd.id, /^[0-9a-f-]{36}$/);
    assert.deepEqual(
      { ...fd, id: undefined, created_at: undefined },
      {
        id: undefined,
        created_at: undefined,
        name: 'Billing',
        is_default: false,
        fax_as: seed.numbers[10]!,
        fax_quality: 'low',
        cover_page: true,
        sender_name: 'Billing Office',
        sender_company: null,
        sender_phone: '+15550109998',
        sender_email: 'billing@example.org',
        cover_footer: 'Confidential',
        header_line: null,
      },
    );

    const g = await call(s.url, 'GET', `/v1/fax-defaults/${fd.id}`, { token });
    assert.equal(g.http, 200);
    assert.equal(g.body.message, 'Fax Default retrieved successfully');
    assert.deepEqual(g.body.data, fd);

    // The seed's two, then this one: pages of 2, oldest first, forward and back.
    const p1 = await call(s.url, 'GET', '/v1/fax-defaults?limit=2', { token });
    assert.equal(p1.http, 200);
    assert.equal(p1.body.message, 'Fax Defaults retrieved successfully');
    assert.equal(p1.body.data.length, 2);
    assert.equal(p1.body.meta.has_more, true);
    assert.equal(p1.body.meta.previous_cursor, null);
    const p2 = await call(s.url, 'GET', `/v1/fax-defaults?limit=2&cursor=${p1.body.meta.next_cursor}`, {
      token,
    });
    assert.equal(p2.http, 200);
    assert.deepEqual(
      p2.body.data.map((x: { id: string }) => x.id),
      [fd.id],
    );
    assert.equal(p2.body.meta.has_more, false);
    const back = await call(s.url, 'GET', `/v1/fax-defaults?limit=2&cursor=${p2.body.meta.previous_cursor}`, {
      token,
    });
    assert.deepEqual(back.body.data, p1.body.data);
    const ids = [...p1.body.data, ...p2.body.data].map((x: { id: string }) => x.id);
    assert.ok(ids.includes(seed.template_id));
    // A cursor of this list is not one of another account's list.
    const foreign = await call(s.url, 'GET', `/v1/fax-defaults?cursor=${p1.body.meta.next_cursor}`, {
      token: other,
    });
    assert.equal(foreign.http, 422);

    const u = await call(s.url, 'PATCH', `/v1/fax-defaults/${fd.id}`, {
      token,
      body: { sender_name: 'Accounts', sender_email: null, cover_page: false },
    });
    assert.equal(u.http, 200, JSON.stringify(u.body));
    assert.equal(u.body.message, 'Fax Default updated successfully');
    assert.deepEqual(u.body.data, {
      ...fd,
      sender_name: 'Accounts',
      sender_email: null,
      cover_page: false,
    });

    const del = await call(s.url, 'DELETE', `/v1/fax-defaults/${fd.id}`, { token });
    assert.equal(del.http, 200);
    assert.deepEqual(del.body, { status: 1, message: 'Fax Default has been deleted successfully.' });
    for (const [method, body] of [
      ['GET', undefined],
      ['PATCH', { name: 'again' }],
      ['DELETE', undefined],
    ] as const) {
      const r = await call(s.url, method, `/v1/fax-defaults/${fd.id}`, { token, body });
      assert.equal(r.http, 404, `${method} after delete`);
      assert.deepEqual(r.body, NOT_FOUND);
    }
  });

  it("answers another account's ids exactly like missing ones, and changes nothing of them", async () => {
    const theirs = otherSeed.template_id;
    const before = await db.query('SELECT * FROM fax_defaults WHERE id = $1', [theirs]);
    const mine = await defaults(seed.account_id);
    for (const id of [theirs, '00000000-0000-4000-8000-000000000000', 'not-an-id']) {
      for (const [method, body] of [
        ['GET', undefined],
        ['PATCH', { sender_name: 'Intruder', is_default: true }],
        ['DELETE', undefined],
      ] as const) {
        const r = await call(s.url, method, `/v1/fax-defaults/${id}`, { token, body });
        assert.equal(r.http, 404, `${method} ${id}`);
        assert.deepEqual(r.body, NOT_FOUND);
      }
    }
    const afterRow = await db.query('SELECT * FROM fax_defaults WHERE id = $1', [theirs]);
    assert.deepEqual(afterRow.rows, before.rows, "the other account's Fax Default is unchanged");
    assert.deepEqual(await defaults(seed.account_id), mine, 'marking a foreign id unset nothing of ours');
    const list = await call(s.url, 'GET', '/v1/fax-defaults?limit=1000', { token: other });
    assert.ok(list.body.data.every((x: { id: string }) => x.id !== seed.template_id));
  });

  it('refuses invalid fields with 422 naming the field', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ fax_as: '+15550100001' }, 'name: is required'],
      [{ name: '', fax_as: '+15550100001' }, 'name: must not be empty'],
      [{ name: 'x'.repeat(101), fax_as: '+15550100001' }, 'name: is longer than 100 characters'],
      [{ name: 'n' }, 'fax_as: is required'],
      [{ name: 'n', fax_as: '5550100001' }, 'fax_as: must be an E.164 number'],
      [
        { name: 'n', fax_as: '+15550100001', fax_quality: 'ultra' },
        "fax_quality: must be 'low', 'standard' or 'hd'",
      ],
      [
        { name: 'n', fax_as: '+15550100001', sender_phone: '555-0100' },
        'sender_phone: must be an E.164 phone number',
      ],
      [
        { name: 'n', fax_as: '+15550100001', sender_email: 'nobody' },
        'sender_email: must be an e-mail address',
      ],
      [{ name: 'n', fax_as: '+15550100001', is_default: 'yes' }, 'is_default: must be true or false'],
      [
        { name: 'n', fax_as: '+15550100001', cover_footer: 'x'.repeat(1001) },
        'cover_footer: is longer than 1000 characters',
      ],
      [
        { name: 'n', fax_as: '+15550100001', sender_nmae: 'typo' },
        'sender_nmae: is not a field of a Fax Default',
      ],
      [{ name: 'n\u0000', fax_as: '+15550100001' }, 'name: contains the character U+0000'],
      [
        { name: 'n', fax_as: '+15550100001', header_line: 'From {sender} page {page}' },
        'header_line: unknown placeholder {sender};',
      ],
      [
        { name: 'n', fax_as: '+15550100001', header_line: 'x'.repeat(121) },
        'header_line: is longer than 120 characters',
      ],
    ];
    for (const [body, message] of cases) {
      const r = await create(body);
      assert.equal(r.http, 422, JSON.stringify(body));
      assert.equal(r.body.status, 0);
      assert.ok(r.body.message.startsWith(message), `${JSON.stringify(body)} → ${r.body.message}`);
    }
    const empty = await call(s.url, 'PATCH', `/v1/fax-defaults/${seed.template_id}`, { token, body: {} });
    assert.equal(empty.http, 422);
    assert.equal(empty.body.message, 'give at least one field to change');
    const bad = await call(s.url, 'PATCH', `/v1/fax-defaults/${seed.template_id}`, {
      token,
      body: { fax_as: '' },
    });
    assert.equal(bad.http, 422);
    assert.match(bad.body.message, /^fax_as: /);
    const n = await db.query('SELECT count(*)::int AS n FROM fax_defaults WHERE account_id = $1', [
      seed.account_id,
    ]);
    assert.equal(n.rows[0].n, 2, 'nothing was created');
  });

  it("refuses another account's number as fax_as when it is saved, with the caller id rule of a send", async () => {
    // Issue 27, finding 8: it used to be saved and refused only at send.
    const theirs = otherSeed.numbers[0]!;
    const want = new RegExp(
      `^fax_as: \\${theirs} is not one of your account's numbers; set fax_as to one of the numbers of GET /v1/numbers$`,
    );
    const before = await db.query('SELECT count(*)::int AS n FROM fax_defaults WHERE account_id = $1', [
      seed.account_id,
    ]);
    for (const fax_as of [theirs, '+15550199999' /* nobody's */]) {
      const c = await create({ name: 'Borrowed', fax_as });
      assert.equal(c.http, 422, JSON.stringify(c.body));
      assert.equal(c.body.status, 0);
      assert.match(c.body.message, fax_as === theirs ? want : /^fax_as: \+15550199999 is not one of/);
    }
    const u = await call(s.url, 'PATCH', `/v1/fax-defaults/${seed.template_id}`, {
      token,
      body: { fax_as: theirs },
    });
    assert.equal(u.http, 422, JSON.stringify(u.body));
    assert.match(u.body.message, want);
    const after = await db.query(
      'SELECT count(*)::int AS n, bool_and(fax_as <> $2) AS untouched FROM fax_defaults WHERE account_id = $1',
      [seed.account_id, theirs],
    );
    assert.deepEqual(after.rows[0], { n: before.rows[0].n, untouched: true }, 'nothing saved');
    // Another account's Fax Default id still answers 404, whatever fax_as is given.
    const other404 = await call(s.url, 'PATCH', `/v1/fax-defaults/${otherSeed.template_id}`, {
      token,
      body: { fax_as: theirs },
    });
    assert.deepEqual([other404.http, other404.body], [404, NOT_FOUND]);
    // The account's own numbers are still accepted, on create and update.
    const mine = await create({ name: 'Mine', fax_as: seed.numbers[20]! });
    assert.equal(mine.http, 200, JSON.stringify(mine.body));
    const moved = await call(s.url, 'PATCH', `/v1/fax-defaults/${mine.body.data.id}`, {
      token,
      body: { fax_as: seed.numbers[21]! },
    });
    assert.equal(moved.http, 200, JSON.stringify(moved.body));
    assert.equal(moved.body.data.fax_as, seed.numbers[21]);
    await call(s.url, 'DELETE', `/v1/fax-defaults/${mine.body.data.id}`, { token });
  });

  it('refuses a Fax Default beyond FAX_DEFAULTS_PER_ACCOUNT, also when creations race', async () => {
    const acc = await seedAccount(s); // 2 Fax Defaults
    const t = await tokenFor(s.url, acc.api_key);
    const race = await Promise.all(
      [1, 2, 3, 4, 5, 6].map((i) => create({ name: `Line ${i}`, fax_as: acc.numbers[i] }, t)),
    );
    assert.deepEqual(race.map((r) => r.http).sort(), [200, 200, 200, 200, 422, 422]);
    const refused = race.find((r) => r.http === 422)!;
    assert.equal(
      refused.body.message,
      'Fax Default limit reached: an account may have at most 6 Fax Defaults; delete one first',
    );
    const n = await db.query('SELECT count(*)::int AS n FROM fax_defaults WHERE account_id = $1', [
      acc.account_id,
    ]);
    assert.equal(n.rows[0].n, 6);
    assert.equal(
      (await call(s.url, 'DELETE', `/v1/fax-defaults/${acc.template_id}`, { token: t })).http,
      200,
    );
    assert.equal((await create({ name: 'Again', fax_as: acc.numbers[7] }, t)).http, 200, 'room again');
  });

  it('keeps exactly one default: marking one unmarks the other, even when requests race', async () => {
    const a = await create({ name: 'A', fax_as: seed.numbers[11]!, is_default: true });
    assert.equal(a.http, 200);
    assert.deepEqual(await defaults(seed.account_id), [a.body.data.id]);
    const b = await create({ name: 'B', fax_as: seed.numbers[12]! });
    const c = await create({ name: 'C', fax_as: seed.numbers[13]! });
    const race = await Promise.all(
      [b, c, a, b, c].map((x) =>
        call(s.url, 'PATCH', `/v1/fax-defaults/${x.body.data.id}`, { token, body: { is_default: true } }),
      ),
    );
    assert.deepEqual(
      race.map((r) => r.http),
      [200, 200, 200, 200, 200],
    );
    assert.equal((await defaults(seed.account_id)).length, 1);
    const unset = await call(s.url, 'PATCH', `/v1/fax-defaults/${(await defaults(seed.account_id))[0]}`, {
      token,
      body: { is_default: false },
    });
    assert.equal(unset.body.data.is_default, false);
    assert.deepEqual(await defaults(seed.account_id), [], 'no default after unmarking it');
    // Put the seed's default back for the other tests.
    await db.query('UPDATE fax_defaults SET is_default = true WHERE account_id = $1 AND name = $2', [
      seed.account_id,
      'Front desk',
    ]);
  });

  it('a deleted Fax Default is never used again: not by template_id, not as the default', async () => {
    const acc = await seedAccount(s, { cover: true });
    const t = await tokenFor(s.url, acc.api_key);
    const [def] = await defaults(acc.account_id);
    assert.ok(def);
    const send = (o: Record<string, unknown>) =>
      call(s.url, 'POST', '/v1/faxes/send', {
        token: t,
        body: { fax_number: '+15551234567', fax_data: [{ file_name: 'a.pdf', file_data: pdf }], ...o },
      });
    assert.equal(
      (await call(s.url, 'DELETE', `/v1/fax-defaults/${acc.template_id}`, { token: t })).http,
      200,
    );
    const named = await send({ template_id: acc.template_id });
    assert.equal(named.http, 422);
    assert.equal(named.body.message, 'template_id: no Fax Default with this id exists in your account');
    const preview = await call(s.url, 'POST', '/v1/faxes/preview', {
      token: t,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
        template_id: acc.template_id,
      },
    });
    assert.equal(preview.http, 422);

    assert.equal((await call(s.url, 'DELETE', `/v1/fax-defaults/${def}`, { token: t })).http, 200);
    const noDefault = await send({});
    assert.equal(noDefault.http, 422, 'no default to take fax_as from');
    assert.match(noDefault.body.message, /^caller_id: is required/);
    const plain = await send({ caller_id: acc.numbers[2] }); // one of its own numbers (the caller id rule)
    assert.equal(plain.http, 200, JSON.stringify(plain.body));
    const job = await call(s.url, 'GET', `/v1/faxes/${plain.body.data.job_id}`, { token: t });
    assert.equal(job.body.data.template_id, null, 'the deleted default was not used');
    assert.equal(job.body.data.fax_quality, 'standard');
  });

  it('a fax keeps the values it was accepted with when its Fax Default is updated or deleted', async () => {
    const acc = await seedAccount(s, { cover: true });
    const t = await tokenFor(s.url, acc.api_key);
    const held = async (o: Record<string, unknown>) => {
      const r = await call(s.url, 'POST', '/v1/faxes/send', {
        token: t,
        body: {
          fax_number: '+15551234567',
          fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
          approval_required: true,
          ...o,
        },
      });
      assert.equal(r.http, 200, JSON.stringify(r.body));
      return r.body.data.job_id as string;
    };
    const updated = await held({}); // the account's default: Front desk
    const deleted = await held({ template_id: acc.template_id }); // Pharmacy line (fine)
    const [def] = await defaults(acc.account_id);
    const u = await call(s.url, 'PATCH', `/v1/fax-defaults/${def}`, {
      token: t,
      body: {
        sender_name: 'Renamed Desk',
        sender_company: 'Other Clinic',
        fax_as: acc.numbers[5],
        cover_page: false,
      },
    });
    assert.equal(u.http, 200);
    assert.equal(
      (await call(s.url, 'DELETE', `/v1/fax-defaults/${acc.template_id}`, { token: t })).http,
      200,
    );
    for (const id of [updated, deleted])
      assert.equal(
        (await call(s.url, 'POST', '/v1/faxes/approve', { token: t, body: { job_id: id } })).http,
        200,
      );

    // The cover's values are sealed in fax_renders (docs/encryption.md): read as the service reads them.
    const cover = (id: string) =>
      eventually(async () => {
        const r = await getRender(db, id);
        return r ? { cover: r.cover, page_count: r.pageCount } : null;
      }, 60_000);
    const a = await cover(updated);
    assert.equal(a.page_count, 3, 'still with a cover page (cover_page was true at acceptance)');
    assert.equal(a.cover?.from_name, 'Front Desk');
    assert.equal(a.cover?.from_company, 'Demo Clinic');
    assert.equal(a.cover?.from_fax, acc.numbers[0]);
    const b = await cover(deleted);
    assert.equal(b.page_count, 3);
    assert.equal(b.cover?.from_name, 'Pharmacy');
    assert.equal(b.cover?.from_fax, acc.numbers[1]);

    // A forward of the first fax uses the same frozen cover values.
    const fw = await call(s.url, 'POST', '/v1/faxes/forward', {
      token: t,
      body: { job_id: updated, fax_number: '+15557654321' },
    });
    assert.equal(fw.http, 200, JSON.stringify(fw.body));
    const f = await cover(fw.body.data.job_id);
    assert.equal(f.cover?.from_name, 'Front Desk');
  });

  it("a preview shows a Fax Default's new values right after its update", async () => {
    const acc = await seedAccount(s, { cover: true });
    const t = await tokenFor(s.url, acc.api_key);
    const preview = async () => {
      const r = await call(s.url, 'POST', '/v1/faxes/preview', {
        token: t,
        body: {
          fax_number: '+15551234567',
          fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
          template_id: acc.template_id,
          fax_quality: 'standard',
          recipient_name: 'Dr. Ada Moreau',
        },
      });
      assert.equal(r.http, 200, JSON.stringify(r.body));
      return r.body.data;
    };
    /** The cover as the preview must show it, drawn here from values we expect (as a send draws it). */
    const expected = async (values: CoverValues) => {
      const img = await pool.run({ kind: 'page-image', cover: values, page: 0, quality: 'standard' });
      assert.equal(img.kind, 'page-image');
      if (img.kind !== 'page-image') throw new Error('unreachable');
      return bilevelToPng(img.rows, img.width, img.height, X_DPI, Y_DPI.standard).toString('base64');
    };

    const old = await preview();
    assert.equal(old.cover.values.from_name, 'Pharmacy');
    const NEW = 'Quentin Zephyr-Blackwood';
    const u = await call(s.url, 'PATCH', `/v1/fax-defaults/${acc.template_id}`, {
      token: t,
      body: { sender_name: NEW, sender_company: 'Harbor Labs', cover_footer: 'Updated footer' },
    });
    assert.equal(u.http, 200);
    const now = await preview();
    assert.equal(now.cover.values.from_name, NEW);
    assert.equal(now.cover.values.from_company, 'Harbor Labs');
    assert.equal(now.cover.values.footer, 'Updated footer');

    // The image itself: identical to a cover drawn with the new values, and not to one with the old.
    const want: CoverValues = {
      ...(now.cover.values as CoverValues),
      from_name: NEW,
      from_company: 'Harbor Labs',
      footer: 'Updated footer',
    };
    assert.equal(now.page.png_base64, await expected(want), 'the preview shows the new sender');
    const stale: CoverValues = { ...want, from_name: 'Pharmacy', from_company: 'Demo Clinic', footer: null };
    assert.notEqual(now.page.png_base64, await expected(stale), 'the comparison tells the names apart');
    assert.notEqual(now.page.png_base64, old.page.png_base64);
  });
});
