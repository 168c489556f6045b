// Bencode (the BitTorrent encoding) as rtpengine's ng control protocol uses it: byte strings,
// integers, lists and dictionaries (keys sorted when encoding). Strings decode as UTF-8 text.
export type BValue = string | number | BValue[] | { [key: string]: BValue };

export function bencode(v: BValue): Buffer {
  const parts: Buffer[] = [];
  const put = (x: BValue): void => {
    if (typeof x === 'number') {
      if (!Number.isInteger(x)) throw new Error(`bencode: ${x} is not an integer`);
      parts.push(Buffer.from(`i${x}e`));
    } else if (typeof x === 'string') {
      const b = Buffer.from(x, 'utf8');
      parts.push(Buffer.from(`${b.length}:`), b);
    } else if (Array.isArray(x)) {
      parts.push(Buffer.from('l'));
      x.forEach(put);
      parts.push(Buffer.from('e'));
    } else {
      parts.push(Buffer.from('d'));
      for (const k of Object.keys(x).sort()) {
        put(k);
        put(x[k]!);
      }
      parts.push(Buffer.from('e'));
    }
  };
  put(v);
  return Buffer.concat(parts);
}

/** Decodes one value that must span all of `buf`. */
export function bdecode(buf: Buffer): BValue {
  let at = 0;
  const fail = (why: string): never => {
    throw new Error(`bdecode: ${why} at byte ${at}`);
  };
  const value = (depth: number): BValue => {
    if (depth > 64) fail('nested too deep');
    const c = buf[at];
    if (c === undefined) return fail('unexpected end');
    if (c === 0x69 /* i */) {
      const end = buf.indexOf(0x65, at);
      if (end < 0) fail('unterminated integer');
      const text = buf.toString('latin1', at + 1, end);
      if (!/^-?\d+$/.test(text)) fail(`bad integer "${text}"`);
      at = end + 1;
      return Number(text);
    }
    if (c === 0x6c /* l */ || c === 0x64 /* d */) {
      at++;
      const list: BValue[] = [];
      while (buf[at] !== 0x65) {
        if (at >= buf.length) fail('unterminated list');
        list.push(value(depth + 1));
      }
      at++;
      if (c === 0x6c) return list;
      if (list.length % 2 !== 0) fail('dictionary with a key and no value');
      const dict: Record<string, BValue> = {};
      for (let i = 0; i < list.length; i += 2) {
        const k = list[i];
        if (typeof k !== 'string') fail('dictionary key is not a string');
        dict[k as string] = list[i + 1]!;
      }
      return dict;
    }
    if (c >= 0x30 && c <= 0x39) {
      const colon = buf.indexOf(0x3a, at);
      if (colon < 0) fail('string without a length');
      const len = Number(buf.toString('latin1', at, colon));
      if (!Number.isSafeInteger(len) || colon + 1 + len > buf.length) fail('string longer than the input');
      at = colon + 1 + len;
      return buf.toString('utf8', colon + 1, at);
    }
    return fail(`unexpected byte 0x${c.toString(16)}`);
  };
  const v = value(0);
  if (at !== buf.length) fail('trailing bytes');
  return v;
}
