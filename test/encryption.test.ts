// Encryption at rest (issue 32 part 1, docs/encryption.md): the sealed format (chunks, ranges,
// truncation), a database dump after sending and receiving faxes that holds none of their content
// nor any secret (and, with ENCRYPTION=off, the same check finding them: the test can fail), KEK
// rotation followed by reading every old fax back with only the new key, ciphertexts moved to another
// row or account or altered being refused, content stored in clear before being encrypted in the
// background, and a service that will not start without a key unless told ENCRYPTION=off.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { PDFDocument, PDFName, PDFString, StandardFonts } from 'pdf-lib';
import pg from 'pg';
import { loadConfig } from '../src/config.ts';
import { countClear } from '../src/db/encrypt-existing.ts';
import {
  EncryptionError,
  HEADER_BYTES,
  KeyRing,
  installEncryption,
  isSealed,
  kekId,
  open,
  openRange,
  parseKeks,
  plainSize,
  seal,
} from '../src/db/encryption.ts';
import { start } from '../src/app.ts';
import { loadSmartTemplate } from '../src/documents/cover.ts';
import { getRender, readRenderRange } from '../src/documents/render/store.ts';
import { PgDocumentStore } from '../src/documents/store.ts';
import { createLogger } from '../src/log.ts';
import { PgReceivedFaxSink, type ReceptionResult } from '../src/receive/sink.ts';
import { getImage } from '../src/receive/store.ts';
import { getEndpoint } from '../src/webhooks/repo.ts';
import { allComponents } from '../src/components.ts';
import { twoAccounts, type TwoAccounts } from './support/accounts.ts';
import { call, tokenFor } from './support/client.ts';
import { makeFaxTiff } from './support/faxtiff.ts';
import {
  AMQP_URL,
  createDatabase,
  deleteTopology,
  eventually,
  startService,
  testKek,
} from './support/harness.ts';

const MARKER = 'PATIENT-7Q4-Jane-Doe-1961';
/** The simulated line; webhooks may point at a closed local port (nothing listens; only the secret matters). */
const BASE = { BACKEND: 'simulated', WEBHOOK_ALLOW: '127.0.0.1:9' };
const SIP_PASSWORD = 'sip-pass-' + randomBytes(6).toString('hex');

/** A PDF whose bytes hold MARKER in clear (document information, no object streams). */
async function markedPdf(): Promise<Buffer> {
  const doc = await PDFDocument.create();
  // A literal string in a page dictionary (setTitle would write UTF-16 hex).
  const font = await doc.embedFont(StandardFonts.Helvetica);
  const page = doc.addPage([612, 792]);
  page.drawText(`Referral for ${MARKER}`, { x: 72, y: 700, size: 14, font });
  page.node.set(PDFName.of('FaxlineTestMarker'), PDFString.of(MARKER));
  const bytes = Buffer.from(await doc.save({ useObjectStreams: false }));
  assert.ok(bytes.includes(MARKER), 'the document holds the marker in clear');
  return bytes;
}

const hex = (s: string | Buffer) => Buffer.from(s).toString('hex');

/** What of the content and secrets a plain-text dump shows (bytea is dumped as hex). */
function leaks(dump: string, secrets: string[]): string[] {
  const lower = dump.toLowerCase();
  const found: string[] = [];
  const signatures: [string, Buffer][] = [
    ['%PDF', Buffer.from('%PDF')],
    ['TIFF II*\\0', Buffer.from([0x49, 0x49, 0x2a, 0x00])],
    ['TIFF MM\\0*', Buffer.from([0x4d, 0x4d, 0x00, 0x2a])],
    ['document text', Buffer.from(MARKER)],
  ];
  for (const [name, b] of signatures)
    if (dump.includes(b.toString('latin1')) || lower.includes(hex(b))) found.push(name);
  for (const s of secrets)
    if (dump.includes(s) || lower.includes(hex(s))) found.push(`secret ${s.slice(0, 10)}…`);
  return found;
}

function pgDump(databaseUrl: string): string {
  return execFileSync('pg_dump', ['--no-owner', databaseUrl], {
    encoding: 'latin1',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 512 * 1024 * 1024,
  });
}

