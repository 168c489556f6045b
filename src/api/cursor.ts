// Opaque, tamper-evident pagination cursors. A cursor is base64url(JSON position) + "." +
// base64url(HMAC-SHA256). The MAC covers the position and the context it belongs to (the list, its
// filter and the account), so a cursor that was altered, forged, or taken from another account's or
// another filter's list is refused (422), never silently reinterpreted.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { ApiError } from '../domain/envelope.ts';

export interface Position {
  /** created_at of the edge row, PostgreSQL text with microseconds (exact round trip). */
  t: string;
  /** id of the edge row. */
  i: string;
  /** Direction: 'n' = rows after this position, 'p' = rows before it. */
  d: 'n' | 'p';
}

export const invalidCursor = () =>
  new ApiError(
    422,
    'cursor: is not a cursor this list issued; pass next_cursor or previous_cursor unchanged',
  );

export class CursorCodec {
  private readonly key: Buffer;
  constructor(key: Buffer) {
    if (key.length < 16) throw new Error('cursor key must have at least 16 bytes');
    this.key = key;
  }

  private mac(payload: string, context: string): Buffer {
    return createHmac('sha256', this.key).update(context).update('\0').update(payload).digest();
  }

  encode(p: Position, context: string): string {
    const payload = Buffer.from(JSON.stringify(p)).toString('base64url');
    return `${payload}.${this.mac(payload, context).toString('base64url')}`;
  }

  decode(cursor: string, context: string): Position {
    const m = /^([A-Za-z0-9_-]{1,600})\.([A-Za-z0-9_-]{43})$/.exec(cursor);
    if (!m) throw invalidCursor();
    const given = Buffer.from(m[2]!, 'base64url');
    const want = this.mac(m[1]!, context);
    if (given.length !== want.length || !timingSafeEqual(given, want)) throw invalidCursor();
    let p: unknown;
    try {
      p = JSON.parse(Buffer.from(m[1]!, 'base64url').toString('utf8'));
    } catch {
      throw invalidCursor();
    }
    const o = p as Partial<Position>;
    if (typeof o.t !== 'string' || typeof o.i !== 'string' || (o.d !== 'n' && o.d !== 'p'))
      throw invalidCursor();
    return { t: o.t, i: o.i, d: o.d };
  }
}
