// Loaded into every test process (`--import` in npm test). Line coverage is measured in the test
// processes only: the processes they start (workers, render and sandbox children, the services run
// as OS processes) run uninstrumented, so their CPU and time budgets behave as without coverage.
// NODE_V8_COVERAGE was read when this process started (its own coverage is still written); removed
// here, it is not inherited by the children. The test runner itself (no NODE_TEST_CONTEXT) keeps it.
if (process.env.NODE_TEST_CONTEXT) delete process.env.NODE_V8_COVERAGE;
