// Encrypted contact ids. The spec identifies a contact by "an encrypted contact ID": customers never
// see the database's UUID. The 16 bytes of the UUID are one AES-256 block, encrypted with a key of
// this installation (deterministic, so a contact always has the same id), followed by 8 bytes of an
// HMAC-SHA256 tag over the ciphertext, in base64url: 32 characters. An id that was altered or made
// up fails the tag and is treated like an unknown contact, without a database read. The key lives in
// PostgreSQL (server_secrets 'contact_id'), created at random on first use, so every API process and
// the admin CLI agree on it; ids stay valid for the life of the installation's database.
import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  hkdfSync,
  randomBytes,
  timingSafeEqual,
} from 'node:crypto';
import type { Queryable } from '../db/pool.ts';

const ID = /^[A-Za-z0-9_-]{32}$/;

export class ContactIds {
  private readonly enc: Buffer;
  private readonly mac: Buffer;

  constructor(key: Buffer) {
    if (key.length < 32) throw new Error('contact id key must have at least 32 bytes');
    this.enc = Buffer.from(hkdfSync('sha256', key, Buffer.alloc(0), 'faxline contact id: aes', 32));
    this.mac = Buffer.from(hkdfSync('sha256', key, Buffer.alloc(0), 'faxline contact id: mac', 32));
  }

  private tag(ct: Buffer): Buffer {
    return createHmac('sha256', this.mac).update(ct).digest().subarray(0, 8);
  }

  /** The customer-facing id of the contact whose database id is `uuid`. */
  encode(uuid: string): string {
    const c = createCipheriv('aes-256-ecb', this.enc, null).setAutoPadding(false);
    const ct = Buffer.concat([c.update(Buffer.from(uuid.replace(/-/g, ''), 'hex')), c.final()]);
    return Buffer.concat([ct, this.tag(ct)]).toString('base64url');
  }

  /** The database id behind a customer-facing id, or null when it is not one this installation issued. */
  decode(id: string): string | null {
    if (!ID.test(id)) return null;
    const raw = Buffer.from(id, 'base64url');
    const ct = raw.subarray(0, 16);
    if (!timingSafeEqual(raw.subarray(16), this.tag(ct))) return null;
    const d = createDecipheriv('aes-256-ecb', this.enc, null).setAutoPadding(false);
    const hex = Buffer.concat([d.update(ct), d.final()]).toString('hex');
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
}

/** This installation's contact id codec (its key created on first use). `db` must be the owner role. */
export async function contactIds(db: Queryable): Promise<ContactIds> {
  await db.query(
    `INSERT INTO server_secrets (name, value) VALUES ('contact_id', $1) ON CONFLICT (name) DO NOTHING`,
    [randomBytes(32)],
  );
  const r = await db.query<{ value: Buffer }>(`SELECT value FROM server_secrets WHERE name = 'contact_id'`);
  return new ContactIds(r.rows[0]!.value);
}
