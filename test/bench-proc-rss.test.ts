// The hostile benchmark's memory sampler (bench/proc-rss.ts) must see a process's descendants, name
// them by their script, and add them into the pod's sum: the benchmark's verdict on the k8s limits
// rests on it.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { RssSampler } from '../bench/proc-rss.ts';

test('the RSS sampler finds a grandchild by its script and counts it in the pod', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-rss-'));
  // The grandchild touches 64 MiB (so it is resident), says so, and ends when its stdin closes.
  const leaf = join(dir, 'hog.mjs');
  writeFileSync(
    leaf,
    "const b = Buffer.alloc(64 * 1048576, 1); console.log('ready', b.length);\n" +
      "process.stdin.resume(); process.stdin.on('end', () => process.exit(0));\n" +
      'setTimeout(() => process.exit(0), 60_000);\n',
  );
  // The child starts it and passes its "ready" on; it too ends when its stdin closes.
  const mid = join(dir, 'middle.mjs');
  writeFileSync(
    mid,
    "import { spawn } from 'node:child_process';\n" +
      `const c = spawn(process.execPath, [${JSON.stringify(leaf)}], { stdio: ['pipe', 'inherit', 'inherit'] });\n` +
      "process.stdin.resume(); process.stdin.on('end', () => { c.stdin.end(); process.exit(0); });\n" +
      'setTimeout(() => process.exit(0), 60_000);\n',
  );
  const root = spawn(process.execPath, [mid], { stdio: ['pipe', 'pipe', 'inherit'] });
  try {
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('the grandchild did not start within 30 s')), 30_000);
      createInterface({ input: root.stdout }).on('line', (l) => {
        if (l.startsWith('ready')) {
          clearTimeout(t);
          resolve();
        }
      });
    });
    const s = new RssSampler();
    s.addRoot(root.pid!, 'pod');
    s.sample();
    const p = s.peaks();
    const hog = p.perKind[`pod>${dir.split('/').pop()}/hog`];
    assert.ok(hog, `grandchild not found; kinds: ${Object.keys(p.perKind).join(', ')}`);
    assert.ok(hog.peakMb >= 64, `grandchild RSS ${hog.peakMb} MB, expected at least 64`);
    assert.equal(hog.pids, 1);
    const own = p.perKind.pod!.peakMb;
    assert.ok(
      p.perPod.pod!.peakMb >= own + hog.peakMb - 1,
      `pod sum ${p.perPod.pod!.peakMb} < ${own} + ${hog.peakMb}`,
    );
  } finally {
    root.stdin.end();
    await new Promise((r) => (root.exitCode !== null ? r(null) : root.once('exit', r)));
    rmSync(dir, { recursive: true, force: true });
  }
});