const reception: ReceptionResult = {
  ok: true,
  code: 0,
  text: 'OK',
  pages: 2,
  bitRate: 14400,
  ecm: true,
  remoteIdent: 'REMOTE',
  transport: 't38',
  durationMs: 1000,
  lastPageRejected: false,
};

/** What a customer types into a send besides its documents: cover text and names (patient content). */
const typed = {
  subject: 'Referral Kowalczyk cardiology',
  message: 'Patient Zebulon Ashcombe, echo results attached',
  sender_name: 'Dr Quillfeather',
  recipient_name: 'Nurse Ottoline',
};

interface Stored {
  jobId: string;
  receivedId: string;
  secret: string;
  pdf: Buffer;
  image: Buffer;
  receivedTiff: Buffer;
  receivedPdf: Buffer;
}

/** Sends a marked fax (delivered on the simulated line), receives one, adds a webhook endpoint. */
async function storeEverything(t: TwoAccounts): Promise<Stored> {
  const pdf = await markedPdf();
  const sent = await t.api('POST', '/v1/faxes/send', t.tokenA, {
    fax_number: '+15551234567',
    fax_data: [{ file_name: 'referral.pdf', file_data: pdf.toString('base64') }],
    ...typed,
  });
  assert.equal(sent.http, 200, JSON.stringify(sent.body));
  const jobId = sent.body.data.job_id as string;
  await eventually(
    async () => (await t.api('GET', `/v1/faxes/${jobId}`, t.tokenA)).body.data.state === 'delivered',
    120_000,
  );
  const image = await fetchBytes(t, `/v1/faxes/${jobId}/image`);
  assert.equal(image.subarray(0, 4).toString('latin1'), 'II*\0');
  const options = (await t.api('GET', `/v1/faxes/${jobId}`, t.tokenA)).body.data.options;
  assert.deepEqual(options, { approval_required: false, ...typed }, 'the options read back as sent');
  // The list reads its rows with its own SQL: the same options there.
  const listed = (await t.api('GET', '/v1/faxes', t.tokenA)).body.data.find(
    (j: { job_id: string }) => j.job_id === jobId,
  );
  assert.deepEqual(listed?.options, options, 'the list shows the options as sent');

  const hook = await t.api('POST', '/v1/webhooks', t.tokenA, { url: 'http://127.0.0.1:9/hook' });
  assert.equal(hook.http, 200, JSON.stringify(hook.body));
  const secret = hook.body.data.secret as string;

  const pool = new pg.Pool({ connectionString: t.s.cfg.DATABASE_URL, max: 2 });
  try {
    const sink = new PgReceivedFaxSink({ db: pool, log: createLogger('silent') });
    const rec = await sink.begin({
      accountId: t.a.account_id,
      numberId: null,
      to: t.a.numbers[0]!,
      from: '+15557654321',
      stationId: 'X',
      callId: null,
    });
    const stored = await rec.complete(reception, makeFaxTiff(2, 'standard'));
    assert.equal(stored.status, 'received');
    const receivedTiff = await fetchBytes(t, `/v1/received-faxes/${rec.id}/tiff`);
    const receivedPdf = await fetchBytes(t, `/v1/received-faxes/${rec.id}/pdf`);
    assert.equal(receivedPdf.subarray(0, 4).toString('latin1'), '%PDF');
    return { jobId, receivedId: rec.id, secret, pdf, image, receivedTiff, receivedPdf };
  } finally {
    await pool.end();
  }
}

async function fetchBytes(t: TwoAccounts, path: string): Promise<Buffer> {
  const r = await fetch(`${t.s.url}${path}`, { headers: { authorization: `Bearer ${t.tokenA}` } });
  assert.equal(r.status, 200, `${path}: ${r.status}`);
  return Buffer.from(await r.arrayBuffer());
}

