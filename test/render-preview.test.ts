// POST /v1/faxes/preview against the real service: page count, resolved cover values and a PNG of
// the requested page, without creating a job.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { inflateSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { startService } from './support/harness.ts';
import { fillHeavyPdf } from './fixtures/hostile/build.ts';
import { renderChildren } from './support/render-procs.ts';

const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));

/** Width, height, bit depth, colour type and the share of black pixels of a 1-bit gray PNG. */
function readPng(png: Buffer) {
  assert.ok(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])));
  let pos = 8;
  let ihdr: Buffer | null = null;
  const idat: Buffer[] = [];
  const types: string[] = [];
  while (pos < png.length) {
    const len = png.readUInt32BE(pos);
    const type = png.toString('latin1', pos + 4, pos + 8);
    const data = png.subarray(pos + 8, pos + 8 + len);
    types.push(type);
    if (type === 'IHDR') ihdr = data;
    if (type === 'IDAT') idat.push(data);
    pos += 12 + len;
  }
  assert.ok(ihdr);
  const width = ihdr.readUInt32BE(0);
  const height = ihdr.readUInt32BE(4);
  const raw = inflateSync(Buffer.concat(idat));
  const rowBytes = Math.ceil(width / 8) + 1;
  assert.equal(raw.length, rowBytes * height);
  let black = 0;
  for (let y = 0; y < height; y++)
    for (let i = 1; i < rowBytes; i++)
      black += (~raw[y * rowBytes + i]! & 0xff).toString(2).replace(/0/g, '').length;
  return { width, height, depth: ihdr[8], colour: ihdr[9], types, ink: black / (width * height) };
}

