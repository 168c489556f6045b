// Numbers: the operator assigns and releases them with the admin CLI (a number belongs to one
// account), the customer lists them and changes label, station id and receiving flag
// (PATCH /v1/numbers/{id}), and the caller id rule of send and forward: the caller id must be one
// of the account's numbers or the installation's FAX_DEFAULT_CALLER_ID.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import pg from 'pg';
import { assignNumber, NumberAdminError, releaseNumber } from '../src/accounts/numbers.ts';
import type { DemoSeed } from '../src/admin/seed.ts';
import { createAccount } from '../src/auth/service.ts';
import { assertRefused, twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import type { PreparedFax, TransmissionBackend } from '../src/transmission/backend.ts';
import { eventually, startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

const INSTALLATION = '+15550009999';

describe('numbers and the caller id rule', () => {
  let s: TwoAccounts['s'], a: DemoSeed, b: DemoSeed, tokenA: string, tokenB: string, owner: pg.Client;
  let api: TwoAccounts['api'], close: TwoAccounts['close'];
  let pdf: string;
  /** The admin CLI as an operator runs it: exit code, stdout JSON, stderr. */
  const admin = async (...args: string[]) => {
    try {
      const r = await promisify(execFile)(process.execPath, ['src/admin/cli.ts', ...args], {
        env: { ...process.env, DATABASE_URL: s.cfg.DATABASE_URL },
        timeout: 30_000,
      });
      return { code: 0, out: JSON.parse(r.stdout), err: r.stderr };
    } catch (e) {
      const x = e as { code: number; stderr: string };
      return { code: x.code, out: null, err: x.stderr };
    }
  };
  const send = (token: string, extra: object) =>
    api('POST', '/v1/faxes/send', token, {
      fax_number: '+15551234567',
      fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
      ...extra,
    });

  before(async () => {
    ({ s, a, b, tokenA, tokenB, owner, api, close } = await twoAccounts({
      FAX_DEFAULT_CALLER_ID: INSTALLATION,
    }));
    pdf = await makePdfBase64(1);
  });
  after(() => close());

  it('add-number assigns, lists, repeats idempotently; another account cannot take it; remove-number frees it', async () => {
    const n = '+15553330001';
    const added = await admin(
      'add-number',
      '--account',
      a.account_id,
      '--number',
      n,
      '--receive',
      '--label',
      'Referrals',
    );
    assert.equal(added.code, 0, added.err);
    assert.equal(added.out.account_id, a.account_id);
    assert.equal(added.out.number, n);
    assert.equal(added.out.receive, true);
    assert.equal(added.out.label, 'Referrals');
    assert.equal(added.out.created, true);
    const listed = (await api('GET', '/v1/numbers?limit=1000', tokenA)).body.data;
    const mine = listed.find((x: { number: string }) => x.number === n);
    assert.deepEqual(
      { ...mine, created_at: undefined },
      {
        id: added.out.id,
        number: n,
        label: 'Referrals',
        station_id: null,
        receive: true,
        capabilities: ['fax_send', 'fax_receive'],
        // Fax to email (issue 30, docs/mail.md): off until set.
        email_to: [],
        email_attach: 'pdf',
        created_at: undefined,
      },
    );
    const again = await admin(
      'add-number',
      '--account',
      a.account_id,
      '--number',
      n,
      '--station-id',
      '+1 555 333 0001',
    );
    assert.equal(again.code, 0, again.err);
    assert.equal(again.out.created, false);
    assert.equal(again.out.station_id, '+1 555 333 0001');
    assert.equal(again.out.receive, true, 'options not given are kept');

    const taken = await admin('add-number', '--account', b.account_id, '--number', n);
    assert.equal(taken.code, 1);
    assert.match(
      taken.err,
      new RegExp(`number \\${n} belongs to another account \\(${a.account_id}\\); release it first`),
    );
    assert.equal(
      (await owner.query('SELECT account_id FROM numbers WHERE number = $1', [n])).rows[0].account_id,
      a.account_id,
    );

    const removed = await admin('remove-number', '--number', n);
    assert.equal(removed.code, 0, removed.err);
    assert.deepEqual(removed.out, { released: { number: n, account_id: a.account_id } });
    assert.ok(
      !(await api('GET', '/v1/numbers?limit=1000', tokenA)).body.data.some(
        (x: { number: string }) => x.number === n,
      ),
    );
    const reassigned = await admin('add-number', '--account', b.account_id, '--number', n);
    assert.equal(reassigned.code, 0, reassigned.err);
    assert.equal(reassigned.out.receive, false, 'receiving is off unless --receive');

    const twice = await admin('remove-number', '--number', '+15553339999');
    assert.equal(twice.code, 1);
    assert.match(twice.err, /number \+15553339999 is not assigned to any account/);
    for (const [args, m] of [
      [['add-number', '--account', a.account_id, '--number', '5553330002'], /is not an E\.164 number/],
      [
        ['add-number', '--account', '00000000-0000-4000-8000-000000000000', '--number', '+15553330002'],
        /no account with id/,
      ],
      [
        ['add-number', '--account', a.account_id, '--number', '+15553330002', '--station-id', 'ABC'],
        /--station-id must be/,
      ],
    ] as const) {
      const r = await admin(...args);
      assert.equal(r.code, 1);
      assert.match(r.err, m);
    }
    const usage = await admin('add-number', '--number', '+15553330002');
    assert.equal(usage.code, 2);
    assert.match(usage.err, /add-number needs --account/);
  });

  it('two operators assigning one number to two accounts at once: one wins, the other is told who holds it', async () => {
    const n = '+15553330077';
    const assign = async (accountId: string) => {
      const c = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
      await c.connect();
      try {
        await c.query('BEGIN');
        const r = await assignNumber(c, { accountId, number: n, label: 'race' });
        await c.query('COMMIT');
        return r;
      } catch (err) {
        await c.query('ROLLBACK');
        throw err;
      } finally {
        await c.end();
      }
    };
    const both = await Promise.allSettled([assign(a.account_id), assign(b.account_id)]);
    const won = both.filter((r) => r.status === 'fulfilled');
    const lost = both.filter((r) => r.status === 'rejected');
    assert.equal(won.length, 1);
    assert.equal(lost.length, 1);
    const winner = (won[0] as PromiseFulfilledResult<{ account_id: string }>).value.account_id;
    const err = (lost[0] as PromiseRejectedResult).reason as Error;
    assert.ok(err instanceof NumberAdminError, String(err));
    assert.match(err.message, new RegExp(`belongs to another account \\(${winner}\\)`));
    const held = await owner.query('SELECT account_id FROM numbers WHERE number = $1', [n]);
    assert.deepEqual(held.rows, [{ account_id: winner }]);
    assert.deepEqual(await releaseNumber(owner, n), { number: n, account_id: winner });
    await assert.rejects(releaseNumber(owner, n), /is not assigned to any account/);
  });

  it("PATCH /v1/numbers/{id}: label, station_id, receive; invalid → 422 naming the field; another account's id → as missing", async () => {
    const r0 = await owner.query('SELECT id FROM numbers WHERE account_id = $1 ORDER BY created_at LIMIT 1', [
      a.account_id,
    ]);
    const id = r0.rows[0].id as string;
    const u = await api('PATCH', `/v1/numbers/${id}`, tokenA, {
      label: 'Front desk',
      station_id: '+1 555 0100',
      receive: true,
    });
    assert.equal(u.http, 200, JSON.stringify(u.body));
    assert.equal(u.body.message, 'Number has been updated successfully.');
    assert.equal(u.body.data.label, 'Front desk');
    assert.equal(u.body.data.station_id, '+1 555 0100');
    assert.equal(u.body.data.receive, true);
    const cleared = await api('PATCH', `/v1/numbers/${id}`, tokenA, { station_id: null });
    assert.equal(cleared.body.data.station_id, null);
    assert.equal(cleared.body.data.label, 'Front desk');

    for (const [body, m] of [
      [{}, /give at least one of label, station_id, receive/],
      [{ station_id: '123456789012345678901' }, /^station_id: must be 1 to 20 characters/],
      [{ station_id: 'ACME fax' }, /^station_id: /],
      [{ label: '' }, /^label: must not be empty/],
      [{ receive: 'yes' }, /^receive: must be true or false/],
      [{ number: '+15550000000' }, /number/],
    ] as const)
      assertRefused(await api('PATCH', `/v1/numbers/${id}`, tokenA, body), 422, m);
    await owner.query("UPDATE numbers SET capabilities = ARRAY['fax_send'] WHERE id = $1", [id]);
    assertRefused(
      await api('PATCH', `/v1/numbers/${id}`, tokenA, { receive: true }),
      422,
      /^receive: this number cannot receive/,
    );

    const theirs = await api('PATCH', `/v1/numbers/${id}`, tokenB, { label: 'mine now' });
    const missing = await api('PATCH', '/v1/numbers/00000000-0000-4000-8000-000000000000', tokenB, {
      label: 'mine now',
    });
    assertRefused(theirs, 404, 'Number not found');
    assert.deepEqual(theirs.body, missing.body);
    assertRefused(
      await api('PATCH', '/v1/numbers/not-a-uuid', tokenB, { label: 'x' }),
      404,
      'Number not found',
    );
    const row = await owner.query('SELECT label FROM numbers WHERE id = $1', [id]);
    assert.equal(row.rows[0].label, 'Front desk');
  });

  it("caller id: one of the account's numbers or the installation's; others refused with 422 naming caller_id", async () => {
    // The account's own number, and the installation's caller id: accepted.
    assert.equal((await send(tokenA, { caller_id: a.numbers[3] })).http, 200);
    assert.equal((await send(tokenA, { caller_id: INSTALLATION })).http, 200);
    // Another account's number, and a number nobody holds: refused, nothing written.
    const before = await owner.query('SELECT count(*)::int AS n FROM fax_jobs WHERE account_id = $1', [
      a.account_id,
    ]);
    for (const caller of [b.numbers[3]!, '+15557654321'])
      assertRefused(
        await send(tokenA, { caller_id: caller }),
        422,
        `caller_id: ${caller} is not one of your account's numbers nor the installation's caller id ${INSTALLATION}; send with caller_id set to one of the numbers of GET /v1/numbers`,
      );
    const afterCount = await owner.query('SELECT count(*)::int AS n FROM fax_jobs WHERE account_id = $1', [
      a.account_id,
    ]);
    assert.equal(afterCount.rows[0].n, before.rows[0].n);

    // From the Fax Default: its fax_as is checked too, and the message says where it came from.
    assert.equal(
      (await send(tokenA, {})).http,
      200,
      'the default Fax Default presents a number of the account',
    );
    await admin('remove-number', '--number', a.numbers[1]!);
    assertRefused(
      await send(tokenA, { template_id: a.template_id }),
      422,
      new RegExp(
        `^caller_id: \\${a.numbers[1]} \\(fax_as of the Fax Default ${a.template_id}\\) is not one of your account's numbers`,
      ),
    );
    // Forward: the resolved caller id is checked the same way.
    const src = await send(tokenA, {});
    const fwd = (caller?: string) =>
      api('POST', '/v1/faxes/forward', tokenA, {
        job_id: src.body.data.job_id,
        fax_number: '+15559876543',
        ...(caller ? { caller_id: caller } : {}),
      });
    assert.equal((await fwd()).http, 200);
    assert.equal((await fwd(a.numbers[4])).http, 200);
    assertRefused(await fwd(b.numbers[4]), 422, /^caller_id: /);

    // A fresh account with no Fax Default and no number presents the installation's caller id.
    const fresh = await createAccount(owner, 'Fresh');
    const tokenF = await tokenFor(s.url, fresh.api_key);
    const ok = await send(tokenF, {});
    assert.equal(ok.http, 200, JSON.stringify(ok.body));
    const job = await api('GET', `/v1/faxes/${ok.body.data.job_id}`, tokenF);
    assert.equal(job.body.data.caller_id, INSTALLATION);
    assertRefused(
      await send(tokenF, { caller_id: '+15551112222' }),
      422,
      /^caller_id: \+15551112222 is not one of/,
    );
  });
});

describe('caller id rule without an installation caller id', () => {
  it('an account with no Fax Default and no caller_id is told caller_id is required', async () => {
    const s = await startService({ components: ['api'] });
    const owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await owner.connect();
    try {
      const fresh = await createAccount(owner, 'Fresh');
      const token = await tokenFor(s.url, fresh.api_key);
      const pdf = await makePdfBase64(1);
      const r = await call(s.url, 'POST', '/v1/faxes/send', {
        token,
        body: { fax_number: '+15551234567', fax_data: [{ file_name: 'a.pdf', file_data: pdf }] },
      });
      assert.equal(r.http, 422);
      assert.equal(
        r.body.message,
        'caller_id: is required because the account has no default Fax Default to take fax_as from',
      );
      const r2 = await call(s.url, 'POST', '/v1/faxes/send', {
        token,
        body: {
          fax_number: '+15551234567',
          caller_id: '+15550009999',
          fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
        },
      });
      assert.equal(r2.http, 422);
      assert.equal(
        r2.body.message,
        "caller_id: +15550009999 is not one of your account's numbers; send with caller_id set to one of the numbers of GET /v1/numbers",
      );
    } finally {
      await owner.end();
      await s.dropAll();
    }
  });
});

describe("a number's station id on the line", () => {
  it('the backend is given the station id of the number the fax presents, else none (the caller id)', async () => {
    const seen: PreparedFax[] = [];
    const backend: TransmissionBackend = {
      name: 'recording',
      transmit: async (fax) => {
        seen.push(fax);
        return {
          ok: true,
          pages: fax.pageBytes.length,
          durationMs: 1,
          remoteStationId: 'remote',
          bitRate: 14_400,
        };
      },
    };
    const s = await startService({ backend });
    try {
      const seed = await seedAccount(s);
      const token = await tokenFor(s.url, seed.api_key);
      const owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
      await owner.connect();
      const id = (await owner.query('SELECT id FROM numbers WHERE number = $1', [seed.numbers[2]])).rows[0]
        .id;
      await owner.end();
      const set = await call(s.url, 'PATCH', `/v1/numbers/${id}`, {
        token,
        body: { station_id: '+1 555 0123' },
      });
      assert.equal(set.http, 200, JSON.stringify(set.body));
      const pdf = await makePdfBase64(1);
      const send = async (caller: string) => {
        const r = await call(s.url, 'POST', '/v1/faxes/send', {
          token,
          body: {
            fax_number: '+15551234567',
            caller_id: caller,
            fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
          },
        });
        assert.equal(r.http, 200, JSON.stringify(r.body));
        const jobId = r.body.data.job_id as string;
        return eventually(async () => seen.find((f) => f.jobId === jobId));
      };
      const withStation = await send(seed.numbers[2]!);
      assert.equal(withStation.callerId, seed.numbers[2]);
      assert.equal(withStation.stationId, '+1 555 0123');
      const without = await send(seed.numbers[3]!);
      assert.equal(without.callerId, seed.numbers[3]);
      assert.equal(without.stationId, undefined);
    } finally {
      await s.dropAll();
    }
  });
});
