// Encryption at rest (issue 32; docs/encryption.md). Envelope encryption: every account has one data
// key (AES-256, table account_keys, migration 024) kept only wrapped by a key-encryption key (KEK) from
// KEK_FILE or KEK, which never enters the database. Content is sealed with the account's data key in
// fixed-size chunks, each with its own GCM tag, so a range read opens only the chunks it needs.
//
// Sealed format, version 1 (all integers big-endian):
//   magic   4 bytes  00 46 58 43 ("\0FXC")
//   version 1 byte   01
//   chunk   1 byte   log2 of the plaintext chunk size (16: 64 KiB)
//   key id  8 bytes  account_keys.key_id of the data key
//   nonce   8 bytes  random per object; chunk i's GCM nonce is these 8 bytes + uint32 i
//   chunks  each: ciphertext (chunk size, the last one shorter, possibly empty) + 16-byte tag
// Each chunk's additional data is the object's context (kind, account id, object id: a ciphertext
// moved to another row, column or account does not open), its index and whether it is the last one
// (a truncated object does not open either). Text (webhook secrets) is the same bytes in Base64url
// after the prefix "fxc1:".
//
// A process holds one key ring (installEncryption, called by the wiring at start). Values written
// before encryption was switched on are read as they are (no magic) until the background task of
// encrypt-existing.ts has sealed them.
import { createCipheriv, createDecipheriv, createHash, createHmac, hkdfSync, randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Queryable } from './pool.ts';

const MAGIC = Buffer.from([0x00, 0x46, 0x58, 0x43]);
const VERSION = 1;
const CHUNK_LOG2 = 16;
export const HEADER_BYTES = 22;
const TAG_BYTES = 16;
const TEXT_PREFIX = 'fxc1:';

/** What a ciphertext belongs to; all three are authenticated. */
export interface SealContext {
  accountId: string;
  /** The table and column, e.g. 'fax_documents.content'. */
  kind: string;
  /** The row (and part), e.g. a job id, or `${jobId}/${position}`. */
  id: string;
}

export class EncryptionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EncryptionError';
  }
}

export interface Kek {
  id: string;
  key: Buffer;
}

/** A KEK's id: a fingerprint of the key itself, so an id can never name the wrong key. */
export function kekId(key: Buffer): string {
  return 'kek-' + createHash('sha256').update('faxline-kek-id\0').update(key).digest('hex').slice(0, 16);
}

/** Base64 keys of 32 bytes, separated by new lines, commas or spaces; '#' starts a comment line. */
export function parseKeks(text: string, source: string): Kek[] {
  const out: Kek[] = [];
  const words = text
    .split('\n')
    .filter((l) => !l.trim().startsWith('#'))
    .join('\n')
    .split(/[\s,]+/)
    .filter(Boolean);
  for (const [i, w] of words.entries()) {
    const key = Buffer.from(w, 'base64');
    if (key.length !== 32 || !/^[A-Za-z0-9+/_-]+=*$/.test(w))
      throw new EncryptionError(`${source}: key ${i + 1} is not 32 bytes in Base64`);
    const id = kekId(key);
    if (!out.some((k) => k.id === id)) out.push({ id, key });
  }
  return out;
}

/** The configured KEKs: the first is the active one (wraps new and re-wrapped data keys); the others only read. */
export class KeyRing {
  readonly keks: Kek[];
  constructor(keks: Kek[]) {
    if (keks.length === 0) throw new EncryptionError('a key ring needs at least one key');
    this.keks = keks;
  }
  get active(): Kek {
    return this.keks[0]!;
  }
  get(id: string): Kek | undefined {
    return this.keks.find((k) => k.id === id);
  }
}

/** A new random KEK in the form KEK_FILE and KEK hold. */
export function newKekText(): string {
  return randomBytes(32).toString('base64');
}

/**
 * The key ring from KEK (the variable's text) and KEK_FILE (a path); both may be given, KEK's keys
 * first. null when neither is.
 */