describe('sealed format', () => {
  const ring = new KeyRing(parseKeks(randomBytes(32).toString('base64'), 'test'));
  let db: Awaited<ReturnType<typeof createDatabase>>;
  let pool: pg.Pool;
  let accountId: string;
  before(async () => {
    db = await createDatabase({ migrated: true });
    pool = new pg.Pool({ connectionString: db.url, max: 2 });
    // Dropping the database at the end terminates idle connections: expected, not a failure.
    pool.on('error', () => undefined);
    accountId = (await pool.query<{ id: string }>(`INSERT INTO accounts (name) VALUES ('a') RETURNING id`))
      .rows[0]!.id;
    installEncryption(ring);
  });
  after(async () => {
    installEncryption(null);
    await pool?.end();
    await db?.drop();
  });

  it('round-trips every size around the chunk boundaries, and reads any range of them', async () => {
    for (const n of [0, 1, 65_535, 65_536, 65_537, 3 * 65_536 + 17]) {
      const plain = randomBytes(n);
      const ctx = { accountId, kind: 't', id: String(n) };
      const s = await seal(pool, ctx, plain);
      assert.ok(isSealed(s));
      assert.equal(plainSize(s.subarray(0, HEADER_BYTES), s.length), n);
      assert.deepEqual(await open(pool, ctx, s), plain, `${n} bytes`);
      for (const [o, len] of [
        [0, 10],
        [65_530, 20],
        [n - 3, 3],
        [1, n],
        [131_071, 2],
      ] as const) {
        if (o < 0) continue;
        const got = await openRange(
          pool,
          ctx,
          s.subarray(0, HEADER_BYTES),
          s.length,
          o,
          len,
          async (from, k) => s.subarray(from, from + k),
        );
        assert.deepEqual(got, plain.subarray(o, o + len), `${n} bytes, [${o}, +${len})`);
      }
    }
  });

  it('refuses a truncated, extended, altered or moved ciphertext, and a foreign key', async () => {
    const ctx = { accountId, kind: 't', id: 'x' };
    const plain = randomBytes(200_000);
    const s = await seal(pool, ctx, plain);
    const chunk = 65_536 + 16;
    const refused = (b: Buffer, c = ctx) => assert.rejects(() => open(pool, c, b), EncryptionError);
    await refused(s.subarray(0, HEADER_BYTES + 2 * chunk)); // whole chunks cut off the end
    await refused(Buffer.concat([s, s.subarray(HEADER_BYTES, HEADER_BYTES + chunk)]));
    const flipped = Buffer.from(s);
    flipped[HEADER_BYTES + chunk + 5]! ^= 1;
    await refused(flipped);
    await refused(s, { ...ctx, id: 'y' });
    await refused(s, { ...ctx, kind: 'u' });
    const other = (await pool.query<{ id: string }>(`INSERT INTO accounts (name) VALUES ('b') RETURNING id`))
      .rows[0]!.id;
    await refused(s, { ...ctx, accountId: other });
    // A ring without the KEK that wrapped the data key cannot open anything.
    installEncryption(new KeyRing(parseKeks(randomBytes(32).toString('base64'), 'other')));
    await assert.rejects(() => open(pool, ctx, s), /not configured/);
    installEncryption(ring);
    assert.deepEqual(await open(pool, ctx, s), plain);
  });

  it('reads values stored in clear as they are, and KEK ids are fingerprints', async () => {
    const pdf = Buffer.from('%PDF-1.7 not sealed');
    assert.equal(await open(pool, { accountId, kind: 't', id: 'z' }, pdf), pdf);
    const k = randomBytes(32);
    assert.equal(parseKeks(`# a comment\n${k.toString('base64')}\n`, 'f')[0]!.id, kekId(k));
    assert.throws(() => parseKeks('c2hvcnQ=', 'KEK'), /KEK: key 1 is not 32 bytes/);
  });
});

