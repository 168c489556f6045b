// The decompression check: every stream of the file decoded through its whole filter chain while
// counting, stopped at the first chunk past a budget (per stream, per document), before any parser
// decodes anything. Object streams are decoded first (their objects can hold the /Filter,
// /DecodeParms and /Length of other streams). Nothing decoded is kept, except object streams.
import { DocumentError } from '../errors.ts';
import { scanInlineImages } from './inline.ts';
import {
  type Stage,
  StopDecoding,
  ascii85,
  asciiHex,
  flate,
  isZlibHeader,
  lzw,
  prepend,
  runLength,
  slices,
} from './decode.ts';
import {
  Name,
  Parser,
  type PdfDict,
  type PdfValue,
  Ref,
  type StreamObject,
  fitsLength,
  keepLongest,
  scanObjects,
} from './objects.ts';

export interface DecodeLimits {
  /** Decoded bytes of one stream (every filter's output counted). */
  maxStreamBytes: number;
  /** Decoded bytes of all streams of the document together. */
  maxDecodedBytes: number;
}

/** Filters in one stream's chain; a longer chain is refused (no real producer writes more than two). */
export const MAX_FILTER_CHAIN = 4;
/** An object stream is kept in memory to read its objects; real ones are a few hundred KiB. */
export const MAX_OBJECT_STREAM_BYTES = 32 * 1024 * 1024;

const BOMB = 'pdf_decompression_bomb';
const IMAGE_TOO_LARGE = 'pdf_image_too_large';

const aliases: Record<string, string> = {
  Fl: 'FlateDecode',
  AHx: 'ASCIIHexDecode',
  A85: 'ASCII85Decode',
  LZW: 'LZWDecode',
  RL: 'RunLengthDecode',
  CCF: 'CCITTFaxDecode',
  DCT: 'DCTDecode',
};
/** Image codecs end a chain: their output is what the image dictionary declares. */
const imageCodecs = new Set(['DCTDecode', 'JPXDecode', 'JBIG2Decode', 'CCITTFaxDecode']);

