// The rendered fax through a real fax engine: a PDF sent through the service with the loopback line
// (SpanDSP, T.30 over T.38) arrives at the virtual receiver with exactly the pixels we rendered.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { getRender } from '../src/documents/render/store.ts';
import { LoopbackLine } from '../src/transmission/loopback.ts';
import { loadFaxloop, unavailableMessage } from '../src/transmission/spandsp/addon.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { decodeWithLibtiff } from './support/render-tiff.ts';
import { skipUnless } from './support/skips.ts';

const addon = loadFaxloop();
// Every exchange needs the addon: each is skipped, and counted, where it is not built.
const needsAddon = skipUnless(!addon && unavailableMessage, 'spandsp');
const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));

describe('rendered faxes on a real fax engine (loopback line)', () => {
  it('has the SpanDSP line here, or says clearly that the addon is missing', () => {
    const make = () => new LoopbackLine({ transport: 't38', ecm: true, speedup: 0 });
    if (addon) {
      assert.ok(make());
      return;
    }
    assert.notEqual(process.env.FAXLINE_REQUIRE_SPANDSP, '1', 'FAXLINE_REQUIRE_SPANDSP=1 but no addon');
    assert.throws(make, { message: unavailableMessage });
  });
});

describe('rendered faxes on a real fax engine (loopback line) exchanges', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  const received = mkdtempSync(join(tmpdir(), 'faxline-render-rx-'));
  before(async () => {
    if (!addon) return; // every test below is skipped, with the reason
    s = await startService({
      backend: new LoopbackLine({ transport: 't38', ecm: true, speedup: 0, keepReceivedIn: received }),
    });
  });
  after(async () => {
    await s?.dropAll();
    if (!process.env.KEEP_RX) rmSync(received, { recursive: true, force: true });
  });

  it('delivers cover and pages, received pixel-identical to the stored render', needsAddon, async () => {
    const seed = await seedAccount(s, { cover: true });
    const token = await tokenFor(s.url, seed.api_key);
    const sent = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_quality: 'low',
        recipient_name: 'Dr. Ada Moreau',
        subject: 'Through a real T.30 engine',
        fax_data: [
          { file_name: 'letter-text-2p.pdf', file_data: fixture('letter-text-2p.pdf').toString('base64') },
        ],
      },
    });
    assert.equal(sent.http, 200, JSON.stringify(sent.body));
    const jobId = sent.body.data.job_id as string;
    const job = await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${jobId}`, { token });
      return ['delivered', 'failed'].includes(r.body.data?.state) ? r.body.data : null;
    }, 90_000);
    assert.equal(job.state, 'delivered', JSON.stringify(job.failure));
    assert.equal(job.pages_sent, 3, 'cover and two pages');

    const db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    let sentTiff: Buffer;
    try {
      sentTiff = (await getRender(db, jobId))!.tiff;
    } finally {
      await db.end();
    }
    const ours = decodeWithLibtiff(sentTiff);
    const theirs = decodeWithLibtiff(readFileSync(join(received, `${jobId}-1.tif`)));
    assert.equal(theirs.length, 3);
    ours.forEach((p, i) => {
      const r = theirs[i]!;
      assert.deepEqual([r.width, r.height], [p.width, p.height], `page ${i + 1} size`);
      assert.ok(Buffer.from(r.rows).equals(Buffer.from(p.rows)), `page ${i + 1}: received pixels differ`);
    });
  });

  it(
    "each virtual receiver ends the job in its documented state, with the engine's result code",
    needsAddon,
    async () => {
      const seed = await seedAccount(s);
      const token = await tokenFor(s.url, seed.api_key);
      const pdf = fixture('letter-text-2p.pdf').toString('base64');
      const send = async (faxNumber: string, quality = 'standard') => {
        const r = await call(s.url, 'POST', '/v1/faxes/send', {
          token,
          body: {
            fax_number: faxNumber,
            fax_quality: quality,
            fax_data: [{ file_name: 'a.pdf', file_data: pdf }],
          },
        });
        assert.equal(r.http, 200, JSON.stringify(r.body));
        return r.body.data.job_id as string;
      };
      const settled = (id: string) =>
        eventually(async () => {
          const r = await call(s.url, 'GET', `/v1/faxes/${id}`, { token });
          return ['delivered', 'failed', 'retry_waiting', 'unknown'].includes(r.body.data?.state)
            ? r.body.data
            : null;
        }, 90_000);
      const [refuses, drops, slow, voice] = await Promise.all([
        send('+19995550101'), // fine resolution refused
        send('+19995550102'), // line drops after page 1
        send('+19995550103', 'low'), // V.27ter only
        send('+19995550104'), // voice line
      ]);

      const r1 = await settled(refuses);
      assert.equal(r1.state, 'failed', 'a receiver that cannot take the resolution is not redialled');
      assert.equal(r1.attempt_history[0].failure.code, `T30_${addon!.constants.ERR_NORESSUPPORT}`);
      assert.equal(r1.attempt_history[0].failure.retryable, false);

      const r2 = await settled(drops);
      assert.equal(r2.state, 'retry_waiting', 'a dropped call is retried later');
      assert.equal(r2.attempt_history[0].failure.type, 'call_dropped');
      assert.match(r2.attempt_history[0].failure.code, /^T30_\d+$/);
      assert.ok(r2.next_attempt_at);

      const r3 = await settled(slow);
      assert.equal(r3.state, 'delivered', JSON.stringify(r3.failure));
      assert.equal(r3.attempt_history[0].bit_rate, 4800);

      const r4 = await settled(voice);
      assert.equal(r4.state, 'retry_waiting');
      assert.equal(r4.attempt_history[0].failure.type, 'no_fax_tone');
      assert.match(r4.attempt_history[0].failure.code, /^T30_\d+$/);
    },
  );
});
