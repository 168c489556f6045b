// Inline images (`BI <dictionary> ID <data> EI`) inside a content stream's decoded output: their
// data is part of the content stream, but their own filters expand it again, so each one with a
// decoding filter is fed to its decoders (which end at their own end-of-data marks, as PDFium's
// do) while counting, and an image codec counts what its dictionary declares.
import { once } from 'node:events';
import { PassThrough } from 'node:stream';
import { ParseError, Parser, isDelim, isSpace, type PdfDict } from './objects.ts';

/** The dictionary of one inline image cannot be longer than this; past it, no image is read. */
const DICT_MAX = 64 * 1024;
/** Content bytes fed to one inline image's decoders at most (PDFium's own limit is far lower). */
export const INLINE_INPUT_MAX = 16 * 1024 * 1024;

/** Inline-image abbreviations, as the full keys of a stream dictionary. */
const keys: Record<string, string> = {
  F: 'Filter',
  DP: 'DecodeParms',
  W: 'Width',
  H: 'Height',
  BPC: 'BitsPerComponent',
  CS: 'ColorSpace',
  IM: 'ImageMask',
};

export interface InlineDecoding {
  /** The decoders of a dictionary's chain (each already counted), or what ends it. */
  chain(dict: PdfDict): {
    decode: ((src: AsyncIterable<Buffer>) => AsyncIterable<Buffer>) | null;
    image: boolean;
  };
  /** Counts an image codec's declared size. */
  declared(dict: PdfDict): void;
}

const space = isSpace;
const boundary = (c: number) => isSpace(c) || isDelim(c);

const BI = Buffer.from('BI', 'latin1');
const SPACES = Buffer.from('   ', 'latin1');

type Feed = { pt: PassThrough; done: Promise<unknown>; finished: boolean; fed: number };

/**
 * Consumes a content stream's decoded output, decoding the inline images in it while counting.
 * `BI` is searched with Buffer.indexOf (native); only dictionaries are read byte by byte.
 */
export async function scanInlineImages(src: AsyncIterable<Buffer>, d: InlineDecoding): Promise<void> {
  let carry = SPACES; // the last 3 bytes already searched, so that `BI` across chunks is found
  let inDict = false;
  let dict: number[] = [];
  let w = 0; // the last four bytes of the dictionary
  let feed: Feed | null = null;

  const endFeed = async (f: Feed) => {
    feed = null;
    f.pt.end();
    const e = await f.done;
    if (e) throw e;
  };
  const write = async (f: Feed, b: Buffer) => {
    if (f.finished || f.pt.destroyed) return;
    f.fed += b.length;
    if (!f.pt.write(b)) await Promise.race([once(f.pt, 'drain'), f.done]);
  };

  for await (const chunk of src) {
    if (feed) {
      const f: Feed = feed;
      await write(f, chunk);
      if (f.finished || f.pt.destroyed || f.fed >= INLINE_INPUT_MAX) {
        await endFeed(f);
        carry = SPACES;
      }
      continue;
    }
    const c = inDict ? chunk : Buffer.concat([carry, chunk]);
    let i = inDict ? 0 : 1;
    let fed = false;
    while (i < c.length) {
      if (!inDict) {
        const k = c.indexOf(BI, i);
        if (k < 0 || k + 2 >= c.length) break; // none, or not yet known to be followed by white space
        i = k + 1;
        if ((k > 0 && !boundary(c[k - 1]!)) || !space(c[k + 2]!)) continue;
        inDict = true;
        dict = [];
        w = 0x20202020;
        i = k + 3;
        continue;
      }
      const b = c[i++]!;
      w = ((w << 8) | b) >>> 0;
      dict.push(b);
      // `ID` between white space and one white-space byte ends the dictionary
      if (space(b) && ((w >>> 8) & 0xffff) === 0x4944 && space(w >>> 24)) {
        inDict = false;
        const parsed = parseDict(Buffer.from(dict.slice(0, -3)));
        if (!parsed) continue;
        const { decode, image } = d.chain(parsed);
        if (image) d.declared(parsed);
        if (!decode) continue;
        const pt = new PassThrough({ highWaterMark: 64 * 1024 });
        const f: Feed = { pt, done: Promise.resolve<unknown>(undefined), finished: false, fed: 0 };
        f.done = (async () => {
          try {
            for await (const x of decode(pt)) void x;
            return undefined;
          } catch (e) {
            return e;
          } finally {
            f.finished = true;
          }
        })();
        feed = f;
        await write(f, c.subarray(i));
        if (f.finished || f.pt.destroyed || f.fed >= INLINE_INPUT_MAX) await endFeed(f);
        fed = true;
        carry = SPACES;
        break; // the rest of this chunk went to the image
      }
      if (dict.length > DICT_MAX) inDict = false; // not an inline image after all
    }
    if (!fed) carry = Buffer.from(c.subarray(Math.max(0, c.length - 3)));
  }
  if (feed) await endFeed(feed);
}

function parseDict(text: Buffer): PdfDict | null {
  try {
    const v = new Parser(`<<${text.toString('latin1')}>>`).value();
    if (!(v instanceof Map)) return null;
    const out: PdfDict = new Map();
    for (const [k, x] of v) out.set(keys[k] ?? k, x);
    return out.has('Filter') || out.get('Width') !== undefined ? out : null;
  } catch (e) {
    if (e instanceof ParseError) return null;
    throw e;
  }
}
