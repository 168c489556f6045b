// Looping TIFF directories (issue 27, finding 6): a 142-256 byte TIFF whose next-directory offset
// points back to its own directory or an earlier one made utif2 read the same directory until the
// check sandbox reached its memory cap (pdf_check_memory, about 8 s of a sandbox each). Now every
// directory chain is walked with the directories already visited remembered, and such a file is
// refused at once as broken (image_broken). The real sandbox child process, with its default caps.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { PdfSandbox, defaultSandboxLimits } from '../src/documents/check.ts';
import { DocumentError } from '../src/documents/errors.ts';
import { readTiffPages } from '../src/documents/render/tiff-read.ts';
import { makeTiff } from './support/images.ts';

const page = { w: 8, h: 8, bits: 1 as const, xDpi: 204, yDpi: 196 };

/** Offsets of the directories of a TIFF made by makeTiff (little-endian), in chain order. */
function directories(tiff: Buffer): number[] {
  const out: number[] = [];
  for (let ifd = tiff.readUInt32LE(4); ifd !== 0 && out.length < 100;) {
    out.push(ifd);
    ifd = tiff.readUInt32LE(ifd + 2 + tiff.readUInt16LE(ifd) * 12);
  }
  return out;
}

/** `tiff` with the next-directory offset of its directory `from` (index) set to directory `to`'s. */
function loop(tiff: Buffer, from: number, to: number): Buffer {
  const out = Buffer.from(tiff);
  const ifds = directories(tiff);
  const at = ifds[from]!;
  out.writeUInt32LE(ifds[to]!, at + 2 + out.readUInt16LE(at) * 12);
  return out;
}

/** `tiff` with an entry of its first directory replaced: tag, type, count, value/offset. */
function withEntry(tiff: Buffer, index: number, e: [number, number, number, number]): Buffer {
  const out = Buffer.from(tiff);
  const at = directories(tiff)[0]! + 2 + index * 12;
  out.writeUInt16LE(e[0], at);
  out.writeUInt16LE(e[1], at + 2);
  out.writeUInt32LE(e[2], at + 4);
  out.writeUInt32LE(e[3], at + 8);
  return out;
}

const selfLoop = loop(makeTiff([page]), 0, 0);
const backLoop = loop(makeTiff([page, page]), 1, 0);
// Entry 11 of makeTiff's directory is ResolutionUnit (296): replaced by the tags below.
const subLoop = withEntry(makeTiff([page]), 11, [330, 4, 1, directories(makeTiff([page]))[0]!]);
const manyValues = withEntry(makeTiff([page]), 11, [296, 3, 0xffff_ffff, 8]);

const pools: PdfSandbox[] = [];
after(async () => {
  await Promise.all(pools.map((p) => p.close()));
});

describe('TIFF directory chains that loop', () => {
  it('the files are a few hundred bytes, as the issue’s', () => {
    for (const [name, f] of Object.entries({ selfLoop, backLoop, subLoop, manyValues }))
      assert.ok(f.length >= 142 && f.length <= 400, `${name}: ${f.length} bytes`);
  });

  it('refuses a self-loop, a back-loop and a tag of 4 billion values at once as image_broken, naming the cause', async () => {
    const sandbox = new PdfSandbox({ ...defaultSandboxLimits, concurrency: 1 });
    pools.push(sandbox);
    // A good TIFF first: the sandbox process is started and warm, and good files still pass.
    const good = await sandbox.check(makeTiff([page, page]), 'good.tif');
    assert.equal(good.pageCount, 2);
    const cases: [string, Buffer, RegExp][] = [
      ['self.tif', selfLoop, /chain of image directories loops back to offset \d+/],
      ['back.tif', backLoop, /chain of image directories loops back to offset \d+/],
      ['values.tif', manyValues, /tag 296 declares 4294967295 values, beyond the end of the file/],
    ];
    for (const [name, bytes, reason] of cases) {
      const t0 = performance.now();
      const err = await sandbox.check(bytes, name).then(
        () => assert.fail(`${name}: the check passed`),
        (e: unknown) => e,
      );
      const ms = performance.now() - t0;
      assert.ok(err instanceof DocumentError, `${name}: ${String(err)}`);
      assert.notEqual(err.code, 'pdf_check_memory', `${name}: ran the sandbox to its memory cap`);
      assert.equal(err.code, 'image_broken', `${name}: ${err.code}: ${err.message}`);
      assert.ok(err.message.startsWith(`${name}: `), err.message);
      assert.match(err.message, reason, name);
      // Generous (a busy machine): the loop ran about 8 s to the 512 MiB cap before.
      assert.ok(ms < 5_000, `${name}: refused after ${Math.round(ms)} ms`);
    }
    // A SubIFD pointing back to its own directory is not followed (nothing here reads
    // sub-directories): the page itself is read.
    assert.equal((await sandbox.check(subLoop, 'sub.tif')).pageCount, 1);
    // The same sandbox process serves the next file: none of these killed it.
    assert.equal((await sandbox.check(makeTiff([page]), 'after.tif')).pageCount, 1);
  });

  it('our own TIFF reader (stored faxes) refuses a loop instead of repeating a page', async () => {
    await assert.rejects(readTiffPages(selfLoop), /directory chain loops back to offset/);
    await assert.rejects(readTiffPages(backLoop), /directory chain loops back to offset/);
    assert.equal((await readTiffPages(makeTiff([page, page, page]))).length, 3);
  });
});