describe('POST /v1/faxes/preview', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let token: string;
  let seed: Awaited<ReturnType<typeof seedAccount>>;
  before(async () => {
    s = await startService({ env: { RENDER_PAGE_SECONDS: '3' } });
    seed = await seedAccount(s, { cover: true });
    token = await tokenFor(s.url, seed.api_key);
  });
  after(async () => {
    await s.dropAll();
  });

  const body = (o: Record<string, unknown> = {}) => ({
    fax_number: '+15551234567',
    fax_data: [
      { file_name: 'a4-text-5p.pdf', file_data: fixture('a4-text-5p.pdf').toString('base64') },
      { file_name: 'letter-text-2p.pdf', file_data: fixture('letter-text-2p.pdf').toString('base64') },
    ],
    recipient_name: 'Dr. Ada Moreau',
    subject: 'Referral',
    ...o,
  });

  it('answers the page count, the resolved cover values and a PNG of the cover', async () => {
    const r = await call(s.url, 'POST', '/v1/faxes/preview', { token, body: body() });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    assert.equal(r.body.status, 1);
    assert.equal(r.body.message, 'Fax preview');
    const d = r.body.data;
    assert.equal(d.page_count, 8, 'seven document pages and the cover');
    assert.equal(d.document_pages, 7);
    assert.equal(d.fax_quality, 'standard', "from the account's default Fax Default");
    assert.deepEqual(d.resolution, { x_dpi: 204, y_dpi: 196 });
    assert.equal(d.cover.source, 'fax_default');
    assert.equal(d.cover.values.to_name, 'Dr. Ada Moreau');
    assert.equal(d.cover.values.from_name, 'Front Desk');
    assert.equal(d.cover.values.from_company, 'Demo Clinic');
    assert.equal(d.cover.values.from_fax, seed.numbers[0]);
    assert.equal(d.cover.values.subject, 'Referral');
    assert.equal(d.cover.values.total_pages, 8);
    assert.equal(d.cover.values.time_zone, 'UTC');
    const png = readPng(Buffer.from(d.page.png_base64, 'base64'));
    assert.deepEqual([png.width, png.height, png.depth, png.colour], [1728, d.page.png_height, 1, 0]);
    assert.ok(png.types.includes('pHYs'));
    assert.equal(d.page.fax_height, 2156, 'the cover is US Letter');
    assert.ok(png.ink > 0.005 && png.ink < 0.2, `cover ink ${png.ink}`);

    // Nothing was sent: the account has no jobs.
    const db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    try {
      const n = await db.query('SELECT count(*)::int AS n FROM fax_jobs WHERE account_id = $1', [
        seed.account_id,
      ]);
      assert.equal(n.rows[0].n, 0);
    } finally {
      await db.end();
    }
  });

  it('renders a requested page at the requested quality with the Fax Default chosen by template_id', async () => {
    const r = await call(s.url, 'POST', '/v1/faxes/preview?page=7', {
      token,
      body: body({ template_id: seed.template_id, fax_quality: 'low' }),
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const d = r.body.data;
    assert.equal(d.cover.template_id, seed.template_id);
    assert.equal(d.cover.values.from_name, 'Pharmacy');
    assert.equal(d.cover.values.from_fax, seed.numbers[1]);
    assert.equal(d.page.number, 7);
    assert.equal(d.page.fax_height, 1078, 'page 7 is the first Letter page, at 98 dpi');
    const png = readPng(Buffer.from(d.page.png_base64, 'base64'));
    assert.equal(png.height, 2244, 'rows resampled to square pixels (11 in x 204 dpi)');
    assert.ok(png.ink > 0.02, `text page ink ${png.ink}`);
  });

  it('refuses what a send would fail, with the same failure code', async () => {
    const broken = await call(s.url, 'POST', '/v1/faxes/preview', {
      token,
      body: body({
        fax_data: [
          { file_name: 'cut.pdf', file_data: fixture('a4-text-5p.pdf').subarray(0, 4000).toString('base64') },
        ],
      }),
    });
    assert.equal(broken.http, 422);
    assert.equal(broken.body.status, 0);
    assert.equal(broken.body.data.code, 'pdf_truncated', 'the same code as the sandboxed check gives a job');
    assert.match(broken.body.message, /cut\.pdf/);

    const past = await call(s.url, 'POST', '/v1/faxes/preview?page=9', { token, body: body() });
    assert.equal(past.http, 422);
    assert.equal(past.body.message, 'page: the fax has 8 page(s)');

    // A Smart Template without its PDF (the demo seed's has one: remove it).
    const db = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await db.connect();
    await db.query('UPDATE smart_templates SET pdf = NULL WHERE id = $1', [seed.smart_document_id]);
    await db.end();
    const empty = await call(s.url, 'POST', '/v1/faxes/preview', {
      token,
      body: body({ smart_document_id: seed.smart_document_id }),
    });
    assert.equal(empty.http, 422);
    assert.equal(empty.body.data.code, 'smart_template_empty');

    const anon = await call(s.url, 'POST', '/v1/faxes/preview', { body: body() });
    assert.equal(anon.http, 401);
  });

  it('renders in a render process of the API, never in the API process itself', async () => {
    const r = await call(s.url, 'POST', '/v1/faxes/preview?page=2', { token, body: body() });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const renderers = renderChildren();
    assert.ok(renderers.length > 0, 'a render process (src/documents/render/child.ts) exists');
    assert.ok(!renderers.includes(process.pid));
  });

  it('refuses a page that needs more than the page budget with render_timeout, and keeps serving', async () => {
    const heavy = await call(s.url, 'POST', '/v1/faxes/preview?page=2', {
      token,
      body: body({ fax_data: [{ file_name: 'heavy.pdf', file_data: fillHeavyPdf().toString('base64') }] }),
    });
    assert.equal(heavy.http, 422, JSON.stringify(heavy.body));
    assert.equal(heavy.body.status, 0);
    assert.equal(heavy.body.data.code, 'render_timeout');
    assert.match(heavy.body.message, /^heavy\.pdf: page 1 took longer than 3 s to render/);
    const next = await call(s.url, 'POST', '/v1/faxes/preview', { token, body: body() });
    assert.equal(next.http, 200, JSON.stringify(next.body));
  });
});
