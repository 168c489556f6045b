// Header line and proof of transmission (issue 21, items 2 and 3) through the real service:
// PostgreSQL, RabbitMQ, the render processes and the loopback line (SpanDSP's T.30 over T.38).
// A Fax Default's header line is refused when its template is bad, shown by the preview and drawn on
// the fax that goes on the line; a finished fax has its transmission report and its image (the TIFF
// byte for byte what the line was handed, and a PDF wrapping the same T.6 data); another account's
// ids are missing ones; a fax not finished is refused; the image goes with the documents.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inflateSync } from 'node:zlib';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { getRender } from '../src/documents/render/store.ts';
import { headerRows } from '../src/documents/render/raster.ts';
import { readTiffPages } from '../src/documents/render/tiff-read.ts';
import { writeTiffClassF } from '../src/documents/render/tiff.ts';
import { DOWNLOADS_PER_ACCOUNT } from '../src/api/routes/proof.ts';
import { PgDocumentStore } from '../src/documents/store.ts';
import { retentionPass } from '../src/accounts/retention.ts';
import { LoopbackLine } from '../src/transmission/loopback.ts';
import { loadFaxloop, unavailableMessage } from '../src/transmission/spandsp/addon.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, startService } from './support/harness.ts';
import { decodeWithLibtiff } from './support/render-tiff.ts';
import { skipUnless } from './support/skips.ts';

const addon = loadFaxloop();
const needsAddon = skipUnless(!addon && unavailableMessage, 'spandsp');
const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));

// A full garbage collection on demand, for measuring what this process holds (not what it has not
// yet collected, which depends on how busy the machine is).
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
/** Bytes this process holds after a full collection: the JS heap and the buffers outside it. */
function liveBytes(): number {
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
}

