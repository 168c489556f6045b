// Long-lived resources are built by the wiring (src/app.ts) for the components of each process, and
// closed by its stop (issue 17, deliver 2): an API-only process (`npm run api`, as deploy/k8s runs it)
// checks previews with every PDF setting it was given and leaves no sandbox or render process behind
// on SIGTERM; a cancel worker starts neither; two instances in one process keep their own settings.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { call, seedAccount, tokenFor } from './support/client.ts';
import {
  AMQP_URL,
  createDatabase,
  deleteTopology,
  queuePrefix,
  startService,
  type TestService,
} from './support/harness.ts';
import { bombPdf } from './fixtures/hostile/build.ts';
import { makePdf } from './support/pdf.ts';
import { startProcess, type Proc } from './support/process.ts';
import { alive, childrenRunning } from './support/render-procs.ts';

const MiB = 1024 * 1024;
const SANDBOX = 'sandbox/child.ts';
const RENDER = 'render/child.ts';

const previewBody = (file_name: string, pdf: Buffer) => ({
  fax_number: '+15551234567',
  // no caller_id: the account's default Fax Default presents one of its own numbers
  fax_data: [{ file_name, file_data: pdf.toString('base64') }],
});

/** The sandbox and render processes of `pid` (children found by their command line, from /proc). */
const helpers = (pid: number) => [...childrenRunning(SANDBOX, pid), ...childrenRunning(RENDER, pid)];

describe('an API-only process and a cancel worker as real processes', () => {
  let db: Awaited<ReturnType<typeof createDatabase>>;
  const prefix = queuePrefix('w');
  const procs: Proc[] = [];
  let api: Proc;
  let apiUrl: string;
  let token: string;
  const env = () => ({
    DATABASE_URL: db.url,
    AMQP_URL,
    QUEUE_PREFIX: prefix,
    PORT: '0',
    METRICS_PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
    RATE_LIMIT_PER_SECOND: '0',
    PGBOSS_SCHEMA: 'pgboss',
  });

  before(async () => {
    db = await createDatabase();
    api = startProcess('src/api-main.ts', {
      ...env(),
      // Both differ from the defaults (500 pages; 256 MiB per stream).
      PDF_MAX_PAGES: '2',
      PDF_MAX_STREAM_BYTES: String(MiB),
      PDF_CHECK_CONCURRENCY: '1',
    });
    procs.push(api);
    const started = await api.waitFor(/"msg":"faxline started"/);
    apiUrl = (JSON.parse(started) as { address: string }).address;
    const seed = await seedAccount({ cfg: { DATABASE_URL: db.url } } as TestService);
    token = await tokenFor(apiUrl, seed.api_key);
  });
  after(async () => {
    for (const p of procs)
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    await Promise.all(procs.map((p) => p.exited));
    await deleteTopology(prefix);
    await db.drop();
  });

  it('checks previews with its PDF_MAX_PAGES and PDF_MAX_STREAM_BYTES, in the envelope with the code', async () => {
    const three = await call(apiUrl, 'POST', '/v1/faxes/preview', {
      token,
      body: previewBody('three.pdf', await makePdf(3)),
    });
    assert.equal(three.http, 422, JSON.stringify(three.body));
    assert.equal(three.body.status, 0);
    assert.equal(three.body.data.code, 'pdf_too_many_pages');
    assert.match(three.body.message, /three\.pdf/);

    // One page whose content stream inflates to 3 MiB: past a 1 MiB stream limit, a bomb.
    const big = await call(apiUrl, 'POST', '/v1/faxes/preview', {
      token,
      body: previewBody('big-stream.pdf', bombPdf(3)),
    });
    assert.equal(big.http, 422, JSON.stringify(big.body));
    assert.equal(big.body.status, 0);
    assert.equal(big.body.data.code, 'pdf_decompression_bomb');
    assert.match(big.body.message, /big-stream\.pdf/);

    const two = await call(apiUrl, 'POST', '/v1/faxes/preview', {
      token,
      body: previewBody('two.pdf', await makePdf(2)),
    });
    assert.equal(two.http, 200, JSON.stringify(two.body));
    assert.equal(two.body.data.page_count, 2);
  });

  it('a cancel worker cancels a scheduled fax and starts no sandbox or render process', async () => {
    const cancel = startProcess('workers/cancel.ts', env());
    procs.push(cancel);
    await cancel.waitFor(/"msg":"faxline started"/);
    const sent = await call(apiUrl, 'POST', '/v1/faxes/send', {
      token,
      body: {
        ...previewBody('one.pdf', await makePdf(1)),
        scheduled_date: new Date(Date.now() + 86_400_000).toISOString(),
      },
    });
    assert.equal(sent.http, 200, JSON.stringify(sent.body));
    const jobId = sent.body.data.job_id as string;
    const cancelled = await call(apiUrl, 'POST', '/v1/faxes/cancel-schedule', {
      token,
      body: { job_id: jobId },
    });
    assert.equal(cancelled.http, 200, JSON.stringify(cancelled.body));
    // The worker handled the command (its log line names the job) ...
    await cancel.waitFor(new RegExp(`"jobId":"${jobId}".*"msg":"scheduled fax cancelled`), 20_000);
    // ... without a sandbox or render process of its own.
    assert.deepEqual(helpers(cancel.child.pid!), []);
    cancel.child.kill('SIGTERM');
    const exit = await cancel.exited;
    assert.equal(exit.code, 0, cancel.lines.slice(-10).join('\n'));
  });

  it('on SIGTERM closes its sandbox and render processes and exits 0', async () => {
    // The previews above started them; every one of them must be gone when the process has left.
    const pid = api.child.pid!;
    const sandboxes = childrenRunning(SANDBOX, pid);
    const renderers = childrenRunning(RENDER, pid);
    assert.ok(sandboxes.length > 0, 'a sandbox process checked the previews');
    assert.ok(renderers.length > 0, 'a render process rendered the preview');
    api.child.kill('SIGTERM');
    const exit = await api.exited;
    assert.equal(exit.code, 0, api.lines.slice(-10).join('\n'));
    assert.ok(api.lines.some((l) => l.includes('"msg":"stopped"')));
    const left = [...sandboxes, ...renderers].filter(alive);
    assert.deepEqual(left, [], 'no sandbox or render process outlives the API process');
  });
});

