// A small reader of PDF objects for the decompression check: finds every `N G obj`, parses its
// value (dictionaries, arrays, names, numbers, references; strings are skipped over) and, for
// streams, where the body is. It trusts nothing: no cross-reference table is read, a /Length that
// does not land on `endstream` is ignored in favour of the keyword, and anything it cannot parse is
// skipped (pdf-lib judges the file's structure afterwards; this only has to find what decodes).

export class Name {
  readonly name: string;
  constructor(name: string) {
    this.name = name;
  }
}
export class Ref {
  readonly num: number;
  constructor(num: number) {
    this.num = num;
  }
}
/** A string's content is not needed here, only that it is one. */
export class Str {}
export type PdfValue = null | boolean | number | Name | Ref | Str | PdfValue[] | PdfDict;
export type PdfDict = Map<string, PdfValue>;

export interface StreamObject {
  /** Object number (0 for a stream found by its keywords alone). */
  num: number;
  dict: PdfDict;
  start: number;
  /** Body end by the `endstream` keyword, used when /Length does not fit. */
  keywordEnd: number;
}

export class ParseError extends Error {}

const MAX_NESTING = 64;

/** PDF white-space characters (ISO 32000-1, 7.2.2). */
export const isSpace = (c: number) =>
  c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09 || c === 0x0c || c === 0x00;
/** PDF delimiters (ISO 32000-1, 7.2.2), the parentheses of strings, brackets and angle brackets. */
export const isDelim = (c: number) =>
  c === 0x28 ||
  c === 0x29 ||
  c === 0x3c ||
  c === 0x3e ||
  c === 0x5b ||
  c === 0x5d ||
  c === 0x2f ||
  c === 0x25;

/** Parses one value of `s` (latin1 text of the file) at `pos`; returns it and the position after it. */
export class Parser {
  pos = 0;
  private readonly s: string;
  constructor(s: string) {
    this.s = s;
  }

  skip(): void {
    const s = this.s;
    for (;;) {
      const c = s.charCodeAt(this.pos);
      if (isSpace(c)) this.pos++;
      else if (c === 0x25) {
        while (this.pos < s.length && s[this.pos] !== '\n' && s[this.pos] !== '\r') this.pos++;
      } else return;
    }
  }