/** Runs a poppler or libtiff tool; returns its stdout, or throws with its stderr. */
function tool(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { encoding: 'latin1', timeout: 60_000 });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.status}: ${r.stderr}`);
  return r.stdout;
}

/** Rows of a 1-bit PNG (as the preview answers it), and the black pixels of rows [from, to). */
function pngInk(png: Buffer, from: number, to: number): number {
  let pos = 8;
  let width = 0;
  const idat: Buffer[] = [];
  while (pos < png.length) {
    const len = png.readUInt32BE(pos);
    const type = png.toString('latin1', pos + 4, pos + 8);
    if (type === 'IHDR') width = png.readUInt32BE(pos + 8);
    if (type === 'IDAT') idat.push(png.subarray(pos + 8, pos + 8 + len));
    pos += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const rowBytes = Math.ceil(width / 8) + 1;
  let black = 0;
  for (let y = from; y < to; y++)
    for (let i = 1; i < rowBytes; i++)
      black += 8 - raw[y * rowBytes + i]!.toString(2).replace(/0/g, '').length;
  return black;
}

async function get(
  base: string,
  path: string,
  token: string,
): Promise<{ http: number; type: string; bytes: Buffer; json: any }> {
  const res = await fetch(base + path, { headers: { authorization: `Bearer ${token}` } });
  const bytes = Buffer.from(await res.arrayBuffer());
  const type = res.headers.get('content-type') ?? '';
  return {
    http: res.status,
    type,
    bytes,
    json: type.startsWith('application/json') ? JSON.parse(bytes.toString()) : null,
  };
}

describe('header line and proof of transmission (service, loopback line)', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let db: pg.Client;
  let token: string;
  let otherToken: string;
  let seed: Awaited<ReturnType<typeof seedAccount>>;
  let headerTemplateId: string;
  let delivered: string;
  let failedJob: string;
  const work = mkdtempSync(join(tmpdir(), 'faxline-proof-'));
  const sentDir = join(work, 'sent');
  const file = (name: string, bytes: Uint8Array) => {
    const p = join(work, name);
    writeFileSync(p, bytes);
    return p;
  };
  const TEMPLATE = 'FROM {sender_name} {sender_number} {date} TO {to_name} {to_number} PAGE {page}/{pages}';

  before(async () => {
    if (!addon) return;
    spawnSync('mkdir', ['-p', sentDir]);
    s = await startService({
      backend: new LoopbackLine({ transport: 't38', ecm: true, speedup: 0, keepSentIn: sentDir }),
    });
    seed = await seedAccount(s);
    token = await tokenFor(s.url, seed.api_key);
    const other = await seedAccount(s);
    otherToken = await tokenFor(s.url, other.api_key);
    db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
  });
  after(async () => {
    await db?.end();
    await s?.dropAll();
    if (!process.env.KEEP_PROOF) rmSync(work, { recursive: true, force: true });
    else console.log(work);
  });

  const send = async (body: Record<string, unknown>) => {
    const r = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [
          { file_name: 'letter-text-2p.pdf', file_data: fixture('letter-text-2p.pdf').toString('base64') },
        ],
        ...body,
      },
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    return r.body.data.job_id as string;
  };
  const finished = (jobId: string) =>
    eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${jobId}`, { token });
      return ['delivered', 'failed'].includes(r.body.data?.state) ? r.body.data : null;
    }, 90_000);

  it('refuses bad header templates, naming the placeholder, and keeps a good one', needsAddon, async () => {
    const bad = await call(s.url, 'POST', '/v1/fax-defaults', {
      token,
      body: { name: 'bad', fax_as: seed.numbers[0], header_line: 'From {sender_nam} page {page}' },
    });
    assert.equal(bad.http, 422);
    assert.equal(bad.body.status, 0);
    assert.match(bad.body.message, /^header_line: unknown placeholder \{sender_nam\}; the placeholders are /);
    const open = await call(s.url, 'PATCH', `/v1/fax-defaults/${seed.template_id}`, {
      token,
      body: { header_line: 'page {page of {pages}' },
    });
    assert.equal(open.http, 422);
    assert.match(open.body.message, /^header_line: has a \{ at position 6 without its \}/);
    const good = await call(s.url, 'POST', '/v1/fax-defaults', {
      token,
      body: {
        name: 'With header',
        fax_as: seed.numbers[0],
        cover_page: false,
        sender_name: 'Header Clinic',
        header_line: TEMPLATE,
      },
    });
    assert.equal(good.http, 200, JSON.stringify(good.body));
    assert.equal(good.body.data.header_line, TEMPLATE);
    headerTemplateId = good.body.data.id;
  });

  it('shows the header line in the preview, on top of the page, and not without it', needsAddon, async () => {
    const preview = async () => {
      const r = await call(s.url, 'POST', '/v1/faxes/preview?page=2', {
        token,
        body: {
          fax_number: '+15551234567',
          template_id: headerTemplateId,
          recipient_name: 'Dr. Ada Moreau',
          fax_quality: 'low',
          fax_data: [{ file_name: 'l.pdf', file_data: fixture('letter-text-2p.pdf').toString('base64') }],
        },
      });
      assert.equal(r.http, 200, JSON.stringify(r.body));
      return r.body.data;
    };
    const withHeader = await preview();
    const today = new Date().toISOString().slice(0, 10); // the account's time zone is UTC
    assert.equal(
      withHeader.page.header_line,
      `FROM Header Clinic ${seed.numbers[0]} ${today} TO Dr. Ada Moreau +15551234567 PAGE 2/2`,
    );
    // The PNG's rows are square pixels: the band is 0.25 in x 204 = 51 rows.
    const png = Buffer.from(withHeader.page.png_base64, 'base64');
    assert.ok(pngInk(png, 0, 51) > 500, `header ink ${pngInk(png, 0, 51)}`);
    const cleared = await call(s.url, 'PATCH', `/v1/fax-defaults/${headerTemplateId}`, {
      token,
      body: { header_line: null },
    });
    assert.equal(cleared.http, 200);
    assert.equal(cleared.body.data.header_line, null);
    const without = await preview();
    assert.equal(without.page.header_line, null);
    assert.equal(pngInk(Buffer.from(without.page.png_base64, 'base64'), 0, 51), 0, 'no header: a white top');
    const back = await call(s.url, 'PATCH', `/v1/fax-defaults/${headerTemplateId}`, {
      token,
      body: { header_line: TEMPLATE },
    });
    assert.equal(back.http, 200);
  });

  it('delivers with the header line; report and image of the delivered fax', needsAddon, async () => {
    delivered = await send({
      template_id: headerTemplateId,
      fax_quality: 'low',
      recipient_name: 'Dr. Ada Moreau',
    });
    const job = await finished(delivered);
    assert.equal(job.state, 'delivered', JSON.stringify(job.failure));
    // The engine's report is kept per attempt (and shown by GET /v1/faxes/{job_id} too).
    assert.equal(job.attempt_history[0].engine.ecm, true);
    assert.equal(job.attempt_history[0].engine.t30_text, 'OK');

    // The TIFF: byte for byte the stored render and what the line was handed (tiffcmp agrees).
    const tiff = await get(s.url, `/v1/faxes/${delivered}/image?format=tiff`, token);
    assert.equal(tiff.http, 200);
    assert.equal(tiff.type, 'image/tiff');
    const stored = (await getRender(db, delivered))!.tiff;
    assert.ok(tiff.bytes.equals(stored));
    const sent = readdirSync(sentDir).filter((f) => f.startsWith(delivered));
    assert.deepEqual(sent, [`${delivered}-1-sent.tif`]);
    tool('tiffcmp', [file('api.tif', tiff.bytes), join(sentDir, sent[0]!)]);
    assert.ok(tiff.bytes.equals(readFileSync(join(sentDir, sent[0]!))));
    // What went on the line has the header line on both pages.
    const pages = decodeWithLibtiff(tiff.bytes);
    assert.equal(pages.length, 2);
    for (const p of pages) {
      const band = p.rows.subarray(0, headerRows('low') * 216);
      assert.ok(
        band.some((b) => b !== 0),
        'the header band has ink',
      );
    }

    // The PDF: the same T.6 data, unchanged (pdfimages -ccitt gives the strips back), and it renders.
    const pdf = await get(s.url, `/v1/faxes/${delivered}/image?format=pdf`, token);
    assert.equal(pdf.http, 200);
    assert.equal(pdf.type, 'application/pdf');
    const pdfPath = file('image.pdf', pdf.bytes);
    const list = tool('pdfimages', ['-list', pdfPath]);
    assert.equal((list.match(/ ccitt /g) ?? []).length, 2, list);
    tool('pdfimages', ['-ccitt', pdfPath, join(work, 'img')]);
    const strips = await readTiffPages(stored);
    for (const [i, st] of strips.entries()) {
      const extracted = readFileSync(join(work, `img-${String(i).padStart(3, '0')}.ccitt`));
      assert.ok(
        extracted.equals(Buffer.from(st.data)),
        `page ${i + 1}: the PDF holds the TIFF's T.6 data as is`,
      );
    }
    tool('pdftoppm', ['-r', '50', '-gray', pdfPath, join(work, 'img-page')]);
    const rendered = readdirSync(work).filter((f) => f.startsWith('img-page'));
    assert.equal(rendered.length, 2);
    const pgm = readFileSync(join(work, rendered[0]!));
    assert.ok(pgm.subarray(-1000).some((v) => v < 128) || pgm.some((v, k) => k > 20 && v < 128), 'ink');

    // The report: result, pages, CSID, bit rate, ECM, attempts, and the first page reduced.
    const rep = await get(s.url, `/v1/faxes/${delivered}/report`, token);
    assert.equal(rep.http, 200);
    assert.equal(rep.type, 'application/pdf');
    const repPath = file('report.pdf', rep.bytes);
    const txt = tool('pdftotext', ['-layout', repPath, '-']);
    assert.match(txt, /Result: DELIVERED/);
    assert.match(txt, /Pages sent\s+2 of 2/);
    assert.match(txt, /Remote CSID\s+\+15551234567/, 'the loopback receiver answers with the number called');
    assert.match(txt, /Bit rate\s+14400 bit\/s/);
    assert.match(txt, /ECM\s+on/);
    assert.match(txt, /Line time\s+\d+\.\d s in 1 attempt/);
    assert.match(txt, /t30_text=OK/);
    const repImages = tool('pdfimages', ['-list', repPath]);
    assert.equal((repImages.match(/ ccitt /g) ?? []).length, 1, 'the first page, as transmitted');
    tool('pdftoppm', ['-r', '40', '-gray', '-singlefile', repPath, join(work, 'report')]);
  });

  it('a failed fax has a report too; a fax not finished is refused with its state', needsAddon, async () => {
    // This receiver takes standard resolution only: an hd fax fails for good (not retried).
    const failed = await send({
      template_id: headerTemplateId,
      fax_quality: 'hd',
      fax_number: '+19995550101',
    });
    failedJob = failed;
    const job = await finished(failed);
    assert.equal(job.state, 'failed');
    const rep = await get(s.url, `/v1/faxes/${failed}/report`, token);
    assert.equal(rep.http, 200);
    const txt = tool('pdftotext', ['-layout', file('failed.pdf', rep.bytes), '-']);
    assert.match(txt, /Result: FAILED: protocol_error/);
    assert.match(txt, /Reason\s+T\.30: /);
    assert.match(txt, /Pages sent\s+0 of 2/);
    assert.match(txt, /failed: protocol_error/);
    const img = await get(s.url, `/v1/faxes/${failed}/image`, token);
    assert.equal(img.http, 200, 'the image that was offered to the line');
    assert.equal(img.type, 'image/tiff');

    const later = await send({ scheduled_date: new Date(Date.now() + 86_400_000).toISOString() });
    for (const path of [`/v1/faxes/${later}/report`, `/v1/faxes/${later}/image?format=pdf`]) {
      const r = await get(s.url, path, token);
      assert.equal(r.http, 409, path);
      assert.equal(r.json.status, 0);
      assert.equal(
        r.json.message,
        'Fax not finished: its transmission report and image are available once it is delivered or has failed (current state: scheduled)',
      );
      assert.deepEqual(r.json.data, { job_id: later, state: 'scheduled' });
    }
    const bad = await get(s.url, `/v1/faxes/${delivered}/image?format=png`, token);
    assert.equal(bad.http, 422);
    assert.equal(bad.json.message, 'format: must be tiff or pdf');
  });

  it("answers another account's fax exactly like a missing one", needsAddon, async () => {
    const answers = [];
    for (const [id, tk] of [
      [delivered, otherToken],
      ['6f1c2b9e-8d4a-4c3b-9a1e-2f5d7c8b9a01', token],
      ['not-an-id', token],
    ] as const)
      for (const path of [`/v1/faxes/${id}/report`, `/v1/faxes/${id}/image?format=tiff`]) {
        const r = await get(s.url, path, tk);
        answers.push([r.http, r.json]);
      }
    for (const a of answers) assert.deepEqual(a, [404, { status: 0, message: 'Fax not found' }]);
  });

  it('serves a large image a range at a time: the API never holds it whole', needsAddon, async () => {
    // 40 pages of noise (1.2 MB each, as a photo compresses): a 48 MB image, stored for the fax.
    const pages = Array.from({ length: 40 }, () => ({
      data: randomBytes(1_200_000),
      width: 1728,
      height: 2200,
      xDpi: 204,
      yDpi: 196,
    }));
    const big = writeTiffClassF(pages);
    const original = (await getRender(db, delivered))!.tiff;
    await db.query('UPDATE fax_renders SET tiff = $2 WHERE job_id = $1', [delivered, big]);
    try {
      for (const format of ['tiff', 'pdf']) {
        // What this process holds after a full collection (the resident size also counts garbage
        // not yet collected, which grew past 96 MB on a busy machine with the image streamed all the
        // same), sampled by the bytes, not by the clock: as the answer's head arrives, at its first
        // bytes and at every MiB of it, while the service (in this process) is still sending it,
        // which is when an image loaded whole is held. A full collection every 25 ms kept this
        // process collecting (60 CPU-s, and a 180 s timeout on a loaded machine; issue 28).
        const base = liveBytes();
        let peak = 0;
        let samples = 0;
        const sample = () => {
          peak = Math.max(peak, liveBytes() - base);
          samples++;
        };
        const res = await fetch(`${s.url}/v1/faxes/${delivered}/image?format=${format}`, {
          headers: { authorization: `Bearer ${token}` },
        });
        sample();
        assert.equal(res.status, 200);
        // Read as it comes, kept only as a digest (the client holds nothing either).
        const hash = createHash('sha256');
        let n = 0;
        const every = 1024 * 1024;
        for await (const chunk of res.body!) {
          if (n === 0 || Math.floor((n + chunk.length) / every) > Math.floor(n / every)) sample();
          hash.update(chunk);
          n += chunk.length;
        }
        assert.ok(samples >= 40, `${format}: ${samples} samples of what this process held`);
        if (format === 'tiff') {
          assert.equal(n, big.length);
          assert.equal(hash.digest('hex'), createHash('sha256').update(big).digest('hex'));
        } else assert.ok(n > big.length, `${n} bytes of PDF`);
        // Loaded whole, the image took 3-4 times its size in this process (PostgreSQL's hex text of
        // it, the bytes, the answer): 200 MB and more. Streamed, a few ranges at a time: far less than
        // the image itself.
        assert.ok(
          peak < big.length / 2,
          `${format}: this process held ${Math.round(peak / 1e6)} MB more (the image: ${Math.round(big.length / 1e6)} MB)`,
        );
      }
      // Downloads an account may have open at once: the next answers 429 until one closes.
      const open = await Promise.all(
        Array.from({ length: DOWNLOADS_PER_ACCOUNT }, () =>
          fetch(`${s.url}/v1/faxes/${delivered}/image?format=tiff`, {
            headers: { authorization: `Bearer ${token}` },
          }),
        ),
      );
      assert.deepEqual(
        open.map((r) => r.status),
        open.map(() => 200),
      );
      const refused = await get(s.url, `/v1/faxes/${delivered}/image?format=pdf`, token);
      assert.equal(refused.http, 429);
      assert.match(refused.json.message, /^Too many downloads at once/);
      await open[0]!.body!.cancel();
      await eventually(async () => {
        const r = await fetch(`${s.url}/v1/faxes/${delivered}/image?format=tiff`, {
          headers: { authorization: `Bearer ${token}` },
        });
        await r.body?.cancel();
        return r.status === 200;
      }, 10_000);
      await Promise.all(open.slice(1).map((r) => r.body!.cancel()));
    } finally {
      await db.query('UPDATE fax_renders SET tiff = $2 WHERE job_id = $1', [delivered, original]);
    }
  });

  it('deletes the image with the documents; the report stays and says so', needsAddon, async () => {
    // A privacy deletion of one fax's documents takes its image too.
    assert.equal(await new PgDocumentStore(db).delete(failedJob, 'request'), 1);
    const gone = await get(s.url, `/v1/faxes/${failedJob}/image?format=pdf`, token);
    assert.equal(gone.http, 410);
    assert.equal(gone.json.message, 'Fax image not available: it was deleted with the documents (request)');
    const kept = await get(s.url, `/v1/faxes/${delivered}/image`, token);
    assert.equal(kept.http, 200, "another fax's image stays");
    // The retention purge of every finished fax (a cutoff in the future).
    const n = (
      await retentionPass(db, { now: new Date(Date.now() + 2 * 86_400_000), defaultDays: 1, auditDays: 2192 })
    ).faxes;
    assert.ok(n >= 1);
    assert.equal(await getRender(db, delivered), null, 'the render went with the documents');
    for (const format of ['tiff', 'pdf']) {
      const r = await get(s.url, `/v1/faxes/${delivered}/image?format=${format}`, token);
      assert.equal(r.http, 410);
      assert.equal(r.json.message, 'Fax image not available: it was deleted with the documents (retention)');
    }
    const rep = await get(s.url, `/v1/faxes/${delivered}/report`, token);
    assert.equal(rep.http, 200);
    const repPath = file('after.pdf', rep.bytes);
    assert.match(
      tool('pdftotext', ['-layout', repPath, '-']),
      /First page: it was deleted with the documents \(retention\)/,
    );
    assert.doesNotMatch(tool('pdfimages', ['-list', repPath]), / ccitt /, 'no page image left in the report');
  });
  it(
    "prints dates in the account's time zone, which PATCH /v1/workspace sets (and checks)",
    needsAddon,
    async () => {
      const bad = await call(s.url, 'PATCH', '/v1/workspace', { token, body: { time_zone: 'Mars/Olympus' } });
      assert.equal(bad.http, 422);
      assert.equal(
        bad.body.message,
        'time_zone: "Mars/Olympus" is not an IANA time zone name (e.g. Europe/Paris, America/New_York, UTC)',
      );
      const typo = await call(s.url, 'PATCH', '/v1/workspace', { token, body: { timezone: 'Asia/Tokyo' } });
      assert.equal(typo.http, 422);
      const set = await call(s.url, 'PATCH', '/v1/workspace', { token, body: { time_zone: 'Asia/Tokyo' } });
      assert.equal(set.http, 200, JSON.stringify(set.body));
      assert.equal(set.body.data.time_zone, 'Asia/Tokyo');
      const ws = await call(s.url, 'GET', '/v1/workspace', { token });
      assert.equal(ws.body.data.account.time_zone, 'Asia/Tokyo');
      const other = await call(s.url, 'GET', '/v1/workspace', { token: otherToken });
      assert.equal(other.body.data.account.time_zone, 'UTC', "the other account's is unchanged");

      const fd = await call(s.url, 'PATCH', `/v1/fax-defaults/${headerTemplateId}`, {
        token,
        body: { header_line: '{date} {time} page {page} of {pages}' },
      });
      assert.equal(fd.http, 200);
      const p = await call(s.url, 'POST', '/v1/faxes/preview', {
        token,
        body: {
          fax_number: '+15551234567',
          template_id: headerTemplateId,
          fax_data: [{ file_name: 'l.pdf', file_data: fixture('letter-text-2p.pdf').toString('base64') }],
        },
      });
      assert.equal(p.http, 200, JSON.stringify(p.body));
      assert.match(p.body.data.page.header_line, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2} GMT\+9 page 1 of 2$/);
      const rep = await get(s.url, `/v1/faxes/${delivered}/report`, token);
      assert.match(
        tool('pdftotext', ['-layout', file('tokyo.pdf', rep.bytes), '-']),
        /Submitted\s+\S+ \S+ GMT\+9/,
      );
    },
  );
});
