// Received faxes (issue 20): routing of inbound calls (pure rules, then against the real numbers
// table), the sink driven with genuine receptions from the SpanDSP loopback (full and dropped after
// page N), the PDF that wraps the received strips (decoded by poppler, rendered by pdftoppm), the
// API under /v1/received-faxes with another account's ids, the signed webhook of fax.received,
// the sweep of receptions whose process died, and retention.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import client from 'prom-client';
import { Webhook } from 'standardwebhooks';
import { apiDatabaseUrl } from '../src/db/tenant-db.ts';
import { asyncApiDocument } from '../src/events/asyncapi.ts';
import { receivedFaxEvent } from '../src/events/schema.ts';
import { eventTypes } from '../src/events/types.ts';
import { createLogger } from '../src/log.ts';
import { answeringHooks, uriUser } from '../src/receive/answering.ts';
import { createReceiving } from '../src/receive/component.ts';
import { createReceiveMetrics } from '../src/receive/metrics.ts';
import {
  InboundRouter,
  normaliseE164,
  resolveAllowList,
  sourceAllowed,
  trunkHost,
} from '../src/receive/routing.ts';
import { PgReceivedFaxSink, buildRecord, type ReceptionResult } from '../src/receive/sink.ts';
import { failAbandoned, findReceivingNumber, purgeReceivedImages } from '../src/receive/store.ts';
import { dropLastPage, readFaxTiff } from '../src/receive/tiff.ts';
import { loadFaxloop, unavailableMessage } from '../src/transmission/spandsp/addon.ts';
import { assertRefused, twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { makeFaxTiff, sameImages } from './support/faxtiff.ts';
import { eventually } from './support/harness.ts';
import { startProcess } from './support/process.ts';
import { decodeWithLibtiff } from './support/render-tiff.ts';
import { skipUnless } from './support/skips.ts';

const addon = loadFaxloop();
const needsAddon = skipUnless(!addon && unavailableMessage, 'spandsp');

describe('inbound call routing (pure)', () => {
  it('normalises the forms trunks write to E.164', () => {
    const cases: [string | null, string, string | null][] = [
      ['+15551234567', '', '+15551234567'],
      ['+1 (555) 123-4567', '', '+15551234567'],
      ['tel:+15551234567;npdi', '', '+15551234567'],
      ['sip:+15551234567@trunk.example', '', '+15551234567'],
      ['0015551234567', '', '+15551234567'],
      ['004420794600000', '44', '+4420794600000'],
      ['15551234567', '', '+15551234567'],
      ['15551234567', '1', '+15551234567'],
      ['5551234567', '1', '+15551234567'],
      ['020 7946 0000', '44', '+442079460000'],
      ['442079460000', '44', '+442079460000'],
      ['fax', '1', null],
      ['s', '', null],
      ['+0123', '', null],
      ['', '', null],
      [null, '', null],
      ['+1234567890123456', '', null],
    ];
    for (const [raw, cc, want] of cases) assert.equal(normaliseE164(raw, cc), want, `${raw} with ${cc}`);
  });

  it('the received-fax events are in the AsyncAPI document and may be subscribed to by webhooks', () => {
    const doc = asyncApiDocument('faxline') as {
      channels: {
        events: { messages: Record<string, { payload: { properties: Record<string, unknown> } }> };
      };
    };
    const msg = doc.channels.events.messages.receivedFaxEvent;
    assert.ok(msg, 'message receivedFaxEvent');
    assert.ok('received_fax_id' in msg.payload.properties);
    for (const type of ['fax.receiving', 'fax.received', 'fax.receive_failed'])
      assert.ok((eventTypes as readonly string[]).includes(type), type);
  });

  it('reads the user part of SIP and tel URIs', () => {
    assert.equal(uriUser('sip:+15551234567@trunk.example;user=phone'), '+15551234567');
    assert.equal(uriUser('<sips:%2B4420@x>'), '+4420');
    assert.equal(uriUser('tel:+15551234567;npdi'), '+15551234567');
    assert.equal(uriUser('sip:trunk.example'), 'trunk.example');
    assert.equal(uriUser('sip:@x'), null);
    assert.equal(uriUser('mailto:a@b'), null);
  });

  it('reads the trunk host and resolves SIP_INBOUND_ALLOW (addresses, CIDRs, names; default the trunk)', async () => {
    assert.equal(trunkHost('sip:trunk.example.net:5060;transport=udp'), 'trunk.example.net');
    assert.equal(trunkHost('sip:user@10.1.2.3'), '10.1.2.3');
    assert.equal(trunkHost('sip:[2001:db8::1]:5060'), '2001:db8::1');
    const fake = async (h: string) => (h === 'trunk.example.net' ? ['192.0.2.7', '2001:db8::7'] : []);
    const byTrunk = await resolveAllowList('', 'sip:trunk.example.net:5060', fake);
    assert.ok(sourceAllowed(byTrunk, '192.0.2.7'));
    assert.ok(sourceAllowed(byTrunk, '::ffff:192.0.2.7'), 'an IPv4-mapped source is the IPv4 address');
    assert.ok(sourceAllowed(byTrunk, '2001:db8::7'));
    assert.ok(!sourceAllowed(byTrunk, '192.0.2.8'));
    const listed = await resolveAllowList('10.0.0.0/8, 127.0.0.1 localhost', 'sip:ignored', async () => [
      '127.0.0.2',
    ]);
    assert.ok(sourceAllowed(listed, '10.200.3.4'));
    assert.ok(sourceAllowed(listed, '127.0.0.2'));
    assert.ok(!sourceAllowed(listed, '11.0.0.1'));
    assert.ok(!sourceAllowed(listed, 'not an address'));
    const none = await resolveAllowList('', '', fake);
    assert.ok(!sourceAllowed(none, '127.0.0.1'), 'nothing configured refuses every call');
    await assert.rejects(resolveAllowList('bad_host!', '', fake), /neither an address/);
    await assert.rejects(resolveAllowList('nowhere.example', '', fake), /resolves to no address/);
    const real = await resolveAllowList('localhost', '');
    assert.ok(sourceAllowed(real, '127.0.0.1'), 'localhost resolves through the system resolver');
  });
});

describe('received TIFF reader and bad input (pure)', () => {
  const le = (n: number, bytes: number) => {
    const b = Buffer.alloc(bytes);
    if (bytes === 2) b.writeUInt16LE(n);
    else b.writeUInt32LE(n);
    return b;
  };
  /** A one-IFD little-endian TIFF with the given entries [tag, type, count, value]. */
  const tiff = (entries: [number, number, number, number][], data = Buffer.from([0, 0]), next = 0) => {
    const ifdAt = 8 + data.length;
    const ifd = Buffer.concat([
      le(entries.length, 2),
      ...entries.map(([tag, type, count, value]) =>
        Buffer.concat([
          le(tag, 2),
          le(type, 2),
          le(count, 4),
          type === 3 ? Buffer.concat([le(value, 2), le(0, 2)]) : le(value, 4),
        ]),
      ),
      le(next, 4),
    ]);
    return Buffer.concat([Buffer.from('II'), le(42, 2), le(ifdAt, 4), data, ifd]);
  };
  const page = (
    o: { compression?: number; bits?: number; t4?: number; count?: number; next?: number } = {},
  ) =>
    tiff(
      [
        [256, 4, 1, 1728],
        [257, 4, 1, 10],
        [258, 3, 1, o.bits ?? 1],
        [259, 3, 1, o.compression ?? 4],
        [273, 4, 1, 8],
        [279, 4, 1, o.count ?? 2],
        ...(o.t4 !== undefined ? ([[292, 4, 1, o.t4]] as [number, number, number, number][]) : []),
      ],
      Buffer.from([0, 0]),
      o.next ?? 0,
    );

  it('reads the page layout and refuses what it cannot wrap, with a reason', () => {
    const [p] = readFaxTiff(page());
    assert.deepEqual(
      [p!.width, p!.height, p!.compression, p!.xDpi, p!.yDpi, p!.strips.length],
      [1728, 10, 4, 204, 196, 1],
    );
    assert.deepEqual(
      readFaxTiff(page({ compression: 3, t4: 5 })).map((x) => [x.twoD, x.byteAligned]),
      [[true, true]],
    );
    const refused: [Buffer, RegExp][] = [
      [Buffer.from('GIF89a'), /too short|not a TIFF/],
      [Buffer.from('XXXX0000'), /not a TIFF file/],
      [Buffer.concat([Buffer.from('II'), le(43, 2), le(8, 4)]), /version/],
      [page({ compression: 5 }), /compression 5/],
      [page({ bits: 8 }), /not a bilevel/],
      [page({ compression: 3, t4: 2 }), /uncompressed mode/],
      [page({ count: 1_000_000 }), /beyond the end/],
      [page({ next: 8 + 2 }), /loops/],
      [page().subarray(0, 20), /beyond the end/],
    ];
    for (const [buf, re] of refused) assert.throws(() => readFaxTiff(buf), re);
  });

  it('a last page the engine rejected (over INBOUND_MAX_PAGE_MM) is dropped; the pages before it are kept', async () => {
    const file = makeFaxTiff(3, 'low');
    const three = readFileSync(file);
    const two = dropLastPage(three);
    assert.ok(two);
    assert.equal(readFaxTiff(two).length, 2);
    assert.deepEqual(
      readFaxTiff(two).map((p) => Buffer.from(p.strips[0]!.data).toString('base64')),
      readFaxTiff(three)
        .slice(0, 2)
        .map((p) => Buffer.from(p.strips[0]!.data).toString('base64')),
    );
    assert.equal(readFaxTiff(three).length, 3, 'the original is not changed');
    assert.equal(dropLastPage(readFileSync(makeFaxTiff(1, 'low'))), null, 'one page: nothing left');
    const base: ReceptionResult = {
      ok: false,
      code: 49,
      text: 'page 3 longer than 1000 mm: the page length limit (INBOUND_MAX_PAGE_MM)',
      pages: 3,
      bitRate: 14400,
      ecm: true,
      remoteIdent: 'X',
      transport: 't38',
      durationMs: 1,
      lastPageRejected: true,
    };
    const r = await buildRecord(base, file, 1 << 24);
    assert.deepEqual([r.status, r.pages], ['partial', 2]);
    assert.equal(readFaxTiff(r.tiff!).length, 2);
    assert.match(r.resultText, /INBOUND_MAX_PAGE_MM\); 2 pages kept$/);
    const none = await buildRecord({ ...base, pages: 1 }, makeFaxTiff(1, 'low'), 1 << 24);
    assert.deepEqual([none.status, none.pages, none.tiff, none.pdf], ['failed', 0, null, null]);
  });

  it('a garbage or oversized image is stored as a clear result, never half as a fax', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'faxline-bad-'));
    const junk = join(dir, 'junk.tif');
    writeFileSync(junk, Buffer.from('II*\0garbage that is no IFD at all'));
    const base: ReceptionResult = {
      ok: false,
      code: 48,
      text: 'Disconnected after permitted retries',
      pages: 1,
      bitRate: 9600,
      ecm: false,
      remoteIdent: ' ',
      transport: 'audio',
      durationMs: 1234.4,
    };
    const r = await buildRecord(base, junk, 1 << 20);
    assert.equal(r.status, 'partial');
    assert.equal(r.pdf, null);
    assert.ok(r.tiff, 'the file as received is kept');
    assert.match(r.resultText, /could not be wrapped as PDF \(.*\)/);
    assert.equal(r.remoteCsid, null);
    assert.equal(r.durationMs, 1234);
    const big = await buildRecord({ ...base, ok: true, code: 0, text: 'OK' }, junk, 10);
    assert.deepEqual([big.status, big.tiff, big.pages], ['failed', null, 0]);
    assert.match(big.resultText, /larger than the 10 bytes kept/);
    const none = await buildRecord({ ...base, pages: 0 }, join(dir, 'missing.tif'), 1 << 20);
    assert.deepEqual([none.status, none.tiff, none.pdf, none.bitRate], ['failed', null, null, 9600]);
  });
});