/** Decoded bytes of the whole document, or a DocumentError past a budget. */
export async function countDecoded(
  buf: Buffer,
  text: string,
  name: string,
  limits: DecodeLimits,
): Promise<number> {
  const { values, others, streams } = scanObjects(text);
  const lookup = (v: PdfValue | undefined): PdfValue | undefined => {
    for (let i = 0; i < 8 && v instanceof Ref; i++) v = values.get(v.num);
    return v instanceof Ref ? undefined : v;
  };
  let total = 0;

  const decode = async (s: StreamObject, keep: number): Promise<Buffer | null> => {
    const body = bodyOf(buf, text, s, lookup);
    // A body outside any readable object has no dictionary to say how it decodes: it is taken
    // through Flate and ASCIIHex for as long as its data looks like theirs (sniffed below).
    const chain = s.num > 0 ? filtersOf(s.dict, lookup, others) : [];
    const label = s.num > 0 ? `object ${s.num}` : 'a stream';
    // Whatever its filters, the renderer allocates what an image's dictionary declares.
    if (isImage(s.dict, lookup)) imageWithinLimit(s.dict, lookup, name, limits.maxStreamBytes);
    if (chain.length > MAX_FILTER_CHAIN)
      throw new DocumentError(
        BOMB,
        `${name}: ${label} is decoded through ${chain.length} filters (${chain.map((f) => f.name).join(', ')}); at most ${MAX_FILTER_CHAIN} are accepted (decompression bomb)`,
      );
    let streamBytes = 0;
    const count = (n: number) => {
      streamBytes += n;
      total += n;
      if (streamBytes > limits.maxStreamBytes)
        throw new StopDecoding(
          `${name}: ${label}, ${body.length} bytes in the file (filters ${chain.map((f) => f.name).join(', ') || 'none'}), decodes to more than ${limits.maxStreamBytes} bytes, the limit per stream (decompression bomb)`,
        );
      if (total > limits.maxDecodedBytes)
        throw new StopDecoding(
          `${name}: its streams decode to more than ${limits.maxDecodedBytes} bytes in total, the limit per document (decompression bomb); passed at ${label} (${body.length} bytes in the file, filters ${chain.map((f) => f.name).join(', ') || 'none'})`,
        );
    };
    let data: AsyncIterable<Buffer> = slices(body);
    if (s.num === 0) data = sniffed(MAX_FILTER_CHAIN, count)(data);
    let terminal: string | null = null;
    for (const f of chain) {
      const stage = stageOf(f);
      if (stage === 'end') {
        data = counted(data, count); // what reaches it, the encoded size, counts
        break;
      }
      if (stage === 'image') {
        terminal = stage;
        break;
      }
      data = counted(stage(data), count);
    }
    const kept: Buffer[] = [];
    let keptBytes = 0;
    try {
      if (keep === 0 && terminal === null && contentLike(s.dict, lookup)) {
        await scanInlineImages(data, {
          chain: (dict) => {
            const fs = filtersOf(dict, lookup, others);
            if (fs.length > MAX_FILTER_CHAIN)
              throw new StopDecoding(
                `${name}: an inline image in ${label} is decoded through ${fs.length} filters (${fs.map((f) => f.name).join(', ')}); at most ${MAX_FILTER_CHAIN} are accepted (decompression bomb)`,
              );
            const stages: Stage[] = [];
            let image = false;
            for (const f of fs) {
              const st = stageOf(f);
              if (st === 'image') image = true;
              if (typeof st === 'string') break;
              stages.push(st);
            }
            const decode =
              stages.length === 0
                ? null
                : (src: AsyncIterable<Buffer>) =>
                    stages.reduce<AsyncIterable<Buffer>>((acc, st) => counted(st(acc), count), src);
            return { decode, image };
          },
          declared: (dict) => {
            const n = declaredImageBytes(dict, lookup);
            if (!Number.isFinite(n) || n > limits.maxStreamBytes)
              throw new DocumentError(
                IMAGE_TOO_LARGE,
                `${name}: an inline image in ${label} declares ${String(lookup(dict.get('Width')))} x ${String(lookup(dict.get('Height')))} pixels, more than ${limits.maxStreamBytes} bytes decoded`,
              );
            count(n);
          },
        });
      } else
        for await (const c of data) {
          if (keep > 0) {
            keptBytes += c.length;
            if (keptBytes > keep)
              throw new StopDecoding(
                `${name}: ${label}, an object stream, decodes to more than ${keep} bytes (decompression bomb)`,
              );
            kept.push(Buffer.from(c));
          }
        }
    } catch (e) {
      if (e instanceof StopDecoding) throw new DocumentError(BOMB, e.message);
      throw e;
    }
    if (terminal === 'image') {
      const declared = imageWithinLimit(s.dict, lookup, name, limits.maxStreamBytes);
      try {
        count(declared);
      } catch (e) {
        if (e instanceof StopDecoding) throw new DocumentError(BOMB, e.message);
        throw e;
      }
    }
    return keep > 0 ? Buffer.concat(kept) : null;
  };

  // Object streams first, in file order, then again for those whose dictionary pointed into a
  // later one; their objects fill numbers not defined at the top level.
  const objStms = streams.filter(
    (s) =>
      lookup(s.dict.get('Type')) instanceof Name && (lookup(s.dict.get('Type')) as Name).name === 'ObjStm',
  );
  const done = new Set<StreamObject>();
  for (let round = 0; round < 3 && done.size < objStms.length; round++) {
    for (const s of objStms) {
      if (done.has(s) || (round < 2 && !resolvable(s.dict, lookup))) continue;
      done.add(s);
      const data = await decode(s, MAX_OBJECT_STREAM_BYTES);
      if (data) readObjectStream(data, s.dict, lookup, values, others);
    }
  }
  for (const s of streams) if (!done.has(s)) await decode(s, 0);
  return total;
}

