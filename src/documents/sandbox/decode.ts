// Streaming decoders of the PDF filters that expand data, for counting what a stream decodes to
// without ever holding it: each is an async generator from chunks to chunks of at most CHUNK
// bytes, so that a counter placed after it can stop the whole chain at the first chunk past a
// budget. Corrupt data ends a decoder quietly: what was decoded up to there counts, as PDFium
// renders what it could decode.
import { Readable } from 'node:stream';
import { createInflate, createInflateRaw, constants as zc } from 'node:zlib';

export type Stage = (src: AsyncIterable<Buffer>) => AsyncGenerator<Buffer>;

export const CHUNK = 64 * 1024;

/** A body cut in CHUNK slices (no copy). */
export async function* slices(body: Buffer): AsyncGenerator<Buffer> {
  for (let i = 0; i < body.length; i += CHUNK) yield body.subarray(i, Math.min(body.length, i + CHUNK));
}

/** An error that must pass through the decoders (a budget refusal), not be taken for corrupt data. */
export class StopDecoding extends Error {}

/** The chunks of `it` with `head` (already taken from it) put back in front; closes `it` when done. */
export async function* prepend(head: Buffer, it: AsyncIterator<Buffer>): AsyncGenerator<Buffer> {
  try {
    yield head;
    for (;;) {
      const r = await it.next();
      if (r.done) return;
      yield r.value;
    }
  } finally {
    await it.return?.();
  }
}

/** Collects decoder output into CHUNK-sized buffers; `ready` holds the full ones. */
class Out {
  private buf = Buffer.allocUnsafe(CHUNK);
  private n = 0;
  ready: Buffer[] = [];

  byte(b: number): void {
    if (this.n === CHUNK) this.spill();
    this.buf[this.n++] = b;
  }
  fill(b: number, count: number): void {
    while (count > 0) {
      if (this.n === CHUNK) this.spill();
      const k = Math.min(count, CHUNK - this.n);
      this.buf.fill(b, this.n, this.n + k);
      this.n += k;
      count -= k;
    }
  }
  copy(src: Uint8Array, from: number, to: number): void {
    while (from < to) {
      if (this.n === CHUNK) this.spill();
      const k = Math.min(to - from, CHUNK - this.n);
      this.buf.set(src.subarray(from, from + k), this.n);
      this.n += k;
      from += k;
    }
  }
  private spill(): void {
    this.ready.push(this.buf);
    this.buf = Buffer.allocUnsafe(CHUNK);
    this.n = 0;
  }
  /** The full chunks, then (at the end) the partial one. */
  take(final = false): Buffer[] {
    const r = this.ready;
    this.ready = [];
    if (final && this.n > 0) {
      r.push(this.buf.subarray(0, this.n));
      this.n = 0;
    }
    return r;
  }
}

/** Compressed bytes handed to zlib at a time (see flate). */
const FLATE_IN = 16 * 1024;

/** The chunks of `src` cut to at most `size` bytes (no copy). */
async function* reslice(src: AsyncIterable<Buffer>, size: number): AsyncGenerator<Buffer> {
  for await (const c of src) for (let i = 0; i < c.length; i += size) yield c.subarray(i, i + size);
}

/** Whether data starts with a zlib header (deflate, window up to 32 KiB, check bits right). */
export function isZlibHeader(b: Uint8Array): boolean {
  const b0 = b[0];
  return b0 !== undefined && (b0 & 0x0f) === 8 && b0 >> 4 <= 7 && ((b0 << 8) | (b[1] ?? 0)) % 31 === 0;
}

/**
 * FlateDecode: zlib data (or raw deflate when the first two bytes are no zlib header), through
 * node:zlib. A missing or wrong checksum, a cut-off end or trailing garbage end the data where
 * the deflate stream ends or breaks, like PDFium.
 */
export const flate: Stage = async function* (src) {
  const it = src[Symbol.asyncIterator]();
  let head = Buffer.alloc(0);
  while (head.length < 2) {
    const r = await it.next();
    if (r.done) break;
    head = Buffer.concat([head, r.value]);
  }
  if (head.length === 0) return;
  const zlibHeader = isZlibHeader(head);
  const opts = { finishFlush: zc.Z_SYNC_FLUSH, chunkSize: CHUNK };
  const z = zlibHeader ? createInflate(opts) : createInflateRaw(opts);
  // Deflate expands at most about 1032 times, and zlib turns a whole written chunk into output
  // before it looks at the reader again: input goes in FLATE_IN slices, so one write can produce
  // about 16 MiB, not 64 MiB, before the counter after this stage can stop the chain (smaller slices
  // cost time: 1 KiB ones made inflating three times slower, for no lower peak).
  const input = Readable.from(reslice(prepend(head, it), FLATE_IN), {
    objectMode: false,
    highWaterMark: FLATE_IN,
  });
  input.on('error', (e) => z.destroy(e));
  input.pipe(z);
  try {
    for await (const c of z) yield c as Buffer;
  } catch (e) {
    if (e instanceof StopDecoding) throw e;
    // corrupt deflate data: what came out before it broke is the stream's content
  } finally {
    input.destroy();
    z.destroy();
  }
};

