// A test reporter that lists each test file's wall time, slowest first: from the moment the runner
// started its process (`test:dequeue` of the file) to the moment the process ended
// (`test:complete` of the file), so startup, hooks and the wait for the process to exit count.
// npm test runs it beside the spec reporter, into stderr:
//   --test-reporter=./test/support/file-times.ts --test-reporter-destination=stderr
import { resolve } from 'node:path';
import type { TestEvent } from 'node:test/reporters';

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
  const rows = [...files.entries()]
    .map(([file, f]) => ({ file: file.replace(`${process.cwd()}/`, ''), ms: (f.end ?? now) - f.start, f }))
    .sort((a, b) => b.ms - a.ms);
  yield `\nfile times, slowest first (run ${((now - started) / 1000).toFixed(1)} s, ${rows.length} files):\n`;
  for (const r of rows) {
    const note = r.f.end === undefined ? '  (did not end)' : r.f.failed ? '  (failed)' : '';
    yield `${(r.ms / 1000).toFixed(1).padStart(8)} s  ${r.file}${note}\n`;
  }
}