/** A counter placed after a decoder. */
async function* counted(src: AsyncIterable<Buffer>, count: (n: number) => void): AsyncGenerator<Buffer> {
  for await (const c of src) {
    count(c.length);
    yield c;
  }
}

interface Filter {
  name: string;
  parms: PdfDict | null;
}

/**
 * The stream's filters. When its /Filter is a reference to an object defined more than once (the
 * cross-reference table, not read here, says which one counts), the longest chain is taken.
 */
function filtersOf(
  dict: PdfDict,
  lookup: (v: PdfValue | undefined) => PdfValue | undefined,
  others: Map<number, PdfValue>,
): Filter[] {
  const raw = dict.get('Filter');
  let f = lookup(raw);
  if (raw instanceof Ref && others.has(raw.num)) {
    const alt = lookup(others.get(raw.num));
    const len = (v: PdfValue | undefined) =>
      Array.isArray(v) ? v.length : v === undefined || v === null ? 0 : 1;
    if (len(alt) > len(f)) f = alt;
  }
  const p = lookup(dict.get('DecodeParms') ?? dict.get('DP'));
  const names = Array.isArray(f) ? f.map(lookup) : f === undefined || f === null ? [] : [f];
  const parms = Array.isArray(p) ? p.map(lookup) : [p];
  return names.map((n, i) => {
    const q = parms[i];
    const name = n instanceof Name ? (aliases[n.name] ?? n.name) : '(not a name)';
    return { name, parms: q instanceof Map ? q : null };
  });
}

/** The decoder of a filter; 'image' for image codecs; 'end' for a filter that is not decoded. */
function stageOf(f: Filter): Stage | 'image' | 'end' {
  switch (f.name) {
    case 'FlateDecode':
      return flate;
    case 'ASCIIHexDecode':
      return asciiHex;
    case 'ASCII85Decode':
      return ascii85;
    case 'RunLengthDecode':
      return runLength;
    case 'LZWDecode': {
      const e = f.parms?.get('EarlyChange');
      return lzw(typeof e === 'number' ? e : 1);
    }
    default:
      // Image codecs: what the dictionary declares. Anything else (Crypt, unknown names) is not
      // decoded by PDFium either: the bytes up to it are what counts.
      return imageCodecs.has(f.name) ? 'image' : 'end';
  }
}

function isImage(dict: PdfDict, lookup: (v: PdfValue | undefined) => PdfValue | undefined): boolean {
  const sub = lookup(dict.get('Subtype'));
  return sub instanceof Name && sub.name === 'Image';
}

/** The image's declared decoded size, or a DocumentError when it is above `max`. */
function imageWithinLimit(
  dict: PdfDict,
  lookup: (v: PdfValue | undefined) => PdfValue | undefined,
  name: string,
  max: number,
): number {
  const declared = declaredImageBytes(dict, lookup);
  if (!Number.isFinite(declared) || declared > max)
    throw new DocumentError(
      IMAGE_TOO_LARGE,
      `${name}: an image declares ${String(lookup(dict.get('Width')))} x ${String(lookup(dict.get('Height')))} pixels, more than ${max} bytes decoded`,
    );
  return declared;
}

/** Width x Height x components x bits per component, as the renderer allocates it. */
function declaredImageBytes(
  dict: PdfDict,
  lookup: (v: PdfValue | undefined) => PdfValue | undefined,
): number {
  const num = (k: string) => {
    const v = lookup(dict.get(k));
    return typeof v === 'number' ? v : 0;
  };
  const mask = lookup(dict.get('ImageMask')) === true;
  const cs = lookup(dict.get('ColorSpace'));
  const csName = cs instanceof Name ? cs.name : '';
  // Gray 1, RGB 3; anything else (CMYK, ICC-based, indexed, …) counted as 4, the most there is.
  const comps = mask
    ? 1
    : csName === 'DeviceGray' || csName === 'G'
      ? 1
      : csName === 'DeviceRGB' || csName === 'RGB'
        ? 3
        : 4;
  const bpc = mask ? 1 : num('BitsPerComponent') || 8;
  return Math.ceil((num('Width') * num('Height') * comps * bpc) / 8);
}