export async function loadKeyRing(o: { kek: string; kekFile: string }): Promise<KeyRing | null> {
  const keks = o.kek ? parseKeks(o.kek, 'KEK') : [];
  if (o.kekFile) {
    let text: string;
    try {
      text = await readFile(o.kekFile, 'utf8');
    } catch (err) {
      throw new EncryptionError(`KEK_FILE ${o.kekFile}: ${(err as Error).message}`);
    }
    for (const k of parseKeks(text, `KEK_FILE ${o.kekFile}`))
      if (!keks.some((x) => x.id === k.id)) keks.push(k);
    if (keks.length === 0) throw new EncryptionError(`KEK_FILE ${o.kekFile} holds no key`);
  }
  return keks.length > 0 ? new KeyRing(keks) : null;
}

/** Writes a new KEK file (mode 0600) unless one exists; true when it wrote one. */
export async function createKekFile(path: string): Promise<boolean> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  try {
    await writeFile(
      path,
      `# faxline key-encryption key (docs/encryption.md). Back it up apart from the database.\n${newKekText()}\n`,
      {
        flag: 'wx',
        mode: 0o600,
      },
    );
  } catch (err) {
    if ((err as { code?: string }).code === 'EEXIST') return false;
    throw err;
  }
  await chmod(path, 0o600);
  return true;
}

// --- the process's key ring and its unwrapped data keys -------------------------------------------

interface DataKey {
  keyId: Buffer;
  accountId: string;
  key: Buffer;
}

let ring: KeyRing | null = null;
/** False with ENCRYPTION=off: nothing new is sealed (a configured ring still opens what was). */
let sealing = false;
/** Unwrapped data keys by key id (hex). A key id never changes its key, so this is never stale. */
const unwrapped = new Map<string, DataKey>();
/**
 * Committed data keys by account id: an account has one data key for life (rotation re-wraps it and
 * keeps its id and bytes), so once a key is known to be committed the look-up by account is skipped
 * (issue 33: it was two statements of every fax). A key this process's own open transaction created
 * is never put here: that transaction may still roll back.
 */
const byAccount = new Map<string, DataKey>();
const MAX_CACHED_KEYS = 10_000;

/**
 * Sets the process's key ring. `seal` false (ENCRYPTION=off): new content is written in clear; the
 * ring, when given, still opens content sealed before.
 */
export function installEncryption(r: KeyRing | null, o: { seal?: boolean } = {}): void {
  ring = r;
  sealing = r !== null && o.seal !== false;
  unwrapped.clear();
  byAccount.clear();
}

/** True when new content is sealed. */
export function encryptionOn(): boolean {
  return sealing;
}

/**
 * The key ring a process starts with. ENCRYPTION=on without KEK or KEK_FILE: the KEK file
 * `devKekFile` (the all-in-one `npm start` only) is created on first start and used; without it the
 * process refuses to start.
 */
export async function resolveKeyRing(o: {
  encryption: 'on' | 'off';
  kek: string;
  kekFile: string;
  devKekFile?: string;
}): Promise<{ ring: KeyRing | null; devKek?: { path: string; created: boolean } }> {
  const ring = await loadKeyRing(o);
  if (ring || o.encryption === 'off') return { ring };
  if (!o.devKekFile)
    throw new EncryptionError(
      'ENCRYPTION=on needs a key-encryption key: set KEK_FILE or KEK (docs/encryption.md), or ENCRYPTION=off to store fax content in clear',
    );
  const created = await createKekFile(o.devKekFile);
  return {
    ring: await loadKeyRing({ kek: '', kekFile: o.devKekFile }),
    devKek: { path: o.devKekFile, created },
  };
}

function wrapAad(accountId: string, keyId: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`faxline-data-key/v1\0${accountId}\0`), keyId]);
}

/** A data key wrapped by a KEK: nonce (12) + ciphertext (32) + tag (16). */
export function wrapKey(kek: Kek, accountId: string, keyId: Buffer, key: Buffer): Buffer {
  const nonce = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', kek.key, nonce);
  c.setAAD(wrapAad(accountId, keyId));
  const body = Buffer.concat([c.update(key), c.final()]);
  return Buffer.concat([nonce, body, c.getAuthTag()]);
}

