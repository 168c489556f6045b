// Strict Base64 of fax documents (src/intake/send.ts strictBase64): the same strings accepted and
// refused as the regular expression it replaced, on strings built to hit every edge (padding in the
// middle, too much padding, the URL-safe alphabet, whitespace, characters outside ASCII), and the
// bytes it returns are the decoded ones.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { strictBase64 } from '../src/intake/send.ts';

const REGEX = /^[A-Za-z0-9+/]*={0,2}$/;
const old = (s: string) => s.length > 0 && s.length % 4 === 0 && REGEX.test(s);

describe('strictBase64', () => {
  it('decodes what any encoder makes, of every length of a block', () => {
    for (let n = 1; n <= 40; n++) {
      const bytes = randomBytes(n);
      assert.deepEqual(strictBase64(bytes.toString('base64')), bytes, `length ${n}`);
    }
  });

  it('accepts and refuses exactly what /^[A-Za-z0-9+/]*={0,2}$/ with a length of 4k did', () => {
    const alphabet = 'AQZaqz09+/=-_ !\n\t.é\u0000';
    let seed = 12345;
    const rand = (k: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % k;
    };
    const cases = [
      '',
      'QQ==',
      'QQ=',
      'Q===',
      '====',
      'QUJD',
      'QQ==QUJD',
      'QUJD====',
      'QU-D',
      'QU_D',
      'QUJ\n',
    ];
    for (let i = 0; i < 20_000; i++) {
      const base = randomBytes(rand(12)).toString('base64');
      const chars = [...base];
      // Up to two edits: a character of the tricky alphabet put in, or one replaced.
      for (let e = rand(3); e > 0; e--) {
        const at = rand(chars.length + 1);
        const c = alphabet[rand(alphabet.length)]!;
        if (rand(2) === 0 || at === chars.length) chars.splice(at, 0, c);
        else chars[at] = c;
      }
      cases.push(chars.join(''));
    }
    let accepted = 0;
    for (const s of cases) {
      const got = strictBase64(s);
      assert.equal(got !== null, old(s), JSON.stringify(s));
      if (got) {
        accepted++;
        assert.deepEqual(got, Buffer.from(s, 'base64'), JSON.stringify(s));
      }
    }
    // Both kinds were tried, many of each.
    assert.ok(accepted > 2_000 && accepted < cases.length - 2_000, `${accepted} of ${cases.length} accepted`);
  });
});
