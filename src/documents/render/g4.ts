// ITU-T T.6 (MMR, "Group 4") encoder for bilevel fax images, written from the recommendation:
// two-dimensional coding of every line against the line above (the first line against an imaginary
// all-white line), with pass, horizontal and vertical modes, Modified Huffman run-length codes in
// horizontal mode, and EOFB at the end. Pixels: packed rows, most significant bit first, 1 = black.

/** Codes as [value, length] pairs, indexed by run length (terminating: 0..63). */
type Code = readonly [number, number];

const bits = (s: string): Code => [parseInt(s, 2), s.length];

// T.4 Table 2: terminating codes, white runs 0..63.
const WHITE_TERM = [
  '00110101',
  '000111',
  '0111',
  '1000',
  '1011',
  '1100',
  '1110',
  '1111',
  '10011',
  '10100',
  '00111',
  '01000',
  '001000',
  '000011',
  '110100',
  '110101',
  '101010',
  '101011',
  '0100111',
  '0001100',
  '0001000',
  '0010111',
  '0000011',
  '0000100',
  '0101000',
  '0101011',
  '0010011',
  '0100100',
  '0011000',
  '00000010',
  '00000011',
  '00011010',
  '00011011',
  '00010010',
  '00010011',
  '00010100',
  '00010101',
  '00010110',
  '00010111',
  '00101000',
  '00101001',
  '00101010',
  '00101011',
  '00101100',
  '00101101',
  '00000100',
  '00000101',
  '00001010',
  '00001011',
  '01010010',
  '01010011',
  '01010100',
  '01010101',
  '00100100',
  '00100101',
  '01011000',
  '01011001',
  '01011010',
  '01011011',
  '01001010',
  '01001011',
  '00110010',
  '00110011',
  '00110100',
].map(bits);

// T.4 Table 2: terminating codes, black runs 0..63.
const BLACK_TERM = [
  '0000110111',
  '010',
  '11',
  '10',
  '011',
  '0011',
  '0010',
  '00011',
  '000101',
  '000100',
  '0000100',
  '0000101',
  '0000111',
  '00000100',
  '00000111',
  '000011000',
  '0000010111',
  '0000011000',
  '0000001000',
  '00001100111',
  '00001101000',
  '00001101100',
  '00000110111',
  '00000101000',
  '00000010111',
  '00000011000',
  '000011001010',
  '000011001011',
  '000011001100',
  '000011001101',
  '000001101000',
  '000001101001',
  '000001101010',
  '000001101011',
  '000011010010',
  '000011010011',
  '000011010100',
  '000011010101',
  '000011010110',
  '000011010111',
  '000001101100',
  '000001101101',
  '000011011010',
  '000011011011',
  '000001010100',
  '000001010101',
  '000001010110',
  '000001010111',
  '000001100100',
  '000001100101',
  '000001010010',
  '000001010011',
  '000000100100',
  '000000110111',
  '000000111000',
  '000000100111',
  '000000101000',
  '000001011000',
  '000001011001',
  '000000101011',
  '000000101100',
  '000001011010',
  '000001100110',
  '000001100111',
].map(bits);

// T.4 Table 3a: make-up codes for runs 64, 128, ... 1728 (index = run / 64 - 1).
const WHITE_MAKEUP = [
  '11011',
  '10010',
  '010111',
  '0110111',
  '00110110',
  '00110111',
  '01100100',
  '01100101',
  '01101000',
  '01100111',
  '011001100',
  '011001101',
  '011010010',
  '011010011',
  '011010100',
  '011010101',
  '011010110',
  '011010111',
  '011011000',
  '011011001',
  '011011010',
  '011011011',
  '010011000',
  '010011001',
  '010011010',
  '011000',
  '010011011',
].map(bits);

const BLACK_MAKEUP = [
  '0000001111',
  '000011001000',
  '000011001001',
  '000001011011',
  '000000110011',
  '000000110100',
  '000000110101',
  '0000001101100',
  '0000001101101',
  '0000001001010',
  '0000001001011',
  '0000001001100',
  '0000001001101',
  '0000001110010',
  '0000001110011',
  '0000001110100',
  '0000001110101',
  '0000001110110',
  '0000001110111',
  '0000001010010',
  '0000001010011',
  '0000001010100',
  '0000001010101',
  '0000001011010',
  '0000001011011',
  '0000001100100',
  '0000001100101',
].map(bits);

// T.4 Table 3b: extended make-up codes (both colours), runs 1792 .. 2560 (index = run / 64 - 28).
const EXT_MAKEUP = [
  '00000001000',
  '00000001100',
  '00000001101',
  '000000010010',
  '000000010011',
  '000000010100',
  '000000010101',
  '000000010110',
  '000000010111',
  '000000011100',
  '000000011101',
  '000000011110',
  '000000011111',
].map(bits);

/** The code tables, exported so a test can check that each colour's code set is prefix-free. */
export const codeTables = { WHITE_TERM, BLACK_TERM, WHITE_MAKEUP, BLACK_MAKEUP, EXT_MAKEUP };

// T.4 Table 4 / T.6 Table 1: two-dimensional mode codes.
const PASS = bits('0001');
const HORIZONTAL = bits('001');
/** Vertical modes, indexed by a1 - b1 + 3 (VL3 .. V0 .. VR3). */
const VERTICAL = ['0000010', '000010', '010', '1', '011', '000011', '0000011'].map(bits);
const EOL = bits('000000000001');