export function unwrapKey(kek: Kek, accountId: string, keyId: Buffer, wrapped: Buffer): Buffer {
  if (wrapped.length !== 60) throw new EncryptionError('a wrapped data key is 60 bytes');
  const d = createDecipheriv('aes-256-gcm', kek.key, wrapped.subarray(0, 12));
  d.setAAD(wrapAad(accountId, keyId));
  d.setAuthTag(wrapped.subarray(44));
  try {
    return Buffer.concat([d.update(wrapped.subarray(12, 44)), d.final()]);
  } catch {
    throw new EncryptionError(`data key of account ${accountId} does not open with ${kek.id}`);
  }
}

function requireRing(): KeyRing {
  if (!ring) throw new EncryptionError('encrypted content, but no key is configured (KEK_FILE or KEK)');
  return ring;
}

function remember(k: DataKey): DataKey {
  if (unwrapped.size >= MAX_CACHED_KEYS) unwrapped.clear();
  unwrapped.set(k.keyId.toString('hex'), k);
  return k;
}

function fromRow(r: { key_id: Buffer; account_id: string; kek_id: string; wrapped: Buffer }): DataKey {
  const kek = requireRing().get(r.kek_id);
  if (!kek)
    throw new EncryptionError(
      `the data key of account ${r.account_id} is wrapped by ${r.kek_id}, which is not configured (KEK_FILE, KEK)`,
    );
  return remember({
    keyId: r.key_id,
    accountId: r.account_id,
    key: unwrapKey(kek, r.account_id, r.key_id, r.wrapped),
  });
}

/**
 * The account's data key, created on first use. A key read from the database is remembered by
 * account only when another transaction created it (its `created_at`, the creating transaction's
 * start, differs from this transaction's `now()`): that transaction has committed, or its row would
 * not be visible here. One this transaction created (itself or in a savepoint) is looked up again
 * next time, since the transaction may still roll back and a key that was never committed must not
 * seal anything.
 */
async function keyForAccount(q: Queryable, accountId: string): Promise<DataKey> {
  const cached = byAccount.get(accountId);
  if (cached) return cached;
  const select = () =>
    q.query<{ key_id: Buffer; account_id: string; kek_id: string; wrapped: Buffer; settled: boolean }>(
      `SELECT key_id, account_id, kek_id, wrapped, created_at <> now() AS settled
         FROM account_keys WHERE account_id = $1`,
      [accountId],
    );
  let row = (await select()).rows[0];
  if (!row) {
    const kek = requireRing().active;
    const keyId = randomBytes(8);
    const key = randomBytes(32);
    await q.query(
      `INSERT INTO account_keys (key_id, account_id, kek_id, wrapped) VALUES ($1, $2, $3, $4)
       ON CONFLICT (account_id) DO NOTHING`,
      [keyId, accountId, kek.id, wrapKey(kek, accountId, keyId, key)],
    );
    row = (await select()).rows[0];
    if (!row) throw new EncryptionError(`no data key for account ${accountId}`);
  }
  const k = unwrapped.get(row.key_id.toString('hex')) ?? fromRow(row);
  if (row.settled) {
    if (byAccount.size >= MAX_CACHED_KEYS) byAccount.clear();
    byAccount.set(accountId, k);
  }
  return k;
}

async function keyById(q: Queryable, keyId: Buffer, accountId: string): Promise<DataKey> {
  const known = unwrapped.get(keyId.toString('hex'));
  if (known) {
    if (known.accountId !== accountId) throw new EncryptionError('the data key belongs to another account');
    return known;
  }
  const r = await q.query<{ key_id: Buffer; account_id: string; kek_id: string; wrapped: Buffer }>(
    'SELECT key_id, account_id, kek_id, wrapped FROM account_keys WHERE key_id = $1',
    [keyId],
  );
  const row = r.rows[0];
  if (!row || row.account_id !== accountId)
    throw new EncryptionError(`the data key of this ${accountId} content is missing`);
  return fromRow(row);
}