/** A genuine reception: SpanDSP sends `tx` to a SpanDSP receiver writing rxFile. */
async function receive(
  pages: number,
  o: { dropAfterPages?: number; t38?: boolean; quality?: 'low' | 'standard' | 'hd' } = {},
) {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-recv-'));
  const tx = makeFaxTiff(pages, o.quality ?? 'standard');
  const rx = join(dir, 'rx.tif');
  const r = await addon!.run({
    txFile: tx,
    rxFile: rx,
    t38: o.t38 ?? true,
    ecm: true,
    txIdent: '+15550001111',
    rxIdent: 'CSI 1',
    ...(o.dropAfterPages !== undefined ? { dropAfterPages: o.dropAfterPages } : {}),
  });
  const result: ReceptionResult = {
    ok: r.receiverCode === 0,
    code: r.receiverCode,
    text: r.receiverText,
    pages: r.pagesReceived,
    bitRate: r.bitRate,
    ecm: r.ecm,
    remoteIdent: '+15550001111',
    transport: o.t38 === false ? 'audio' : 't38',
    durationMs: r.lineTimeMs,
  };
  return { tx, rx, result, dir };
}

/** Every page of the PDF as poppler decodes its image (pdfimages) and renders it (pdftoppm). */
function checkPdf(pdf: Buffer, tiff: Buffer, dir: string): void {
  const file = join(dir, 'fax.pdf');
  writeFileSync(file, pdf);
  const want = decodeWithLibtiff(tiff);
  const list = execFileSync('pdfimages', ['-list', file], { encoding: 'utf8' });
  assert.equal(list.match(/ ccitt /g)?.length, want.length, list);
  execFileSync('pdfimages', [file, join(dir, 'img')]);
  const imgs = readdirSync(dir)
    .filter((f) => f.startsWith('img-'))
    .sort();
  assert.equal(imgs.length, want.length);
  want.forEach((page, i) => {
    const pbm = readFileSync(join(dir, imgs[i]!));
    const head = /^P4\s+(\d+)\s+(\d+)\s/.exec(pbm.toString('latin1', 0, 40))!;
    assert.deepEqual([Number(head[1]), Number(head[2])], [page.width, page.height]);
    assert.ok(
      Buffer.from(pbm.subarray(head[0].length)).equals(Buffer.from(page.rows)),
      `page ${i + 1}: the image poppler decodes from the PDF is the TIFF's, pixel for pixel`,
    );
    // Rendered at the fax's own resolution, the page is the fax's size, and every pixel is the TIFF's
    // pixel or (poppler rounds the y scale of an image) the one above or below it.
    const [xDpi, yDpi] = [page.tags.get(282)![0]!, page.tags.get(283)![0]!];
    const out = join(dir, `r${i}`);
    execFileSync('pdftoppm', [
      '-mono',
      '-rx',
      String(xDpi),
      '-ry',
      String(yDpi),
      '-f',
      `${i + 1}`,
      '-l',
      `${i + 1}`,
      file,
      out,
    ]);
    const png = readdirSync(dir).find((f) => f.startsWith(`r${i}-`))!;
    const r = readFileSync(join(dir, png));
    const rh = /^P4\s+(\d+)\s+(\d+)\s/.exec(r.toString('latin1', 0, 40))!;
    assert.deepEqual([Number(rh[1]), Number(rh[2])], [page.width, page.height], 'rendered at its size');
    const body = r.subarray(rh[0].length);
    const stride = page.width / 8;
    let exact = 0;
    for (let y = 0; y < page.height; y++) {
      let same = true;
      for (let b = 0; b < stride; b++) {
        const at = (yy: number) => page.rows[Math.min(page.height - 1, Math.max(0, yy)) * stride + b]!;
        const [up, here, down] = [at(y - 1), at(y), at(y + 1)];
        const got = body[y * stride + b]!;
        if (got !== here) same = false;
        assert.ok(
          (got & ~(up | here | down) & 0xff) === 0 && (up & here & down & ~got & 0xff) === 0,
          `page ${i + 1} row ${y}: a pixel rendered as none of the TIFF's pixels at or next to it`,
        );
      }
      if (same) exact++;
    }
    assert.ok(exact / page.height > 0.95, `page ${i + 1}: ${exact} of ${page.height} rows exact`);
  });
}

