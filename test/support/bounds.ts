// Loaded into every test process (`--import` in the npm test scripts): a test file whose process
// is still alive a few seconds after its last test and its last `after` hook fails, and says what
// holds it open, instead of hanging the whole run (the runner waits for each file's process to exit;
// a socket, timer or child left open kept it waiting for ever). Tests and hooks themselves are
// bounded by --test-timeout.
import { enableCompileCache } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, type TestContext } from 'node:test';
import { recordCpuAtExit } from './cpu-times.ts';

// Node's on-disk compile cache (V8 code cache, and the type-stripped TypeScript), for the node
// processes a test process starts that inherit its environment (the CLI, the admin CLI, receive and
// relay children, services run as processes; the render and sandbox children get an empty
// environment and compile as in production), and for the test process itself unless it measures
// coverage: code from the cache makes V8's coverage less precise (test:files' branch figure fell by
// 4 points on a file), and coverage-scope.ts keeps it out of every child. Each such process loads
// much the same module graph; from the cache the test process's imports cost about 0.45 CPU-s less
// (issue 28). An entry is used only for the same source text and Node version: no behaviour changes.
// FAXLINE_TEST_COMPILE_CACHE=0 turns it off.
if (process.env.FAXLINE_TEST_COMPILE_CACHE !== '0') {
  const dir = process.env.NODE_COMPILE_CACHE || join(tmpdir(), 'faxline-test-compile-cache');
  process.env.NODE_COMPILE_CACHE = dir;
  if (!process.env.NODE_V8_COVERAGE) enableCompileCache(dir);
}

/** Seconds a test process may take to exit after its last `after` hook. */
const GRACE_MS = Number(process.env.FAXLINE_TEST_EXIT_GRACE_MS ?? 10_000);

if (process.env.NODE_TEST_CONTEXT) {
  // Its CPU seconds, and its children's, for the file-times reporter (test/support/cpu-times.ts).
  recordCpuAtExit();
  // Registered first, so it runs first among the file's top-level `after` hooks; the hook it adds
  // to the root test is appended to the list being run, so it runs after all of them.
  after((ctx) => {
    // The root test's context (a top-level hook runs on the root test, a test, not a suite).
    (ctx as TestContext).after(() => {
      setTimeout(() => {
        const open = process
          .getActiveResourcesInfo()
          .filter((r) => r !== 'PipeWrap' && r !== 'TTYWrap') // this process's own stdio
          .join(', ');
        process.stderr.write(
          `test process still alive ${GRACE_MS} ms after its last test and hook: something it started ` +
            `was not closed (open: ${open || 'nothing listed'}); failing the file instead of waiting\n`,
        );
        process.exit(1);
      }, GRACE_MS).unref();
    });
  });
}