// --- the sealed format ----------------------------------------------------------------------------

/** True when `b` is in the sealed format (anything else is read as stored before encryption). */
export function isSealed(b: Uint8Array): boolean {
  return b.length >= HEADER_BYTES + TAG_BYTES && Buffer.from(b.buffer, b.byteOffset, 4).equals(MAGIC);
}

function chunkAad(ctx: SealContext, index: number, last: boolean): Buffer {
  const tail = Buffer.alloc(5);
  tail.writeUInt32BE(index, 0);
  tail[4] = last ? 1 : 0;
  return Buffer.concat([Buffer.from(`faxline/v1\0${ctx.kind}\0${ctx.accountId}\0${ctx.id}\0`, 'utf8'), tail]);
}

function chunkNonce(prefix: Buffer, index: number): Buffer {
  const n = Buffer.alloc(12);
  prefix.copy(n, 0, 0, 8);
  n.writeUInt32BE(index, 8);
  return n;
}

function sealWith(k: DataKey, ctx: SealContext, plain: Uint8Array): Buffer {
  const size = 1 << CHUNK_LOG2;
  const header = Buffer.alloc(HEADER_BYTES);
  MAGIC.copy(header, 0);
  header[4] = VERSION;
  header[5] = CHUNK_LOG2;
  k.keyId.copy(header, 6);
  const prefix = randomBytes(8);
  prefix.copy(header, 14);
  const n = Math.max(1, Math.ceil(plain.length / size));
  const parts: Buffer[] = [header];
  for (let i = 0; i < n; i++) {
    const c = createCipheriv('aes-256-gcm', k.key, chunkNonce(prefix, i));
    c.setAAD(chunkAad(ctx, i, i === n - 1));
    parts.push(c.update(plain.subarray(i * size, (i + 1) * size)), c.final(), c.getAuthTag());
  }
  return Buffer.concat(parts);
}

interface Header {
  chunk: number;
  keyId: Buffer;
  prefix: Buffer;
}

function readHeader(b: Buffer): Header {
  if (!b.subarray(0, 4).equals(MAGIC)) throw new EncryptionError('not sealed');
  if (b[4] !== VERSION) throw new EncryptionError(`sealed format version ${b[4]} is not known`);
  const log2 = b[5]!;
  if (log2 < 10 || log2 > 24) throw new EncryptionError('sealed chunk size out of range');
  return { chunk: 1 << log2, keyId: Buffer.from(b.subarray(6, 14)), prefix: Buffer.from(b.subarray(14, 22)) };
}

/** The plaintext size of a sealed object `storedLength` bytes long, and its chunk count. */
function geometry(h: Header, storedLength: number): { plain: number; chunks: number } {
  const body = storedLength - HEADER_BYTES;
  const chunks = Math.max(1, Math.ceil(body / (h.chunk + TAG_BYTES)));
  const plain = body - chunks * TAG_BYTES;
  if (plain < 0) throw new EncryptionError('sealed object is truncated');
  return { plain, chunks };
}

function openChunk(
  k: DataKey,
  h: Header,
  ctx: SealContext,
  index: number,
  last: boolean,
  data: Buffer,
): Buffer {
  if (data.length < TAG_BYTES) throw new EncryptionError('sealed object is truncated');
  const d = createDecipheriv('aes-256-gcm', k.key, chunkNonce(h.prefix, index));
  d.setAAD(chunkAad(ctx, index, last));
  d.setAuthTag(data.subarray(data.length - TAG_BYTES));
  try {
    return Buffer.concat([d.update(data.subarray(0, data.length - TAG_BYTES)), d.final()]);
  } catch {
    throw new EncryptionError(`${ctx.kind} ${ctx.id} does not open: altered, or not this row's`);
  }
}

/** Seals `plain` for `ctx` with the account's data key; with ENCRYPTION=off returns it as it is. */
export async function seal(q: Queryable, ctx: SealContext, plain: Uint8Array): Promise<Buffer> {
  if (!sealing) return Buffer.from(plain.buffer, plain.byteOffset, plain.length);
  return sealWith(await keyForAccount(q, ctx.accountId), ctx, plain);
}

