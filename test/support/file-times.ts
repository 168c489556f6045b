// A test reporter that lists each test file's wall time, slowest first: from the moment the runner
// started its process (`test:dequeue` of the file) to the moment the process ended
// (`test:complete` of the file), so startup, hooks and the wait for the process to exit count.
// Beside each wall time, the CPU seconds the file's process used, and those of the children it
// started (test/support/cpu-times.ts): on a shared machine the wall times depend on the neighbours,
// the CPU seconds much less; the total, over the machine's cores, is the least the run can take.
// npm test runs it beside the spec reporter, into stderr:
//   --test-reporter=./test/support/file-times.ts --test-reporter-destination=stderr
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import type { TestEvent } from 'node:test/reporters';
import { announceCpuDir, collectCpu } from './cpu-times.ts';

const cpuDir = announceCpuDir();

export default async function* fileTimes(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const started = Date.now();
  const files = new Map<string, { start: number; end?: number; failed: boolean }>();
  for await (const event of source) {
    const data = event.data as { file?: string; name?: string; nesting?: number };
    // File-level events: the runner names the file's own test by the path it was given.
    if (!data?.file || data.nesting !== 0 || !data.name || resolve(data.name) !== data.file) continue;
    if (event.type === 'test:dequeue') files.set(data.file, { start: Date.now(), failed: false });
    const f = files.get(data.file);
    if (!f) continue;
    if (event.type === 'test:complete') f.end = Date.now();
    if (event.type === 'test:fail') f.failed = true;
  }
  const now = Date.now();
  const cpu = collectCpu(cpuDir);
  const rows = [...files.entries()]
    .map(([file, f]) => ({
      file: file.replace(`${process.cwd()}/`, ''),
      ms: (f.end ?? now) - f.start,
      cpu: cpu.get(file),
      f,
    }))
    .sort((a, b) => b.ms - a.ms);
  const secs = (s: number) => s.toFixed(1).padStart(8);
  let own = 0;
  let children = 0;
  for (const r of rows) {
    own += r.cpu?.own ?? 0;
    children += r.cpu?.children ?? 0;
  }
  yield (
    `\nfile times, slowest first (run ${((now - started) / 1000).toFixed(1)} s, ${rows.length} files; ` +
    `CPU ${(own + children).toFixed(0)} s = ${own.toFixed(0)} s in the test processes + ` +
    `${children.toFixed(0)} s in their children, on ${availableParallelism()} cores):\n`
  );
  yield `${'wall'.padStart(8)}  ${'CPU test'.padStart(8)}  ${'children'.padStart(8)}   file\n`;
  for (const r of rows) {
    const note = r.f.end === undefined ? '  (did not end)' : r.f.failed ? '  (failed)' : '';
    const c = r.cpu
      ? `${secs(r.cpu.own)}  ${secs(r.cpu.children)}`
      : `${'-'.padStart(8)}  ${'-'.padStart(8)}`;
    yield `${secs(r.ms / 1000)}  ${c}   ${r.file}${note}\n`;
  }
}