  value(depth = 0): PdfValue {
    if (depth > MAX_NESTING) throw new ParseError('objects nested too deeply');
    this.skip();
    const s = this.s;
    const c = s[this.pos];
    if (c === undefined) throw new ParseError('unexpected end of file');
    if (s.startsWith('<<', this.pos)) {
      this.pos += 2;
      const d: PdfDict = new Map();
      for (;;) {
        this.skip();
        if (s.startsWith('>>', this.pos)) {
          this.pos += 2;
          return d;
        }
        const key = this.value(depth + 1);
        if (!(key instanceof Name)) throw new ParseError('a dictionary key is not a name');
        d.set(key.name, this.value(depth + 1));
      }
    }
    if (c === '[') {
      this.pos++;
      const a: PdfValue[] = [];
      for (;;) {
        this.skip();
        if (s[this.pos] === ']') {
          this.pos++;
          return a;
        }
        a.push(this.value(depth + 1));
      }
    }
    if (c === '<') {
      const end = s.indexOf('>', this.pos);
      if (end < 0) throw new ParseError('unterminated hex string');
      this.pos = end + 1;
      return new Str();
    }
    if (c === '(') {
      let nest = 0;
      for (; this.pos < s.length; this.pos++) {
        const ch = s[this.pos];
        if (ch === '\\') this.pos++;
        else if (ch === '(') nest++;
        else if (ch === ')' && --nest === 0) {
          this.pos++;
          return new Str();
        }
      }
      throw new ParseError('unterminated string');
    }
    if (c === '/') {
      let end = this.pos + 1;
      while (end < s.length && !isSpace(s.charCodeAt(end)) && !isDelim(s.charCodeAt(end))) end++;
      const raw = s.slice(this.pos + 1, end);
      this.pos = end;
      return new Name(
        raw.replace(/#([0-9a-fA-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))),
      );
    }
    const num = /[+-]?(?:\d+\.?\d*|\.\d+)/y;
    num.lastIndex = this.pos;
    const m = num.exec(s);
    if (m) {
      this.pos += m[0].length;
      if (/^\d+$/.test(m[0])) {
        const ref = /\s+(\d+)\s+R(?![^\s()<>[\]{}/%])/y;
        ref.lastIndex = this.pos;
        if (ref.exec(s)) {
          this.pos = ref.lastIndex;
          return new Ref(Number(m[0]));
        }
      }
      return Number(m[0]);
    }
    const word = /[a-zA-Z]+/y;
    word.lastIndex = this.pos;
    const w = word.exec(s);
    if (w) {
      this.pos += w[0].length;
      if (w[0] === 'true') return true;
      if (w[0] === 'false') return false;
      if (w[0] === 'null') return null;
      // The keywords that end an object mean this one is broken; any other word, and any stray
      // character below, is skipped as PDFium's lenient parser does, so that the rest of the
      // dictionary (its /Filter) is still read.
      if (/^(?:obj|endobj|stream|endstream|xref|trailer)$/.test(w[0]))
        throw new ParseError(`unexpected keyword ${w[0]}`);
      return null;
    }
    this.pos++;
    return null;
  }
}

/**
 * Every top-level object of the file: the non-stream values by number (the last definition wins,
 * as an incremental update's would; of the others, the longest is kept in `others`, since without
 * reading the cross-reference table nothing says which one a renderer takes) and every stream with its dictionary and body position.
 * Stream bodies found by their keywords outside any parsed object are returned with number 0 and
 * an empty dictionary.
 */
export function scanObjects(s: string): {
  values: Map<number, PdfValue>;
  others: Map<number, PdfValue>;
  streams: StreamObject[];
} {
  const values = new Map<number, PdfValue>();
  const others = new Map<number, PdfValue>();
  const streams: StreamObject[] = [];
  // Bounded digit runs: a long run of digits must not make the search quadratic.
  const header = /(\d{1,10})\s+\d{1,5}\s+obj\b/g;
  const p = new Parser(s);
  let m: RegExpExecArray | null;
  while ((m = header.exec(s))) {
    const num = Number(m[1]);
    p.pos = header.lastIndex;
    let v: PdfValue;
    try {
      v = p.value();
    } catch {
      continue; // not an object after all, or a broken one: pdf-lib will say
    }
    p.skip();
    if (v instanceof Map && s.startsWith('stream', p.pos)) {
      const start = bodyStart(s, p.pos + 6);
      const kw = s.indexOf('endstream', start);
      const keywordEnd = kw < 0 ? s.length : trimEol(s, start, kw);
      const stream: StreamObject = { num, dict: v, start, keywordEnd };
      streams.push(stream);
      // Continue after the body, so that bytes inside it are not taken for objects.
      const len = v.get('Length');
      const end = typeof len === 'number' ? fitsLength(s, start, len) : null;
      header.lastIndex = end ?? (kw < 0 ? s.length : kw + 9);
    } else {
      const old = values.get(num);
      if (old !== undefined) keepLongest(others, num, old);
      values.set(num, v);
      header.lastIndex = p.pos;
    }
  }
  // Bodies whose object could not be parsed: PDFium's repair may still find and decode them.
  const covered = new Set(streams.map((x) => x.start));
  let at = 0;
  for (;;) {
    const k = s.indexOf('stream', at);
    if (k < 0) break;
    at = k + 6;
    if (s.startsWith('end', k - 3)) continue;
    const start = bodyStart(s, at);
    if (start === at) continue;
    const kw = s.indexOf('endstream', start);
    if (kw < 0) break;
    if (!covered.has(start))
      streams.push({ num: 0, dict: new Map(), start, keywordEnd: trimEol(s, start, kw) });
    at = kw + 9;
  }
  return { values, others, streams };
}

function bodyStart(s: string, at: number): number {
  if (s[at] === '\r') at++;
  if (s[at] === '\n') at++;
  return at;
}

function trimEol(s: string, start: number, kw: number): number {
  let end = kw;
  if (end > start && s[end - 1] === '\n') end--;
  if (end > start && s[end - 1] === '\r') end--;
  return end;
}

/** Where a body of `len` bytes ends, when `endstream` follows it (after white space); else null. */
export function fitsLength(s: string, start: number, len: number): number | null {
  if (!Number.isSafeInteger(len) || len < 0 || start + len > s.length) return null;
  let i = start + len;
  while (i < s.length && isSpace(s.charCodeAt(i))) i++;
  return s.startsWith('endstream', i) ? start + len : null;
}

/** Keeps, of an object's other definitions, the longest (an array by its length, anything else as 1). */
export function keepLongest(others: Map<number, PdfValue>, num: number, v: PdfValue): void {
  const len = (x: PdfValue | undefined) =>
    Array.isArray(x) ? x.length : x === undefined || x === null ? 0 : 1;
  if (len(v) > len(others.get(num))) others.set(num, v);
}