/** The same, for several objects of one account (one key lookup). */
export async function sealMany(
  q: Queryable,
  accountId: string,
  items: (SealContext & { plain: Uint8Array })[],
): Promise<Buffer[]> {
  if (!sealing || items.length === 0)
    return items.map((i) => Buffer.from(i.plain.buffer, i.plain.byteOffset, i.plain.length));
  if (items.some((i) => i.accountId !== accountId))
    throw new EncryptionError('sealMany: one account per call');
  const k = await keyForAccount(q, accountId);
  return items.map((i) => sealWith(k, i, i.plain));
}

const digestKeys = new WeakMap<DataKey, Buffer>();

/**
 * A digest of an account's content, equal for equal bytes: an HMAC-SHA256 under a key derived from
 * the account's data key while content is sealed (only a holder of that key can tell what content
 * a digest stands for), a plain SHA-256 while it is stored in clear.
 */
export async function contentDigest(q: Queryable, accountId: string, plain: Uint8Array): Promise<Buffer> {
  if (!sealing) return createHash('sha256').update('faxline content digest\n').update(plain).digest();
  const k = await keyForAccount(q, accountId);
  let mac = digestKeys.get(k);
  if (!mac) {
    mac = Buffer.from(hkdfSync('sha256', k.key, Buffer.alloc(0), 'faxline content digest', 32));
    digestKeys.set(k, mac);
  }
  return createHmac('sha256', mac).update(plain).digest();
}

/** The plaintext of a stored value (sealed, or stored in clear before encryption). */
export async function open(q: Queryable, ctx: SealContext, stored: Buffer): Promise<Buffer> {
  if (!isSealed(stored)) return stored;
  const h = readHeader(stored);
  const k = await keyById(q, h.keyId, ctx.accountId);
  const g = geometry(h, stored.length);
  const step = h.chunk + TAG_BYTES;
  const out: Buffer[] = [];
  for (let i = 0; i < g.chunks; i++) {
    const from = HEADER_BYTES + i * step;
    out.push(
      openChunk(
        k,
        h,
        ctx,
        i,
        i === g.chunks - 1,
        stored.subarray(from, Math.min(stored.length, from + step)),
      ),
    );
  }
  return Buffer.concat(out);
}

export async function openOrNull(
  q: Queryable,
  ctx: SealContext,
  stored: Buffer | null,
): Promise<Buffer | null> {
  return stored === null ? null : open(q, ctx, stored);
}

/** The plaintext size of a stored value from its stored size and first HEADER_BYTES bytes. */
export function plainSize(head: Buffer, storedLength: number): number {
  if (!headSealed(head, storedLength)) return storedLength;
  return geometry(readHeader(head), storedLength).plain;
}

function headSealed(head: Buffer, storedLength: number): boolean {
  return (
    storedLength >= HEADER_BYTES + TAG_BYTES &&
    head.length >= HEADER_BYTES &&
    head.subarray(0, 4).equals(MAGIC)
  );
}

/**
 * Bytes [offset, offset + length) of the plaintext of a stored value, reading only the chunks that
 * hold them. `slice(from, n)` returns n stored bytes from byte `from` (0-based), or null when gone.
 */
export async function openRange(
  q: Queryable,
  ctx: SealContext,
  head: Buffer,
  storedLength: number,
  offset: number,
  length: number,
  slice: (from: number, n: number) => Promise<Buffer | null>,
): Promise<Buffer | null> {
  if (!headSealed(head, storedLength)) return slice(offset, length);
  const h = readHeader(head);
  const g = geometry(h, storedLength);
  const end = Math.min(g.plain, offset + length);
  if (offset >= end) return Buffer.alloc(0);
  const k = await keyById(q, h.keyId, ctx.accountId);
  const step = h.chunk + TAG_BYTES;
  const first = Math.floor(offset / h.chunk);
  const last = Math.floor((end - 1) / h.chunk);
  const from = HEADER_BYTES + first * step;
  const stored = await slice(from, Math.min(storedLength, HEADER_BYTES + (last + 1) * step) - from);
  if (!stored) return null;
  const out: Buffer[] = [];
  for (let i = first; i <= last; i++) {
    const at = (i - first) * step;
    out.push(
      openChunk(k, h, ctx, i, i === g.chunks - 1, stored.subarray(at, Math.min(stored.length, at + step))),
    );
  }
  const plain = Buffer.concat(out);
  const skip = offset - first * h.chunk;
  return plain.subarray(skip, skip + (end - offset));
}