describe('two instances in one process', () => {
  let strict: Awaited<ReturnType<typeof startService>>;
  let lax: Awaited<ReturnType<typeof startService>> | undefined;
  before(async () => {
    strict = await startService({ components: ['api'], env: { PDF_MAX_PAGES: '2' } });
    lax = await startService({ components: ['api'] });
  });
  after(async () => {
    await lax?.dropAll();
    await strict.dropAll();
  });

  async function preview(s: TestService, pages: number) {
    const token = await tokenFor(s.url, (await seedAccount(s)).api_key);
    return call(s.url, 'POST', '/v1/faxes/preview', {
      token,
      body: previewBody(`${pages}p.pdf`, await makePdf(pages)),
    });
  }

  it('keep their own PDF settings and sandboxes: one started or stopped later changes nothing in the other', async () => {
    assert.equal((await preview(lax!, 3)).http, 200, 'the default PDF_MAX_PAGES (500) allows 3 pages');
    const refused = await preview(strict, 3);
    assert.equal(refused.http, 422, 'started first with PDF_MAX_PAGES=2, and still holding to it');
    assert.equal(refused.body.data.code, 'pdf_too_many_pages');
    await lax!.dropAll();
    lax = undefined;
    const ok = await preview(strict, 2);
    assert.equal(ok.http, 200, JSON.stringify(ok.body));
    assert.equal((await preview(strict, 3)).body.data.code, 'pdf_too_many_pages');
  });
});