describe('the data key of an account', () => {
  const ring = new KeyRing(parseKeks(randomBytes(32).toString('base64'), 'test'));
  let db: Awaited<ReturnType<typeof createDatabase>>;
  let pool: pg.Pool;
  before(async () => {
    db = await createDatabase({ migrated: true });
    pool = new pg.Pool({ connectionString: db.url, max: 2 });
    // Dropping the database at the end terminates idle connections: expected, not a failure.
    pool.on('error', () => undefined);
    installEncryption(ring);
  });
  after(async () => {
    installEncryption(null);
    await pool?.end();
    await db?.drop();
  });
  const keyIdOf = (sealed: Buffer) => sealed.subarray(6, 14).toString('hex'); // after magic, version, chunk
  const keysOf = async (accountId: string) =>
    (
      await pool.query<{ k: string }>(
        `SELECT encode(key_id, 'hex') AS k FROM account_keys WHERE account_id = $1`,
        [accountId],
      )
    ).rows.map((r) => r.k);

  it('is never remembered from a transaction that rolls back (in a savepoint too); once committed it is not looked up again', async () => {
    const accountId = (
      await pool.query<{ id: string }>(`INSERT INTO accounts (name) VALUES ('k') RETURNING id`)
    ).rows[0]!.id;
    const ctx = { accountId, kind: 't', id: 'k' };
    const c = await pool.connect();
    let statements = 0;
    const counted = {
      query: (...a: Parameters<pg.PoolClient['query']>) => {
        statements++;
        return (c.query as (...x: unknown[]) => unknown)(...a);
      },
    } as unknown as pg.PoolClient;
    let doomed: string;
    try {
      await c.query('BEGIN');
      await c.query('SAVEPOINT s');
      doomed = keyIdOf(await seal(counted, ctx, Buffer.from('a')));
      await c.query('RELEASE SAVEPOINT s');
      statements = 0;
      assert.equal(keyIdOf(await seal(counted, ctx, Buffer.from('b'))), doomed);
      assert.ok(statements > 0, 'a key made by this open transaction is read again, not remembered');
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    assert.deepEqual(await keysOf(accountId), [], 'the key was rolled back');
    const first = await seal(pool, ctx, Buffer.from('c'));
    const kept = keyIdOf(first);
    assert.notEqual(kept, doomed, 'a new key, not the rolled-back one');
    assert.deepEqual(await keysOf(accountId), [kept]);
    assert.deepEqual(await open(pool, ctx, first), Buffer.from('c'));
    // Committed now: sealing for the account again asks the database nothing.
    const c2 = await pool.connect();
    try {
      statements = 0;
      const again = {
        query: (...a: Parameters<pg.PoolClient['query']>) => {
          statements++;
          return (c2.query as (...x: unknown[]) => unknown)(...a);
        },
      } as unknown as pg.PoolClient;
      assert.equal(keyIdOf(await seal(again, ctx, Buffer.from('d'))), kept);
      assert.equal(statements, 0);
    } finally {
      c2.release();
    }
  });
});

describe('encryption at rest, end to end', { timeout: 600_000 }, () => {
  it('a dump after sending and receiving holds no content and no secret; ENCRYPTION=off shows them (the check can fail)', async () => {
    for (const mode of ['on', 'off'] as const) {
      const env: Record<string, string> = { ...BASE, SIP_PASSWORD };
      if (mode === 'off') env.ENCRYPTION = 'off';
      // With a cover page: its resolved values (the typed text) are kept with the rendered fax.
      const t = await twoAccounts(env, { cover: true });
      try {
        const s = await storeEverything(t);
        const ready = await call(t.s.url, 'GET', '/readyz');
        assert.match(
          String(ready.body.data.encryption),
          mode === 'on' ? /^on \(key-encryption key kek-/ : /^off/,
        );
        const found = leaks(pgDump(t.s.cfg.DATABASE_URL), [s.secret, SIP_PASSWORD, ...Object.values(typed)]);
        if (mode === 'on') assert.deepEqual(found, [], 'nothing in clear in the dump');
        else
          for (const want of ['%PDF', 'TIFF II*\\0', 'document text'])
            assert.ok(found.includes(want), `ENCRYPTION=off: the same check finds ${want} (found ${found})`);
        if (mode === 'off') {
          assert.ok(
            found.some((f) => f.startsWith('secret whsec_')),
            'and the webhook secret',
          );
          for (const v of Object.values(typed))
            assert.ok(found.includes(`secret ${v.slice(0, 10)}…`), `and the typed text ${v}`);
          assert.ok(t.s.logs.text.includes('ENCRYPTION=off: fax content and secrets are stored in clear'));
        }
      } finally {
        await t.close();
      }
    }
  });

  it('rotate-kek re-wraps data keys only; every old fax reads back with the new key alone', async () => {
    const t = await twoAccounts(BASE);
    const dbUrl = t.s.cfg.DATABASE_URL;
    const oldKek = testKek(dbUrl);
    try {
      const s = await storeEverything(t);
      const owner = t.owner;
      const contentBefore = await owner.query<{ md5: string }>(
        `SELECT md5(string_agg(md5(coalesce(content, '')), ',' ORDER BY id)) AS md5 FROM fax_documents`,
      );
      await t.s.stop();
      const newKek = randomBytes(32).toString('base64');
      const admin = (kek: string) =>
        spawnSync(process.execPath, ['src/admin/cli.ts', 'rotate-kek'], {
          env: { ...process.env, DATABASE_URL: dbUrl, KEK: kek, KEK_FILE: '' },
          encoding: 'utf8',
          timeout: 60_000,
        });
      // Without the old key the data keys cannot be re-wrapped: it says so and fails.
      const blind = admin(newKek);
      assert.equal(blind.status, 1, blind.stdout + blind.stderr);
      assert.match(blind.stderr, /were not re-wrapped: add that key/);
      const r = admin(`${newKek},${oldKek}`);
      assert.equal(r.status, 0, r.stderr);
      const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
      const newId = kekId(Buffer.from(newKek, 'base64'));
      assert.equal(out.active_kek, newId);
      assert.ok(out.rewrapped >= 2, JSON.stringify(out));
      assert.deepEqual(out.keys_by_kek, { [newId]: out.rewrapped });
      const contentAfter = await owner.query<{ md5: string }>(
        `SELECT md5(string_agg(md5(coalesce(content, '')), ',' ORDER BY id)) AS md5 FROM fax_documents`,
      );
      assert.equal(contentAfter.rows[0]!.md5, contentBefore.rows[0]!.md5, 'content is not re-encrypted');

      // A service with the new key only.
      const s2 = await startService({ databaseUrl: dbUrl, env: { ...BASE, KEK: newKek } });
      try {
        const t2 = { ...t, s: { ...t.s, url: s2.url } } as TwoAccounts;
        t2.tokenA = await tokenFor(s2.url, t.a.api_key);
        assert.deepEqual(await fetchBytes(t2, `/v1/faxes/${s.jobId}/image`), s.image, 'sent image');
        const report = await fetchBytes(t2, `/v1/faxes/${s.jobId}/report`);
        assert.equal(report.subarray(0, 4).toString('latin1'), '%PDF', 'report');
        assert.deepEqual(await fetchBytes(t2, `/v1/received-faxes/${s.receivedId}/tiff`), s.receivedTiff);
        assert.deepEqual(await fetchBytes(t2, `/v1/received-faxes/${s.receivedId}/pdf`), s.receivedPdf);
        const pool = new pg.Pool({ connectionString: dbUrl, max: 2 });
        try {
          const docs = await new PgDocumentStore(pool).get(s.jobId);
          assert.deepEqual(docs[0]!.content, s.pdf, 'uploaded document');
          const hook = (await pool.query<{ id: string }>('SELECT id FROM webhook_endpoints')).rows[0]!;
          assert.equal(
            (await getEndpoint(pool, hook.id, t.a.account_id))!.secret,
            s.secret,
            'webhook secret',
          );
          const tpl = await loadSmartTemplate(pool, t.a.account_id, t.a.smart_document_id);
          assert.equal(Buffer.from(tpl!.pdf).subarray(0, 4).toString('latin1'), '%PDF', 'Smart Template');
          // A fax sent after the rotation works too, end to end.
          const again = await call(s2.url, 'POST', '/v1/faxes/send', {
            token: t2.tokenA,
            body: {
              fax_number: '+15551234567',
              fax_data: [{ file_name: 'a.pdf', file_data: s.pdf.toString('base64') }],
            },
          });
          assert.equal(again.http, 200, JSON.stringify(again.body));
          await eventually(
            async () =>
              (await call(s2.url, 'GET', `/v1/faxes/${again.body.data.job_id}`, { token: t2.tokenA })).body
                .data.state === 'delivered',
            120_000,
          );
          // The old key alone no longer opens anything.
          installEncryption(new KeyRing(parseKeks(oldKek, 'old')));
          await assert.rejects(() => new PgDocumentStore(pool).get(s.jobId), /not configured/);
          installEncryption(new KeyRing(parseKeks(newKek, 'new')));
        } finally {
          await pool.end();
        }
      } finally {
        await s2.stop();
      }
    } finally {
      await t.close();
    }
  });

  it('a ciphertext moved to another row or account, or altered, is refused', async () => {
    const t = await twoAccounts(BASE);
    try {
      const a = await storeEverything(t);
      const pdfB = await markedPdf();
      const sentB = await t.api('POST', '/v1/faxes/send', t.tokenB, {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'b.pdf', file_data: pdfB.toString('base64') }],
      });
      const jobB = sentB.body.data.job_id as string;
      await eventually(
        async () => (await t.api('GET', `/v1/faxes/${jobB}`, t.tokenB)).body.data.state === 'delivered',
        120_000,
      );
      const pool = new pg.Pool({ connectionString: t.s.cfg.DATABASE_URL, max: 2 });
      try {
        const store = new PgDocumentStore(pool);
        assert.deepEqual((await store.get(jobB))[0]!.content, pdfB);
        // A's document copied into B's row (another account): refused, not served as B's.
        await t.owner.query(
          `UPDATE fax_documents SET content = (SELECT content FROM fax_documents WHERE job_id = $1) WHERE job_id = $2`,
          [a.jobId, jobB],
        );
        await assert.rejects(() => store.get(jobB), EncryptionError);
        // A's fax image copied to A's own other fax: refused too (bound to the job).
        const a2 = await t.api('POST', '/v1/faxes/send', t.tokenA, {
          fax_number: '+15551234567',
          fax_data: [{ file_name: 'c.pdf', file_data: a.pdf.toString('base64') }],
        });
        const jobA2 = a2.body.data.job_id as string;
        await eventually(async () => (await getRender(pool, jobA2)) !== null, 120_000);
        await t.owner.query(
          `UPDATE fax_renders SET tiff = (SELECT tiff FROM fax_renders WHERE job_id = $1) WHERE job_id = $2`,
          [a.jobId, jobA2],
        );
        await assert.rejects(() => getRender(pool, jobA2), EncryptionError);
        // The received TIFF put in the PDF column of the same row: refused.
        await t.owner.query('UPDATE received_faxes SET pdf = tiff WHERE id = $1', [a.receivedId]);
        await assert.rejects(() => getImage(pool, a.receivedId, 'pdf'), EncryptionError);
        // One bit of the sent image flipped: refused, both whole and by range. (XOR: writing 0xff
        // over the byte changed nothing when the byte was 0xff already, 1 run in 256.)
        await t.owner.query(
          `UPDATE fax_renders SET tiff = set_byte(tiff, 39, get_byte(tiff, 39) # 1) WHERE job_id = $1`,
          [a.jobId],
        );
        await assert.rejects(() => getRender(pool, a.jobId), EncryptionError);
        await assert.rejects(() => readRenderRange(pool, a.jobId, 0, 16), EncryptionError);
        // The webhook secret of A's endpoint moved to a new endpoint of B.
        const made = await t.api('POST', '/v1/webhooks', t.tokenB, { url: 'http://127.0.0.1:9/b' });
        await t.owner.query(
          `UPDATE webhook_endpoints SET secret = (SELECT secret FROM webhook_endpoints WHERE account_id = $1) WHERE id = $2`,
          [t.a.account_id, made.body.data.webhook_id],
        );
        await assert.rejects(
          () => getEndpoint(pool, made.body.data.webhook_id, t.b.account_id),
          EncryptionError,
        );
      } finally {
        await pool.end();
      }
    } finally {
      await t.close();
    }
  });

  it('content stored with ENCRYPTION=off is encrypted in the background once a key is set, and still reads', async () => {
    const t = await twoAccounts({ ...BASE, ENCRYPTION: 'off' }, { cover: true });
    const dbUrl = t.s.cfg.DATABASE_URL;
    try {
      const s = await storeEverything(t);
      const before = await countClear(t.owner);
      for (const table of [
        'fax_jobs',
        'fax_documents',
        'fax_renders',
        'received_faxes',
        'smart_templates',
        'webhook_endpoints',
      ])
        assert.ok(before[table]! > 0, `${table} in clear before: ${JSON.stringify(before)}`);
      const digests = async () =>
        (
          await t.owner.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM fax_documents WHERE content_digest IS NOT NULL',
          )
        ).rows[0]!.n;
      assert.ok((await digests()) > 0, 'documents stored in clear have a digest taken in clear');
      await t.s.stop();
      const kek = randomBytes(32).toString('base64');
      const s2 = await startService({
        databaseUrl: dbUrl,
        env: { ...BASE, KEK: kek, ENCRYPT_EXISTING_BATCH: '1' },
      });
      try {
        const left = await eventually(async () => {
          const c = await countClear(t.owner);
          return Object.values(c).every((n) => n === 0) ? c : null;
        }, 120_000);
        assert.ok(left);
        assert.equal(await digests(), 0, 'a digest taken in clear goes when its document is sealed');
        assert.match(s2.logs.text, /"msg":"encrypting existing content"/);
        assert.deepEqual(
          leaks(pgDump(dbUrl), [s.secret, ...Object.values(typed)]),
          [],
          'nothing left in clear',
        );
        const token = await tokenFor(s2.url, t.a.api_key);
        const get = async (path: string) => {
          const r = await fetch(`${s2.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
          assert.equal(r.status, 200, path);
          return Buffer.from(await r.arrayBuffer());
        };
        assert.deepEqual(await get(`/v1/faxes/${s.jobId}/image`), s.image);
        const fax = JSON.parse((await get(`/v1/faxes/${s.jobId}`)).toString()) as {
          data: { options: object };
        };
        assert.deepEqual(
          fax.data.options,
          { approval_required: false, ...typed },
          'options sealed, read back',
        );
        assert.deepEqual(await get(`/v1/received-faxes/${s.receivedId}/pdf`), s.receivedPdf);
        const pool = new pg.Pool({ connectionString: dbUrl, max: 2 });
        try {
          assert.deepEqual((await new PgDocumentStore(pool).get(s.jobId))[0]!.content, s.pdf);
        } finally {
          await pool.end();
        }
      } finally {
        await s2.stop();
      }
    } finally {
      await t.close();
    }
  });

  it('does not start without a key unless ENCRYPTION=off; npm start makes a development key file', async () => {
    const db = await createDatabase({ migrated: true });
    try {
      const cfg = loadConfig({
        DATABASE_URL: db.url,
        AMQP_URL,
        PORT: '0',
        HOST: '127.0.0.1',
        DB_POOL_SIZE: '2',
      });
      await assert.rejects(
        () => start(cfg, { components: allComponents, log: createLogger('silent') }),
        /ENCRYPTION=on needs a key-encryption key: set KEK_FILE or KEK/,
      );
      const dir = execFileSync('mktemp', ['-d'], { encoding: 'utf8' }).trim();
      const file = `${dir}/state/dev-kek`;
      const prefix = `t_enc_${randomBytes(4).toString('hex')}`;
      const running = await start(
        { ...cfg, QUEUE_PREFIX: prefix },
        { components: ['api'], log: createLogger('silent'), devKekFile: file },
      );
      await running.stop();
      await deleteTopology(prefix);
      const text = readFileSync(file, 'utf8');
      assert.equal(parseKeks(text, 'dev').length, 1);
      execFileSync('rm', ['-rf', dir]);
    } finally {
      await db.drop();
    }
  });
});