const hexValue = (c: number) =>
  c >= 0x30 && c <= 0x39
    ? c - 0x30
    : c >= 0x41 && c <= 0x46
      ? c - 0x37
      : c >= 0x61 && c <= 0x66
        ? c - 0x57
        : -1;

/** ASCIIHexDecode: pairs of hex digits up to `>`; other characters are skipped; an odd last digit is padded with 0. */
export const asciiHex: Stage = async function* (src) {
  const out = new Out();
  let hi = -1;
  for await (const c of src) {
    for (const b of c) {
      if (b === 0x3e) {
        if (hi >= 0) out.byte(hi << 4);
        yield* out.take(true);
        return;
      }
      const v = hexValue(b);
      if (v < 0) continue;
      if (hi < 0) hi = v;
      else {
        out.byte((hi << 4) | v);
        hi = -1;
      }
    }
    yield* out.take();
  }
  if (hi >= 0) out.byte(hi << 4);
  yield* out.take(true);
};

/** ASCII85Decode: groups of five characters `!`..`u` to four bytes, `z` for four zeros, up to `~>`. */
export const ascii85: Stage = async function* (src) {
  const out = new Out();
  let tuple = 0;
  let k = 0;
  const group = (n: number) => {
    // n characters (2..5) give n - 1 bytes; a short group is padded with `u`.
    for (let i = n; i < 5; i++) tuple = tuple * 85 + 84;
    const v = tuple % 2 ** 32;
    for (let i = 0; i < n - 1; i++) out.byte(Math.floor(v / 2 ** (24 - 8 * i)) & 0xff);
    tuple = 0;
    k = 0;
  };
  for await (const c of src) {
    for (const b of c) {
      if (b === 0x7e) {
        if (k > 1) group(k);
        yield* out.take(true);
        return;
      }
      if (b === 0x7a && k === 0) {
        out.fill(0, 4);
        continue;
      }
      if (b < 0x21 || b > 0x75) continue;
      tuple = tuple * 85 + (b - 33);
      if (++k === 5) group(5);
      if (out.ready.length > 0) yield* out.take();
    }
    yield* out.take();
  }
  if (k > 1) group(k);
  yield* out.take(true);
};

/** RunLengthDecode: a length byte L, then L + 1 literal bytes (L < 128) or one byte repeated 257 - L times (L > 128); 128 ends. */
export const runLength: Stage = async function* (src) {
  const out = new Out();
  let literal = 0; // literal bytes still to copy
  let repeat = 0; // count waiting for its byte
  for await (const c of src) {
    let i = 0;
    while (i < c.length) {
      if (literal > 0) {
        const k = Math.min(literal, c.length - i);
        out.copy(c, i, i + k);
        literal -= k;
        i += k;
      } else if (repeat > 0) {
        out.fill(c[i++]!, repeat);
        repeat = 0;
      } else {
        const len = c[i++]!;
        if (len === 128) {
          yield* out.take(true);
          return;
        }
        if (len < 128) literal = len + 1;
        else repeat = 257 - len;
      }
      if (out.ready.length > 0) yield* out.take();
    }
  }
  yield* out.take(true);
};

/** LZWDecode: 9- to 12-bit codes, 256 clears the table, 257 ends; `earlyChange` as in /DecodeParms (default 1). */
export function lzw(earlyChange: number): Stage {
  return async function* (src) {
    const out = new Out();
    const prefix = new Int32Array(4096);
    const suffix = new Uint8Array(4096);
    const length = new Uint16Array(4096);
    for (let i = 0; i < 256; i++) {
      prefix[i] = -1;
      suffix[i] = i;
      length[i] = 1;
    }
    const str = new Uint8Array(4096);
    let next = 258;
    let width = 9;
    let prev = -1;
    let bits = 0;
    let nbits = 0;
    /** Writes the string of `code` to the output; returns its first byte. */
    const emit = (code: number): number => {
      const n = length[code]!;
      for (let i = n - 1, c = code; i >= 0; i--, c = prefix[c]!) str[i] = suffix[c]!;
      out.copy(str, 0, n);
      return str[0]!;
    };
    for await (const c of src) {
      for (const b of c) {
        bits = ((bits << 8) | b) & 0xffffff;
        nbits += 8;
        while (nbits >= width) {
          const code = (bits >>> (nbits - width)) & ((1 << width) - 1);
          nbits -= width;
          if (code === 256) {
            next = 258;
            width = 9;
            prev = -1;
            continue;
          }
          if (code === 257) {
            yield* out.take(true);
            return;
          }
          let first: number;
          if (code < next && (code < 256 || prev >= 0 || code >= 258)) {
            first = emit(code);
          } else if (code === next && prev >= 0) {
            first = emit(prev);
            out.byte(first);
          } else {
            yield* out.take(true); // corrupt: a code not in the table
            return;
          }
          if (prev >= 0 && next < 4096) {
            prefix[next] = prev;
            suffix[next] = first;
            length[next] = length[prev]! + 1;
            next++;
            if (next + earlyChange >= 1 << width && width < 12) width++;
          }
          prev = code;
        }
        if (out.ready.length > 0) yield* out.take();
      }
    }
    yield* out.take(true);
  };
}
