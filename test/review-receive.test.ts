// Security review: what a far end writes in an INVITE's URIs reaches the receiving account's data
// (from_number, its events and webhooks). A malformed percent-escape must not fail the call before
// the source allow-list is checked, and a caller id that is not a number is stored as bounded,
// printable text (a NUL would make PostgreSQL refuse the row; 60 KiB of it would be kept and sent in
// every event).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { uriUser } from '../src/receive/answering.ts';
import { buildRecord } from '../src/receive/sink.ts';
import { parseCidr } from '../src/documents/addresses.ts';
import { InboundRouter } from '../src/receive/routing.ts';

describe('inbound call URIs from the far end', () => {
  it('reads a malformed percent-escape as it is written, without throwing', () => {
    assert.equal(uriUser('sip:%zz@trunk.example'), '%zz');
    assert.equal(uriUser('<sip:+1555%E0%A4%A@trunk.example>'), '+1555%E0%A4%A');
    assert.equal(uriUser('sip:%2B15551234567@trunk.example'), '+15551234567');
  });

  it('keeps a non-number caller id printable and at most 64 characters', async () => {
    const router = new InboundRouter({
      allow: { cidrs: [parseCidr('127.0.0.0/8')!], text: '127.0.0.0/8' },
      countryCode: '1',
      lines: 2,
      findNumber: async (n) => ({
        numberId: 'n1',
        accountId: 'a1',
        number: n,
        stationId: null,
        receive: true,
      }),
    });
    const call = (fromUser: string) =>
      router.route({ requestUser: '+15551230000', toUser: null, fromUser, source: '127.0.0.1' });
    const a = await call(`evil\u0000name\r\nX: y${'A'.repeat(60_000)}`);
    assert.ok(a.answer);
    assert.ok(a.from !== null && a.from.length <= 64, `from is ${a.from?.length} characters`);
    // eslint-disable-next-line no-control-regex
    assert.doesNotMatch(a.from, /[\u0000-\u001f\u007f]/);
    assert.ok(a.from.startsWith('evil name X: y'));
    a.release();
    const b = await call('anonymous');
    assert.ok(b.answer);
    assert.equal(b.from, 'anonymous');
    b.release();
    const c = await call('5551239876');
    assert.ok(c.answer);
    assert.equal(c.from, '+15551239876');
    c.release();
  });

  it("stores the far end's TSI printable and bounded", async () => {
    const result = {
      ok: false,
      code: 49,
      text: 'the call dropped',
      pages: 0,
      bitRate: 0,
      ecm: false,
      remoteIdent: `ACME\u0000\u001b[31m ${'Z'.repeat(500)}`,
      transport: 'audio' as const,
      durationMs: 1000,
    };
    const rec = await buildRecord(result, null, 1024);
    assert.ok(rec.remoteCsid !== null && rec.remoteCsid.length <= 64);
    assert.ok(rec.remoteCsid.startsWith('ACME [31m Z'), rec.remoteCsid);
    assert.equal((await buildRecord({ ...result, remoteIdent: '  ' }, null, 1024)).remoteCsid, null);
    assert.equal(
      (await buildRecord({ ...result, remoteIdent: ' +1 555 0001 ' }, null, 1024)).remoteCsid,
      '+1 555 0001',
    );
  });
});
