// Loaded into every test process (`--import` in the npm test scripts): a test file whose process
// is still alive a few seconds after its last test and its last `after` hook fails, and says what
// holds it open, instead of hanging the whole run (the runner waits for each file's process to exit;
// a socket, timer or child left open kept it waiting for ever). Tests and hooks themselves are
// bounded by --test-timeout.
import { after, type TestContext } from 'node:test';
import { recordCpuAtExit } from './cpu-times.ts';

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