describe('received faxes against PostgreSQL, RabbitMQ and a webhook', { timeout: 300_000 }, () => {
  let t: TwoAccounts;
  let pool: pg.Pool;
  let hook: http.Server;
  const hooked: { headers: http.IncomingHttpHeaders; body: string }[] = [];
  const registry = new client.Registry();
  const metrics = createReceiveMetrics(registry);
  const log = createLogger('silent');
  let sink: PgReceivedFaxSink;

  before(async () => {
    hook = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        hooked.push({ headers: req.headers, body: Buffer.concat(chunks).toString() });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
    const port = (hook.address() as AddressInfo).port;
    t = await twoAccounts({ WEBHOOK_ALLOW: `127.0.0.1:${port}`, EVENTS_POLL_MS: '50' });
    pool = new pg.Pool({ connectionString: t.s.cfg.DATABASE_URL, max: 4 });
    sink = new PgReceivedFaxSink({ db: pool, log, metrics });
  });
  after(async () => {
    await pool?.end();
    await t?.close();
    hook?.closeAllConnections();
    await new Promise<void>((r) => hook?.close(() => r()));
  });

  const router = (lines = 2) =>
    resolveAllowList('127.0.0.0/8', '').then(
      (allow) =>
        new InboundRouter({
          allow,
          countryCode: '1',
          lines,
          findNumber: (n) => findReceivingNumber(pool, n),
          onRefused: (cause) => metrics.refused.inc({ cause }),
        }),
    );
  const refusedCount = async (cause: string) =>
    (await registry.getSingleMetric('faxline_inbound_calls_refused_total')!.get()).values.find(
      (v) => v.labels.cause === cause,
    )?.value ?? NaN;

  it('answers a number that receives with its station id; refuses as documented, counting each cause', async () => {
    const r = await router(1);
    const [n0, n1] = [t.a.numbers[0]!, t.a.numbers[1]!];
    await t.owner.query(`UPDATE numbers SET station_id = '555 0100' WHERE number = $1`, [n0]);
    await t.owner.query(`UPDATE numbers SET receive = false WHERE number = $1`, [n1]);
    const before = await Promise.all(
      ['source_not_allowed', 'unknown_number', 'receiving_off', 'over_line_limit'].map(refusedCount),
    );
    assert.deepEqual(before, [0, 0, 0, 0], 'every cause is exported from the start');

    const bad = await r.route({ requestUser: n0, toUser: n0, source: '192.0.2.1' });
    assert.deepEqual(bad.answer ? null : [bad.status, bad.cause], [403, 'source_not_allowed']);
    const unknown = await r.route({ requestUser: '+19990000000', toUser: null, source: '127.0.0.1' });
    assert.deepEqual(unknown.answer ? null : [unknown.status, unknown.cause], [404, 'unknown_number']);
    const junk = await r.route({ requestUser: 'fax', toUser: 'fax', source: '127.0.0.1' });
    assert.deepEqual(junk.answer ? null : junk.status, 404);
    const off = await r.route({ requestUser: n1, toUser: null, source: '127.0.0.1' });
    assert.deepEqual(off.answer ? null : [off.status, off.cause], [480, 'receiving_off']);

    // National form in the Request-URI (country code 1), the To user ignored since that one is a number.
    const yes = await r.route({
      requestUser: n0.slice(2),
      toUser: '+19990000000',
      fromUser: '15550001111',
      source: '127.0.0.1',
    });
    assert.ok(yes.answer);
    assert.deepEqual(
      [yes.accountId, yes.number, yes.stationId, yes.from],
      [t.a.account_id, n0, '555 0100', '+15550001111'],
    );
    // Request-URI user that is no number (a registration user name): the To user decides.
    const busy = await r.route({ requestUser: 'faxline', toUser: `sip:${n0}@x`, source: '127.0.0.1' });
    assert.deepEqual(busy.answer ? null : [busy.status, busy.cause], [486, 'over_line_limit']);
    yes.release();
    yes.release(); // idempotent: frees one line only
    assert.equal(r.linesInUse, 0);
    const again = await r.route({ requestUser: null, toUser: n0, source: '::ffff:127.0.0.1' });
    assert.ok(again.answer);
    again.release();

    const counted = await Promise.all(
      ['source_not_allowed', 'unknown_number', 'receiving_off', 'over_line_limit'].map(refusedCount),
    );
    assert.deepEqual(counted, [1, 2, 1, 1]);
    const stored = await t.owner.query('SELECT count(*)::int AS n FROM received_faxes');
    assert.equal(stored.rows[0].n, 0, 'routing stores nothing');
    await t.owner.query(`UPDATE numbers SET receive = true WHERE number = $1`, [n1]);
  });

  it('createReceiving wires the router and the sink from the configuration, with their metrics', async () => {
    const reg = new client.Registry();
    const lines: string[] = [];
    const wlog = createLogger('info', { write: (l: string) => lines.push(l) } as never);
    const none = await createReceiving({
      db: pool,
      log: wlog,
      registry: reg,
      trunk: '',
      cfg: { SIP_INBOUND_ALLOW: '', SIP_INBOUND_COUNTRY_CODE: '', INBOUND_LINES: 5 },
    });
    assert.ok(lines.some((l) => /every inbound call will be refused/.test(l)));
    const refused = await none.router.route({
      requestUser: t.a.numbers[0]!,
      toUser: null,
      source: '127.0.0.1',
    });
    assert.equal(refused.answer ? 0 : refused.status, 403);
    const byTrunk = await createReceiving({
      db: pool,
      log: wlog,
      registry: new client.Registry(),
      trunk: 'sip:trunk.test:5060',
      resolve: async () => ['127.0.0.5'],
      cfg: { SIP_INBOUND_ALLOW: '', SIP_INBOUND_COUNTRY_CODE: '1', INBOUND_LINES: 5 },
    });
    const yes = await byTrunk.router.route({
      requestUser: t.a.numbers[0]!.slice(2),
      toUser: null,
      source: '127.0.0.5',
    });
    assert.ok(yes.answer);
    yes.release();
    const text = await reg.metrics();
    for (const m of [
      'faxline_inbound_calls_answered_total',
      'faxline_pages_received_total',
      'faxline_receive_duration_seconds',
      'faxline_received_faxes_stored_total',
    ])
      assert.ok(text.includes(m), m);
    assert.match(text, /faxline_inbound_calls_refused_total\{cause="source_not_allowed"\} 1/);
  });

  it(
    'stores a genuine 3-page T.38 reception: TIFF as received, a PDF of the same pixels, listed, downloaded, announced to the webhook',
    needsAddon,
    async () => {
      const made = await t.api('POST', '/v1/webhooks', t.tokenA, {
        url: `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`,
        event_types: ['fax.receiving', 'fax.received', 'fax.receive_failed'],
      });
      assert.equal(made.http, 200, JSON.stringify(made.body));
      const secret = made.body.data.secret as string;

      const { tx, rx, result, dir } = await receive(3, { quality: 'hd' });
      assert.ok(result.ok, JSON.stringify(result));
      const to = t.a.numbers[2]!;
      const rec = await sink.begin({
        accountId: t.a.account_id,
        numberId: null,
        to,
        from: '+15550001111',
        stationId: to,
        callId: 'call-1@test',
      });
      // While receiving: listed as such, no image.
      const during = await t.api('GET', `/v1/received-faxes/${rec.id}`, t.tokenA);
      assert.equal(during.body.data.status, 'receiving');
      assertRefused(
        await t.api('GET', `/v1/received-faxes/${rec.id}/pdf`, t.tokenA),
        409,
        /still being received/,
      );

      const stored = await rec.complete(result, rx);
      assert.deepEqual(stored, { id: rec.id, status: 'received', pages: 3, stored: true });
      assert.deepEqual(await rec.complete(result, rx), stored, 'complete() twice stores once');

      const got = await t.api('GET', `/v1/received-faxes/${rec.id}`, t.tokenA);
      assert.equal(got.http, 200);
      assert.equal(got.body.message, 'Received fax found');
      const f = got.body.data;
      assert.deepEqual(
        [
          f.status,
          f.to,
          f.from,
          f.remote_csid,
          f.pages,
          f.resolution,
          f.y_dpi,
          f.encoding,
          f.transport,
          f.ecm,
          f.result_code,
          f.read,
        ],
        ['received', to, '+15550001111', '+15550001111', 3, 'hd', 391, 'T.6', 't38', true, 0, false],
      );
      assert.equal(f.bit_rate, 14400);
      assert.ok(f.received_at && f.duration_ms > 0);

      const tiff = await fetch(`${t.s.url}/v1/received-faxes/${rec.id}/tiff`, {
        headers: { authorization: `Bearer ${t.tokenA}` },
      });
      assert.equal(tiff.headers.get('content-type'), 'image/tiff');
      const tiffBytes = Buffer.from(await tiff.arrayBuffer());
      assert.ok(tiffBytes.equals(readFileSync(rx)), 'the TIFF download is the file as received');
      writeFileSync(join(dir, 'dl.tif'), tiffBytes);
      const cmp = sameImages(tx, join(dir, 'dl.tif'));
      assert.ok(cmp.same, cmp.output);
      const pdf = await fetch(`${t.s.url}/v1/received-faxes/${rec.id}/pdf`, {
        headers: { authorization: `Bearer ${t.tokenA}` },
      });
      assert.equal(pdf.headers.get('content-type'), 'application/pdf');
      assert.match(pdf.headers.get('content-disposition') ?? '', /attachment; filename="fax-.*\.pdf"/);
      checkPdf(Buffer.from(await pdf.arrayBuffer()), tiffBytes, dir);

      // The other account: every operation answers as for a missing id.
      for (const [m, p] of [
        ['GET', ''],
        ['GET', '/pdf'],
        ['GET', '/tiff'],
        ['DELETE', ''],
      ] as const)
        assertRefused(
          await t.api(m, `/v1/received-faxes/${rec.id}${p}`, t.tokenB),
          404,
          'Received fax not found',
        );
      assertRefused(
        await t.api('PATCH', `/v1/received-faxes/${rec.id}`, t.tokenB, { read: true }),
        404,
        'Received fax not found',
      );
      assertRefused(
        await t.api('GET', '/v1/received-faxes/not-an-id', t.tokenA),
        404,
        'Received fax not found',
      );
      assert.deepEqual((await t.api('GET', '/v1/received-faxes', t.tokenB)).body.data, []);

      // The webhook got fax.receiving then fax.received, signed (Standard Webhooks).
      const events = await eventually(async () => {
        const mine = hooked
          .map((h) => ({ h, e: JSON.parse(h.body) }))
          .filter((x) => x.e.received_fax_id === rec.id);
        return mine.length >= 2 ? mine : null;
      }, 20_000);
      assert.deepEqual(
        events.map((x) => x.e.type),
        ['fax.receiving', 'fax.received'],
      );
      const wh = new Webhook(secret);
      for (const { h, e } of events) {
        receivedFaxEvent.parse(e);
        const verified = wh.verify(h.body, {
          'webhook-id': String(h.headers['webhook-id']),
          'webhook-timestamp': String(h.headers['webhook-timestamp']),
          'webhook-signature': String(h.headers['webhook-signature']),
        }) as { id: string };
        assert.equal(verified.id, e.id);
        assert.equal(e.account_id, t.a.account_id);
      }
      const done = events[1]!.e;
      assert.deepEqual([done.details.status, done.details.pages, done.details.to], ['received', 3, to]);
      assert.ok(events[0]!.e.sequence < done.sequence);
      const left = await t.owner.query('SELECT count(*)::int AS n FROM received_fax_outbox');
      assert.equal(left.rows[0].n, 0, 'the relay published and removed every outbox row');

      // Mark read, filters.
      const marked = await t.api('PATCH', `/v1/received-faxes/${rec.id}`, t.tokenA, { read: true });
      assert.deepEqual(
        [marked.http, marked.body.message, marked.body.data.read],
        [200, 'Received fax marked as read', true],
      );
      assertRefused(
        await t.api('PATCH', `/v1/received-faxes/${rec.id}`, t.tokenA, { read: 'yes' }),
        422,
        /^read: /,
      );
      const ids = async (q: string) =>
        ((await t.api('GET', `/v1/received-faxes${q}`, t.tokenA)).body.data as { id: string }[]).map(
          (x) => x.id,
        );
      assert.deepEqual(await ids('?read=true'), [rec.id]);
      assert.deepEqual(await ids('?read=false'), []);
      assert.deepEqual(await ids(`?number=${encodeURIComponent(to)}`), [rec.id]);
      assert.deepEqual(await ids(`?number=${encodeURIComponent(t.a.numbers[3]!)}`), []);
      assert.deepEqual(await ids(`?since=${new Date(Date.now() + 60_000).toISOString()}`), []);
      assert.deepEqual(await ids(`?since=2020-01-01&until=${new Date(Date.now() + 60_000).toISOString()}`), [
        rec.id,
      ]);
      assertRefused(await t.api('GET', '/v1/received-faxes?number=555', t.tokenA), 422, /^number: /);
      assertRefused(await t.api('GET', '/v1/received-faxes?since=yesterday', t.tokenA), 422, /^since: /);
      assertRefused(await t.api('GET', '/v1/received-faxes?read=maybe', t.tokenA), 422, /^read: /);
      assert.match(await registry.metrics(), /faxline_received_faxes_stored_total\{status="received"\} 1/);
      assert.match(await registry.metrics(), /faxline_pages_received_total 3/);
    },
  );

  it(
    'keeps the pages of a partial reception (sender gone after page 2 of 4) and says so',
    needsAddon,
    async () => {
      const { rx, result } = await receive(4, { dropAfterPages: 2, t38: false, quality: 'low' });
      assert.equal(result.ok, false);
      const to = t.a.numbers[4]!;
      const rec = await sink.begin({
        accountId: t.a.account_id,
        numberId: null,
        to,
        from: null,
        stationId: to,
        callId: null,
      });
      const stored = await rec.complete(result, rx);
      assert.equal(stored.status, 'partial');
      assert.equal(stored.pages, 2);
      assert.equal(readFaxTiff(readFileSync(rx)).length, 2);
      const f = (await t.api('GET', `/v1/received-faxes/${rec.id}`, t.tokenA)).body.data;
      assert.deepEqual([f.status, f.pages, f.transport, f.resolution], ['partial', 2, 'audio', 'low']);
      assert.match(f.result_text, /2 pages kept/);
      assert.ok(f.pdf_bytes > 0 && f.tiff_bytes > 0);
      const ev = await eventually(async () => {
        const e = hooked
          .map((h) => JSON.parse(h.body))
          .find((x) => x.received_fax_id === rec.id && x.type !== 'fax.receiving');
        return e ?? null;
      }, 20_000);
      assert.deepEqual([ev.type, ev.details.status, ev.details.pages], ['fax.receive_failed', 'partial', 2]);
    },
  );

  it('fails a reception whose process died (never shown as received), and it is announced', async () => {
    const to = t.a.numbers[5]!;
    const rec = await sink.begin({
      accountId: t.a.account_id,
      numberId: null,
      to,
      from: null,
      stationId: to,
      callId: null,
    });
    assert.equal(
      await failAbandoned(pool, new Date(Date.now() - 60_000)),
      0,
      'a young reception is left alone',
    );
    assert.equal(await failAbandoned(pool, new Date(Date.now() + 1000)), 1);
    const f = (await t.api('GET', `/v1/received-faxes/${rec.id}`, t.tokenA)).body.data;
    assert.deepEqual([f.status, f.pages, f.pdf_bytes], ['failed', 0, null]);
    assertRefused(await t.api('GET', `/v1/received-faxes/${rec.id}/pdf`, t.tokenA), 404, /no page arrived/);
    const late = await rec.complete(
      {
        ok: true,
        code: 0,
        text: 'OK',
        pages: 0,
        bitRate: 0,
        ecm: false,
        remoteIdent: '',
        transport: 't38',
        durationMs: 1,
      },
      null,
    );
    assert.equal(late.stored, false, 'a late completion does not overwrite the sweep');
    const ev = await eventually(async () => {
      const e = hooked
        .map((h) => JSON.parse(h.body))
        .find((x) => x.received_fax_id === rec.id && x.type === 'fax.receive_failed');
      return e ?? null;
    }, 20_000);
    assert.deepEqual([ev.details.status, ev.details.pages], ['failed', 0]);
    assert.match(ev.details.result_text, /receiving process ended/);
  });

  it(
    'kill -9 of the receiving process mid-reception and right after storing: no half-stored fax shows as complete, every stored one is announced',
    needsAddon,
    async () => {
      const to = t.a.numbers[6]!;
      const env = { DATABASE_URL: t.s.cfg.DATABASE_URL, ACCOUNT_ID: t.a.account_id, NUMBER: to };
      const storedIds = new Set<string>();
      const idOf = (line: string) => (JSON.parse(line) as { receivedFaxId: string }).receivedFaxId;
      // Round 1: killed the moment a fax is stored; round 2: the moment a call is answered (mid-reception);
      // round 3: at a random moment.
      for (const round of [1, 2, 3]) {
        const child = startProcess('test/support/receive-child.ts', env);
        try {
          if (round === 1) storedIds.add(idOf(await child.waitFor(/received fax stored/, 60_000)));
          else if (round === 2) {
            // The second call's answer: killed as soon as its log line is read, during its reception.
            await child.waitFor(/"callId":"kill-\d+-1".*inbound fax call answered/, 60_000);
          } else {
            await child.waitFor(/received fax stored/, 60_000);
            await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 200)));
          }
          child.child.kill('SIGKILL');
          assert.equal((await child.exited).signal, 'SIGKILL');
          for (const l of child.lines) if (/received fax stored/.test(l)) storedIds.add(idOf(l));
        } finally {
          child.child.kill('SIGKILL');
        }
      }
      const rows = await t.owner.query<{
        id: string;
        status: string;
        pages: number;
        tiff: Buffer | null;
        pdf: Buffer | null;
      }>(
        `SELECT id, status, pages, tiff, pdf FROM received_faxes WHERE call_id LIKE 'kill-%' ORDER BY created_at`,
      );
      assert.ok(rows.rows.length >= 3, `${rows.rows.length} receptions`);
      const receiving = rows.rows.filter((r) => r.status === 'receiving');
      assert.ok(receiving.length >= 1, 'the kill after answering left a reception in progress');
      for (const r of rows.rows) {
        if (r.status === 'receiving') {
          assert.ok(r.tiff === null && r.pdf === null && r.pages === 0, `${r.id}: receiving holds nothing`);
          assertRefused(
            await t.api('GET', `/v1/received-faxes/${r.id}/pdf`, t.tokenA),
            409,
            /still being received/,
          );
        } else {
          assert.equal(r.status, 'received', r.id);
          assert.ok(r.tiff && r.pdf, `${r.id}: a stored fax has both images`);
          assert.equal(readFaxTiff(r.tiff).length, 3);
          assert.equal(r.pages, 3);
        }
      }
      for (const id of storedIds)
        assert.equal(rows.rows.find((r) => r.id === id)?.status, 'received', `logged as stored: ${id}`);
      // The sweep ends the receptions whose process died.
      assert.equal(await failAbandoned(pool, new Date(Date.now() + 1000)), receiving.length);
      // Ledger: every reception has exactly one kind of final event, matching what is stored.
      await eventually(async () => {
        const finals = new Map<string, Set<string>>();
        for (const h of hooked) {
          const e = JSON.parse(h.body);
          if (e.type === 'fax.receiving') continue;
          finals.set(e.received_fax_id, (finals.get(e.received_fax_id) ?? new Set()).add(e.type));
        }
        return rows.rows.every((r) => finals.has(r.id)) ? finals : null;
      }, 30_000).then((finals) => {
        for (const r of rows.rows)
          assert.deepEqual(
            [...finals.get(r.id)!],
            [r.status === 'received' ? 'fax.received' : 'fax.receive_failed'],
            r.id,
          );
      });
    },
  );

  it("the API role reads its account's received faxes only, never inserts one nor reads their outbox", async () => {
    const api = new pg.Client({ connectionString: apiDatabaseUrl(t.s.cfg.DATABASE_URL, '') });
    await api.connect();
    try {
      const count = async (account: string | null) => {
        await api.query('BEGIN');
        if (account) await api.query(`SELECT set_config('faxline.account_id', $1, true)`, [account]);
        const r = await api.query('SELECT count(*)::int AS n FROM received_faxes');
        await api.query('COMMIT');
        return r.rows[0].n as number;
      };
      assert.equal(await count(null), 0, 'no account set: nothing');
      assert.ok((await count(t.a.account_id)) > 0);
      assert.equal(await count(t.b.account_id), 0);
      await api.query('BEGIN');
      await api.query(`SELECT set_config('faxline.account_id', $1, true)`, [t.a.account_id]);
      await assert.rejects(
        api.query(`INSERT INTO received_faxes (account_id, to_number) VALUES ($1, '+15550000000')`, [
          t.a.account_id,
        ]),
        /permission denied/,
      );
      await api.query('ROLLBACK');
      await assert.rejects(api.query('SELECT * FROM received_fax_outbox'), /permission denied/);
      await assert.rejects(api.query(`UPDATE received_faxes SET pages = 99`), /permission denied/);
    } finally {
      await api.end();
    }
  });

  it('retention removes the images and keeps the record; delete hides it', async () => {
    const list = (await t.api('GET', '/v1/received-faxes?status=received', t.tokenA)).body.data as {
      id: string;
    }[];
    assert.ok(list.length >= 1);
    const id = list[0]!.id;
    const cli = (args: string[]) => {
      const r = spawnSync(process.execPath, ['src/admin/cli.ts', ...args], {
        env: { ...process.env, DATABASE_URL: t.s.cfg.DATABASE_URL, LOG_LEVEL: 'silent' },
        encoding: 'utf8',
        timeout: 30_000,
      });
      return { status: r.status, out: r.stdout.trim() ? JSON.parse(r.stdout) : null, err: r.stderr };
    };
    const set = cli(['set-received-retention', '--account', t.a.account_id, '--days', '0']);
    assert.equal(set.status, 0, set.err);
    assert.deepEqual(set.out, { account: t.a.account_id, received_retention_days: 0 });
    assert.equal(cli(['set-received-retention', '--account', t.a.account_id, '--days', 'soon']).status, 2);
    assert.equal(
      await purgeReceivedImages(pool, new Date(Date.now() + 400 * 86_400_000), 30),
      0,
      '0 keeps forever',
    );
    assert.equal(cli(['set-received-retention', '--account', t.a.account_id, '--days', 'default']).status, 0);
    assert.equal(await purgeReceivedImages(pool, new Date(), 30), 0, 'not old enough');
    assert.ok((await purgeReceivedImages(pool, new Date(Date.now() + 31 * 86_400_000), 30)) >= 2);
    const f = (await t.api('GET', `/v1/received-faxes/${id}`, t.tokenA)).body.data;
    assert.deepEqual(
      [f.status, f.pages, f.tiff_bytes, f.pdf_bytes, f.images_deleted_reason],
      ['received', 3, null, null, 'retention'],
    );
    assertRefused(
      await t.api('GET', `/v1/received-faxes/${id}/tiff`, t.tokenA),
      410,
      'Received fax image was removed',
    );

    const del = await t.api('DELETE', `/v1/received-faxes/${id}`, t.tokenA);
    assert.deepEqual(
      [del.http, del.body.status, del.body.message],
      [200, 1, 'Received fax has been deleted successfully.'],
    );
    assertRefused(await t.api('GET', `/v1/received-faxes/${id}`, t.tokenA), 404, 'Received fax not found');
    assertRefused(await t.api('DELETE', `/v1/received-faxes/${id}`, t.tokenA), 404, 'Received fax not found');
    const row = await t.owner.query('SELECT tiff, pdf, deleted_at FROM received_faxes WHERE id = $1', [id]);
    assert.ok(row.rows[0].deleted_at && row.rows[0].tiff === null && row.rows[0].pdf === null);
  });

  it(
    'answering hooks: an INVITE routed, received by the fax engine into the file they name, stored, the line freed',
    needsAddon,
    async () => {
      const hooks = await answeringHooks(
        await createReceiving({
          db: pool,
          log,
          registry: new client.Registry(),
          trunk: '',
          cfg: { SIP_INBOUND_ALLOW: '127.0.0.0/8', SIP_INBOUND_COUNTRY_CODE: '', INBOUND_LINES: 1 },
        }),
      );
      const to = t.a.numbers[7]!;
      const offered = {
        callId: 'hooks-1@test',
        requestUri: `sip:${to}@127.0.0.1:5060;user=phone`,
        toUri: `<sip:${to}@127.0.0.1>`,
        fromUri: 'sip:%2B15550001111@trunk',
        source: '127.0.0.1',
      };
      const refused = await hooks.decide({ ...offered, callId: 'x', source: '198.51.100.1' });
      assert.deepEqual(refused, { answer: false, status: 403, reason: 'Forbidden' });
      const d = await hooks.decide(offered);
      assert.ok(d.answer);
      assert.equal(d.ident, to);
      const busy = await hooks.decide({ ...offered, callId: 'hooks-2@test' });
      assert.deepEqual(busy.answer ? null : busy.status, 486, 'INBOUND_LINES 1: the second call is busy');
      const startedAt = Date.now();
      const tx = makeFaxTiff(1, 'standard');
      const r = await addon!.run({
        txFile: tx,
        rxFile: d.file,
        t38: true,
        ecm: true,
        txIdent: '+15550001111',
        rxIdent: d.ident,
      });
      const stored = await hooks.finished({
        callId: offered.callId,
        startedAt,
        reason: '',
        result: {
          ok: r.receiverCode === 0,
          code: r.receiverCode,
          text: r.receiverText,
          pages: r.pagesReceived,
          bitRate: r.bitRate,
          ecm: r.ecm,
          remoteIdent: '+15550001111',
          xResolution: r.xResolution,
          yResolution: r.yResolution,
          encoding: r.encoding,
          transport: 't38',
          durationMs: r.lineTimeMs,
        },
      });
      assert.deepEqual([stored?.status, stored?.pages], ['received', 1]);
      assert.equal(hooks.open, 0);
      assert.equal(existsSync(d.file), false, 'the temporary TIFF is removed once stored');
      const f = (await t.api('GET', `/v1/received-faxes/${stored!.id}`, t.tokenA)).body.data;
      assert.deepEqual([f.to, f.from, f.call_id, f.status], [to, '+15550001111', 'hooks-1@test', 'received']);
      // The line is free again; a call the engine never got media for ends as failed.
      const again = await hooks.decide({ ...offered, callId: 'hooks-3@test' });
      assert.ok(again.answer);
      const failed = await hooks.finished({
        callId: 'hooks-3@test',
        startedAt: Date.now(),
        reason: 'no media port',
        result: undefined,
      });
      assert.equal(failed?.status, 'failed');
      assert.equal(
        await hooks.finished({ callId: 'unknown', startedAt: 0, reason: '', result: undefined }),
        null,
      );
    },
  );
});
