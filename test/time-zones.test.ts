// Issue 27, finding 8: time zones whose offset is not a whole or half hour, and current IANA names
// that ICU lists under an older alias (Asia/Kathmandu: +5:45, listed as Asia/Katmandu; Asia/Kolkata:
// +5:30, listed as Asia/Calcutta; Pacific/Chatham: +13:45 in its summer) were refused by
// PATCH /v1/workspace. They are accepted now, names that are not zones still are not, and every date
// the service prints in the account's zone (header line, cover page, proof report) shows their offset.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { timeZoneProblem } from '../src/accounts/workspace.ts';
import { formatDate } from '../src/documents/cover.ts';
import { stamp } from '../src/documents/proof.ts';
import { headerDateTime } from '../src/domain/header-line.ts';
import { twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { call } from './support/client.ts';

const NOW = new Date('2026-11-26T14:30:00Z');
const VALID = ['Asia/Kathmandu', 'Asia/Kolkata', 'Pacific/Chatham', 'Europe/Kyiv', 'Asia/Katmandu', 'UTC'];
const INVALID = [
  'Mars/Olympus',
  '+05:45',
  'UTC+5:45',
  'GMT+5',
  'Asia/Kathmandu ',
  '',
  'Etc/GMT+15',
  'Asia/' + 'x'.repeat(80),
];

describe('time zones of the workspace', () => {
  let s: TwoAccounts['s'], tokenA: string, tokenB: string, close: TwoAccounts['close'];
  before(async () => {
    ({ s, tokenA, tokenB, close } = await twoAccounts());
  });
  after(() => close());

  it('PATCH /v1/workspace accepts Asia/Kathmandu, Asia/Kolkata and Pacific/Chatham and keeps them', async () => {
    for (const zone of VALID) {
      const r = await call(s.url, 'PATCH', '/v1/workspace', { token: tokenA, body: { time_zone: zone } });
      assert.equal(r.http, 200, `${zone}: ${r.body.message}`);
      assert.equal(r.body.data.time_zone, zone);
      const ws = await call(s.url, 'GET', '/v1/workspace', { token: tokenA });
      assert.equal(ws.body.data.account.time_zone, zone);
    }
    const other = await call(s.url, 'GET', '/v1/workspace', { token: tokenB });
    assert.equal(other.body.data.account.time_zone, 'UTC', "the other account's is unchanged");
  });

  it('PATCH /v1/workspace still refuses names that are not zones, with 422 naming time_zone', async () => {
    await call(s.url, 'PATCH', '/v1/workspace', { token: tokenA, body: { time_zone: 'Asia/Kathmandu' } });
    for (const zone of INVALID) {
      const r = await call(s.url, 'PATCH', '/v1/workspace', { token: tokenA, body: { time_zone: zone } });
      assert.equal(r.http, 422, `${JSON.stringify(zone)}: ${r.body.message}`);
      assert.equal(
        r.body.message,
        `time_zone: "${zone.slice(0, 64)}" is not an IANA time zone name (e.g. Europe/Paris, America/New_York, UTC)`,
      );
    }
    const ws = await call(s.url, 'GET', '/v1/workspace', { token: tokenA });
    assert.equal(ws.body.data.account.time_zone, 'Asia/Kathmandu', 'a refused zone changes nothing');
    for (const zone of VALID) assert.equal(timeZoneProblem(zone), null, zone);
    assert.match(String(timeZoneProblem(42)), /must be a string/);
  });

  it('prints the dates of a fax and its report with the quarter-hour offsets', () => {
    assert.deepEqual(headerDateTime(NOW, 'Asia/Kathmandu'), { date: '2026-11-26', time: '20:15 GMT+5:45' });
    assert.deepEqual(headerDateTime(NOW, 'Asia/Kolkata'), { date: '2026-11-26', time: '20:00 GMT+5:30' });
    // Chatham is 13:45 ahead in its summer: the date is already the next day.
    assert.deepEqual(headerDateTime(NOW, 'Pacific/Chatham'), { date: '2026-11-27', time: '04:15 GMT+13:45' });
    assert.equal(formatDate(NOW, 'Asia/Kathmandu').text, 'November 26, 2026, 8:15 PM (Asia/Kathmandu)');
    assert.equal(formatDate(NOW, 'Pacific/Chatham').text, 'November 27, 2026, 4:15 AM (Pacific/Chatham)');
    assert.equal(stamp(NOW, 'Asia/Kathmandu'), '2026-11-26 20:15:00 GMT+5:45');
    assert.equal(stamp(NOW, 'Pacific/Chatham'), '2026-11-27 04:15:00 GMT+13:45');
  });

  it('prints a zone ICU does not know in UTC, and says so, each time (the formats are kept per zone)', () => {
    for (let i = 0; i < 2; i++) {
      assert.deepEqual(formatDate(NOW, 'Mars/Olympus'), {
        text: 'November 26, 2026, 2:30 PM (UTC)',
        zone: 'UTC',
      });
      assert.deepEqual(headerDateTime(NOW, 'Mars/Olympus'), { date: '2026-11-26', time: '14:30 UTC' });
      // A known zone after it is its own, not the fallback's.
      assert.equal(formatDate(NOW, 'Asia/Kolkata').zone, 'Asia/Kolkata');
    }
  });
});
