// Contacts at /v1/contacts: create, list (cursor pages, search), get, update, next to the spec's
// POST /v1/contacts/delete; another account's ids answer exactly as missing ones; the duplicate rule
// and the per-account cap. Against the real service (PostgreSQL as the API role, row-level security).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { DemoSeed } from '../src/admin/seed.ts';
import { assertRefused, twoAccounts, type TwoAccounts } from './support/accounts.ts';
import type { Reply } from './support/client.ts';

describe('contacts', () => {
  let a: DemoSeed, tokenA: string, tokenB: string, owner: pg.Client;
  let api: TwoAccounts['api'], close: TwoAccounts['close'];

  before(async () => {
    ({ a, tokenA, tokenB, owner, api, close } = await twoAccounts({ CONTACTS_PER_ACCOUNT: '12' }));
  });
  after(() => close());

  it('create → get → update → list → delete (the spec’s), with encrypted ids', async () => {
    const c = await api('POST', '/v1/contacts', tokenA, {
      name: '  Dr. Zoë Kessler ',
      fax_number: '+15557770001',
      company: 'Lakeside Cardiology',
    });
    assert.equal(c.http, 200, JSON.stringify(c.body));
    assert.equal(c.body.status, 1);
    assert.equal(c.body.message, 'Contact created successfully');
    const id = c.body.data.id as string;
    assert.match(id, /^[A-Za-z0-9_-]{32}$/, 'an encrypted id, not the UUID');
    assert.deepEqual(
      { ...c.body.data, id: undefined, created_at: undefined },
      {
        id: undefined,
        name: 'Dr. Zoë Kessler',
        fax_number: '+15557770001',
        company: 'Lakeside Cardiology',
        created_at: undefined,
      },
    );
    const dbRow = await owner.query('SELECT account_id, name FROM contacts WHERE fax_number = $1', [
      '+15557770001',
    ]);
    assert.equal(dbRow.rows[0].account_id, a.account_id);

    const g = await api('GET', `/v1/contacts/${id}`, tokenA);
    assert.equal(g.http, 200);
    assert.equal(g.body.message, 'Contact retrieved successfully');
    assert.deepEqual(g.body.data, c.body.data);

    const u = await api('PATCH', `/v1/contacts/${id}`, tokenA, { company: null, name: 'Dr. Z. Kessler' });
    assert.equal(u.http, 200, JSON.stringify(u.body));
    assert.equal(u.body.message, 'Contact has been updated successfully.');
    assert.equal(u.body.data.name, 'Dr. Z. Kessler');
    assert.equal(u.body.data.company, null);
    assert.equal(u.body.data.fax_number, '+15557770001', 'fields not given are kept');
    assert.equal((await api('GET', `/v1/contacts/${id}`, tokenA)).body.data.name, 'Dr. Z. Kessler');

    const listed = await api('GET', '/v1/contacts?search=kessler', tokenA);
    assert.deepEqual(
      listed.body.data.map((x: { id: string }) => x.id),
      [id],
    );
    const del = await api('POST', '/v1/contacts/delete', tokenA, { id });
    assert.deepEqual(del.body, { status: 1, message: 'Contact has been deleted successfully.' });
    assertRefused(await api('GET', `/v1/contacts/${id}`, tokenA), 404, 'Contact not found');
    assertRefused(await api('PATCH', `/v1/contacts/${id}`, tokenA, { name: 'x' }), 404, 'Contact not found');
  });

  it('list: cursor pages, oldest first; search by name (case-insensitive) or by the digits of a number', async () => {
    const made: string[] = [];
    for (const [n, f] of [
      ['Alpha Clinic', '+15558880001'],
      ['beta pharmacy', '+15558880002'],
      ['Gamma_100% Labs', '+15558880003'],
      ['Delta Records', '+44 20 7946 0958'.replace(/ /g, '')],
      ['Epsilon ALPHA', '+15558880005'],
    ] as const) {
      const r = await api('POST', '/v1/contacts', tokenB, { name: n, fax_number: f });
      assert.equal(r.http, 200, JSON.stringify(r.body));
      made.push(r.body.data.id);
    }
    const seeded = (await api('GET', '/v1/contacts?limit=1000', tokenB)).body.data.map(
      (x: { id: string }) => x.id,
    );
    assert.deepEqual(seeded.slice(-5), made, 'oldest first, the new ones last');
    // Pages of 2 forward, then back.
    const pages: Reply[] = [];
    let r = await api('GET', '/v1/contacts?limit=2', tokenB);
    pages.push(r);
    while (r.body.meta.next_cursor) {
      r = await api('GET', `/v1/contacts?limit=2&cursor=${r.body.meta.next_cursor}`, tokenB);
      assert.equal(r.http, 200);
      pages.push(r);
    }
    assert.deepEqual(
      pages.flatMap((p) => p.body.data.map((x: { id: string }) => x.id)),
      seeded,
    );
    const back = await api(
      'GET',
      `/v1/contacts?limit=2&cursor=${pages.at(-1)!.body.meta.previous_cursor}`,
      tokenB,
    );
    assert.deepEqual(back.body.data, pages.at(-2)!.body.data);

    const names = async (q: string) =>
      (await api('GET', `/v1/contacts?search=${encodeURIComponent(q)}`, tokenB)).body.data.map(
        (x: { name: string }) => x.name,
      );
    assert.deepEqual(await names('ALPHA'), ['Alpha Clinic', 'Epsilon ALPHA']);
    assert.deepEqual(await names('%'), ['Gamma_100% Labs'], '% is a character, not a wildcard');
    assert.deepEqual(await names('_'), ['Gamma_100% Labs'], '_ is a character, not a wildcard');
    assert.deepEqual(
      await names('(20) 7946-0958'),
      ['Delta Records'],
      'digits of the number, punctuation ignored',
    );
    assert.deepEqual(await names('888000'), [
      'Alpha Clinic',
      'beta pharmacy',
      'Gamma_100% Labs',
      'Epsilon ALPHA',
    ]);
    assert.deepEqual(await names('nobody'), []);

    // A cursor is bound to its search and its account.
    const p1 = await api('GET', '/v1/contacts?limit=1&search=alpha', tokenB);
    assert.ok(p1.body.meta.next_cursor);
    assertRefused(
      await api('GET', `/v1/contacts?limit=1&search=beta&cursor=${p1.body.meta.next_cursor}`, tokenB),
      422,
      /^cursor: /,
    );
    assertRefused(
      await api('GET', `/v1/contacts?limit=1&search=alpha&cursor=${p1.body.meta.next_cursor}`, tokenA),
      422,
      /^cursor: /,
    );
    assertRefused(await api('GET', `/v1/contacts?search=${'x'.repeat(101)}`, tokenB), 422, /^search: /);
    assertRefused(await api('GET', '/v1/contacts?limit=0', tokenB), 422, /^limit: /);
  });

  it("another account's contact ids answer exactly as missing ones and change nothing", async () => {
    const theirs = a.contact_ids[0]!;
    const missing = 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
    // A number one of B's own contacts has: not a duplicate to report for a contact B does not have.
    const bNumber = (await api('GET', '/v1/contacts?limit=1', tokenB)).body.data[0].fax_number as string;
    for (const [m, body] of [
      ['GET', undefined],
      ['PATCH', { name: 'Hijacked' }],
      ['PATCH', { fax_number: bNumber }],
    ] as const) {
      const t = await api(m, `/v1/contacts/${theirs}`, tokenB, body);
      const x = await api(m, `/v1/contacts/${missing}`, tokenB, body);
      assertRefused(t, 404, 'Contact not found');
      assert.deepEqual(t.body, x.body);
    }
    const still = await api('GET', `/v1/contacts/${theirs}`, tokenA);
    assert.equal(still.http, 200);
    assert.notEqual(still.body.data.name, 'Hijacked');
    const listB = (await api('GET', '/v1/contacts?limit=1000', tokenB)).body.data.map(
      (x: { id: string }) => x.id,
    );
    assert.ok(!listB.includes(theirs));
  });

  it('invalid fields → 422 naming the field', async () => {
    const cases: [unknown, RegExp][] = [
      [{ fax_number: '+15550000001' }, /^name: is required/],
      [{ name: '   ', fax_number: '+15550000001' }, /^name: must not be empty/],
      [{ name: 'x'.repeat(201), fax_number: '+15550000001' }, /^name: is longer than 200/],
      [{ name: 'X' }, /^fax_number: is required/],
      [{ name: 'X', fax_number: '5551234' }, /^fax_number: must be an E\.164 number/],
      [{ name: 'X', fax_number: '+15550000001', company: 5 }, /^company: must be a string or null/],
      [{ name: 'X', fax_number: '+15550000001', email: 'x@example.org' }, /email/],
      [{ name: 'X\u0000', fax_number: '+15550000001' }, /^name: contains the character U\+0000/],
    ];
    for (const [body, m] of cases) assertRefused(await api('POST', '/v1/contacts', tokenA, body), 422, m);
    const id = a.contact_ids[1]!;
    assertRefused(
      await api('PATCH', `/v1/contacts/${id}`, tokenA, {}),
      422,
      /give at least one of name, fax_number, company/,
    );
    assertRefused(
      await api('PATCH', `/v1/contacts/${id}`, tokenA, { fax_number: '+1' }),
      422,
      /^fax_number: /,
    );
    assertRefused(await api('PATCH', `/v1/contacts/${id}`, tokenA, { name: null }), 422, /^name: /);
  });

  it('one contact per fax number (409 with the existing id); the cap per account (422)', async () => {
    const first = await api('POST', '/v1/contacts', tokenA, { name: 'Dup', fax_number: '+15556660001' });
    assert.equal(first.http, 200);
    const dup = await api('POST', '/v1/contacts', tokenA, { name: 'Dup again', fax_number: '+15556660001' });
    assertRefused(dup, 409, 'fax_number: a contact with this fax number exists already in your account');
    assert.deepEqual(dup.body.data, { id: first.body.data.id });
    // Another account may have a contact with the same number.
    assert.equal(
      (await api('POST', '/v1/contacts', tokenB, { name: 'Dup', fax_number: '+15556660001' })).http,
      200,
    );
    // Moving another contact onto the number is refused too; keeping its own number is not.
    const other = a.contact_ids[2]!;
    assertRefused(
      await api('PATCH', `/v1/contacts/${other}`, tokenA, { fax_number: '+15556660001' }),
      409,
      /^fax_number: /,
    );
    const own = (await api('GET', `/v1/contacts/${other}`, tokenA)).body.data.fax_number;
    assert.equal((await api('PATCH', `/v1/contacts/${other}`, tokenA, { fax_number: own })).http, 200);

    // The cap (12 here), counted per account, also under concurrent creates.
    const n = (
      await owner.query('SELECT count(*)::int AS n FROM contacts WHERE account_id = $1', [a.account_id])
    ).rows[0].n as number;
    const tries = await Promise.all(
      Array.from({ length: 15 - n }, (_, i) =>
        api('POST', '/v1/contacts', tokenA, {
          name: `Bulk ${i}`,
          fax_number: `+1555444${String(i).padStart(4, '0')}`,
        }),
      ),
    );
    assert.equal(tries.filter((t) => t.http === 200).length, 12 - n);
    for (const t of tries.filter((x) => x.http !== 200))
      assertRefused(
        t,
        422,
        'Contact limit reached: an account may have at most 12 contacts; delete one first',
      );
    const after = await owner.query('SELECT count(*)::int AS n FROM contacts WHERE account_id = $1', [
      a.account_id,
    ]);
    assert.equal(after.rows[0].n, 12);
  });
});