/** A growing big-endian bit stream. */
class BitWriter {
  private buf: Uint8Array;
  private pos = 0;
  private acc = 0; // pending bits, right-aligned
  private n = 0; // number of pending bits (< 8 between calls)
  constructor(initial: number) {
    this.buf = new Uint8Array(Math.max(initial, 64));
  }
  put(code: Code): void {
    this.acc = (this.acc << code[1]) | code[0];
    this.n += code[1];
    while (this.n >= 8) {
      this.n -= 8;
      if (this.pos === this.buf.length) this.grow();
      this.buf[this.pos++] = (this.acc >>> this.n) & 0xff;
    }
    this.acc &= (1 << this.n) - 1;
  }
  private grow(): void {
    const next = new Uint8Array(this.buf.length * 2);
    next.set(this.buf);
    this.buf = next;
  }
  /** Pads the last byte with zeros and returns the bytes written. */
  finish(): Uint8Array {
    if (this.n > 0) this.put([0, 8 - this.n]);
    return this.buf.slice(0, this.pos);
  }
}

function putRun(w: BitWriter, run: number, black: boolean): void {
  const term = black ? BLACK_TERM : WHITE_TERM;
  while (run >= 2624) {
    w.put(EXT_MAKEUP[12]!); // 2560
    run -= 2560;
  }
  if (run >= 64) {
    const m = run >> 6; // 1 .. 40
    w.put(m <= 27 ? (black ? BLACK_MAKEUP : WHITE_MAKEUP)[m - 1]! : EXT_MAKEUP[m - 28]!);
    run &= 63;
  }
  w.put(term[run]!);
}

/**
 * Positions where the colour changes along a packed row (the "changing elements"), starting from
 * white: entries at even indexes turn black, odd ones turn white. Ends with three copies of `width`
 * so b1/b2 and a1/a2 lookups never run off the end. Returns the number of real changes.
 */
function changes(
  row: Uint8Array,
  off: number,
  width: number,
  out: Int32Array,
  words: Uint32Array | null,
): number {
  let n = 0;
  let last = 0; // the colour of the pixel before (1 = black), white before the row
  const bytes = (width + 7) >> 3;
  // Pixels past the width in the last byte are not looked at.
  const tailMask = width & 7 ? (0xff00 >> (width & 7)) & 0xff : 0xff;
  // With a word view (rows 4-byte aligned), four bytes of one colour with the pixel before are
  // skipped at once: most of a fax page is white.
  const wholeWords = words ? (bytes - 1) >> 2 : 0;
  let i = 0;
  while (i < bytes) {
    if ((i & 3) === 0 && i >> 2 < wholeWords) {
      if (words![(off + i) >> 2] === (last ? 0xffffffff : 0)) {
        i += 4;
        continue;
      }
    }
    const b = row[off + i]!;
    if (b !== (last ? 0xff : 0x00)) {
      // A bit set where a pixel differs from the one before it; taken most significant (leftmost) first.
      let t = (b ^ ((b >> 1) | (last << 7))) & (i === bytes - 1 ? tailMask : 0xff);
      while (t !== 0) {
        const k = Math.clz32(t) - 24;
        out[n++] = (i << 3) + k;
        t ^= 0x80 >> k;
      }
      last = b & 1;
    }
    i++;
  }
  out[n] = width;
  out[n + 1] = width;
  out[n + 2] = width;
  return n;
}

/**
 * Encodes one page with T.6. `rows` holds `height` packed rows of `stride` bytes (stride >= width/8),
 * 1 = black. Returns the compressed bytes, ending with EOFB and padded to a byte.
 */
export function encodeT6(
  rows: Uint8Array,
  width: number,
  height: number,
  stride = (width + 7) >> 3,
): Uint8Array {
  const w = new BitWriter((stride * height) >> 3);
  const words =
    rows.byteOffset % 4 === 0 && stride % 4 === 0 && rows.length >= stride * height
      ? new Uint32Array(rows.buffer, rows.byteOffset, (stride * height) >> 2)
      : null;
  let ref = new Int32Array(width + 4);
  let cur = new Int32Array(width + 4);
  ref[0] = width; // the imaginary white line above the first one
  ref[1] = width;
  ref[2] = width;
  for (let y = 0; y < height; y++) {
    changes(rows, y * stride, width, cur, words);
    let a0 = -1;
    let i = 0; // index in cur of a1 (its parity is the colour of the run starting at a0: even = white)
    let j = 0; // index in ref: first changing element to the right of a0
    while (a0 < width) {
      while (ref[j]! <= a0 && ref[j]! < width) j++;
      // b1 must have the opposite colour to a0's: black changes sit at even indexes. (j itself
      // stays put: after a colour flip the element skipped here can be the next b1.)
      const k = (j & 1) === (i & 1) ? j : j + 1;
      const b1 = ref[k]!;
      const b2 = ref[k + 1]!;
      const a1 = cur[i]!;
      if (b2 < a1) {
        w.put(PASS);
        a0 = b2;
      } else {
        const d = a1 - b1;
        if (d >= -3 && d <= 3) {
          w.put(VERTICAL[d + 3]!);
          a0 = a1;
          i++;
        } else {
          const a2 = cur[i + 1]!;
          const black = (i & 1) === 1;
          w.put(HORIZONTAL);
          putRun(w, a1 - (a0 < 0 ? 0 : a0), black);
          putRun(w, a2 - a1, !black);
          a0 = a2;
          i += 2;
        }
      }
    }
    const t = ref;
    ref = cur;
    cur = t;
  }
  w.put(EOL);
  w.put(EOL);
  return w.finish();
}