/** Streams that can be content (page contents, forms, patterns, Type 3 glyphs), where inline images live. */
function contentLike(dict: PdfDict, lookup: (v: PdfValue | undefined) => PdfValue | undefined): boolean {
  const name = (k: string) => {
    const v = lookup(dict.get(k));
    return v instanceof Name ? v.name : undefined;
  };
  const sub = name('Subtype');
  const type = name('Type');
  if (sub !== undefined && sub !== 'Form') return false;
  if (type === 'ObjStm' || type === 'XRef' || type === 'Metadata' || type === 'EmbeddedFile') return false;
  return !dict.has('Length1') && !dict.has('Length2') && !dict.has('Length3');
}

function bodyOf(
  buf: Buffer,
  text: string,
  s: StreamObject,
  lookup: (v: PdfValue | undefined) => PdfValue | undefined,
): Buffer {
  const len = lookup(s.dict.get('Length'));
  const end = typeof len === 'number' ? fitsLength(text, s.start, len) : null;
  return buf.subarray(s.start, end ?? s.keywordEnd);
}

/** Whether every reference among the entries that steer decoding resolves already. */
function resolvable(dict: PdfDict, lookup: (v: PdfValue | undefined) => PdfValue | undefined): boolean {
  const ok = (v: PdfValue | undefined): boolean =>
    v instanceof Ref
      ? lookup(v) !== undefined && ok(lookup(v))
      : Array.isArray(v)
        ? v.every((x) => !(x instanceof Ref) || lookup(x) !== undefined)
        : true;
  return ['Filter', 'DecodeParms', 'Length'].every((k) => ok(dict.get(k)));
}

/** The objects of a decoded object stream (`/N` pairs of number and offset, then the objects from `/First`). */
function readObjectStream(
  data: Buffer,
  dict: PdfDict,
  lookup: (v: PdfValue | undefined) => PdfValue | undefined,
  values: Map<number, PdfValue>,
  others: Map<number, PdfValue>,
): void {
  const n = lookup(dict.get('N'));
  const first = lookup(dict.get('First'));
  if (typeof n !== 'number' || typeof first !== 'number' || n < 0 || first < 0) return;
  const s = data.toString('latin1');
  const head = s.slice(0, first).trim().split(/\s+/).map(Number);
  const p = new Parser(s);
  for (let i = 0; i + 1 < head.length && i < 2 * n; i += 2) {
    const num = head[i]!;
    const off = head[i + 1]!;
    if (!Number.isSafeInteger(num) || !Number.isSafeInteger(off)) continue;
    p.pos = first + off;
    try {
      const v = p.value();
      if (values.has(num)) keepLongest(others, num, v);
      else values.set(num, v);
    } catch {
      // a broken object: pdf-lib will say
    }
  }
}

/** Decodes, while its data looks like zlib or hex digits (at most `depth` times), a body with no dictionary. */
function sniffed(depth: number, count: (n: number) => void): Stage {
  return async function* (src) {
    const it = src[Symbol.asyncIterator]();
    const first = await it.next();
    if (first.done) return;
    const head = first.value;
    const rest = prepend(head, it);
    const decoder =
      depth <= 0
        ? null
        : isZlibHeader(head)
          ? flate
          : /^[0-9a-fA-F\s]{16}/.test(head.subarray(0, 16).toString('latin1'))
            ? asciiHex
            : null;
    if (!decoder) return yield* rest;
    yield* sniffed(depth - 1, count)(counted(decoder(rest), count));
  };
}