/** Text (a webhook secret) sealed as "fxc1:" + Base64url; text without the prefix is read as it is. */
export async function sealText(q: Queryable, ctx: SealContext, text: string): Promise<string> {
  if (!sealing) return text;
  return TEXT_PREFIX + (await seal(q, ctx, Buffer.from(text, 'utf8'))).toString('base64url');
}

export function isSealedText(s: string): boolean {
  return s.startsWith(TEXT_PREFIX);
}

export async function openText(q: Queryable, ctx: SealContext, stored: string): Promise<string> {
  if (!isSealedText(stored)) return stored;
  const b = Buffer.from(stored.slice(TEXT_PREFIX.length), 'base64url');
  if (!isSealed(b)) throw new EncryptionError(`${ctx.kind} ${ctx.id}: malformed sealed text`);
  return (await open(q, ctx, b)).toString('utf8');
}

// --- KEK rotation ---------------------------------------------------------------------------------

/**
 * Re-wraps every data key not wrapped by the active KEK with it, `batch` keys per transaction; the
 * content sealed with those data keys is untouched. Returns how many were re-wrapped. Keys wrapped by
 * a KEK that is not configured are counted in `missing` and left as they are.
 */
export async function rotateKek(
  db: { connect(): Promise<Queryable & { release(): void }> },
  r: KeyRing,
  o: { batch?: number; maxBatches?: number; onBatch?: (done: number) => void } = {},
): Promise<{ rewrapped: number; missing: Record<string, number> }> {
  const batch = o.batch ?? 500;
  const maxBatches = o.maxBatches ?? 1_000_000;
  let rewrapped = 0;
  let after: Buffer = Buffer.alloc(0);
  const missing: Record<string, number> = {};
  for (let b = 0; b < maxBatches; b++) {
    const c = await db.connect();
    let n = 0;
    try {
      await c.query('BEGIN');
      const rows = await c.query<{ key_id: Buffer; account_id: string; kek_id: string; wrapped: Buffer }>(
        `SELECT key_id, account_id, kek_id, wrapped FROM account_keys
          WHERE kek_id <> $1 AND key_id > $2 ORDER BY key_id LIMIT $3 FOR UPDATE`,
        [r.active.id, after, batch],
      );
      for (const row of rows.rows) {
        after = row.key_id;
        const old = r.get(row.kek_id);
        if (!old) {
          missing[row.kek_id] = (missing[row.kek_id] ?? 0) + 1;
          continue;
        }
        const key = unwrapKey(old, row.account_id, row.key_id, row.wrapped);
        await c.query(
          'UPDATE account_keys SET kek_id = $2, wrapped = $3, rewrapped_at = now() WHERE key_id = $1',
          [row.key_id, r.active.id, wrapKey(r.active, row.account_id, row.key_id, key)],
        );
        n++;
      }
      await c.query('COMMIT');
      rewrapped += n;
      o.onBatch?.(rewrapped);
      if (rows.rows.length < batch) break;
    } catch (err) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      c.release();
    }
  }
  return { rewrapped, missing };
}

/** How many data keys each KEK wraps (admin `kek-status`, and the check before removing an old KEK). */
export async function keysByKek(q: Queryable): Promise<Record<string, number>> {
  const r = await q.query<{ kek_id: string; n: number }>(
    'SELECT kek_id, count(*)::int AS n FROM account_keys GROUP BY kek_id ORDER BY kek_id',
  );
  return Object.fromEntries(r.rows.map((x) => [x.kek_id, x.n]));
}
