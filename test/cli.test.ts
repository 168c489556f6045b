// The `faxline` command run as a process (bin/faxline.js under the PATH's node, which hands over to
// the package's Node 24 when it cannot strip types) against the real service started here, with the
// simulated line at full speed: its test numbers deliver or fail the same way every time
// (docs/lines-retries.md#simulated-line).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import promClient from 'prom-client';
import type { DemoSeed } from '../src/admin/seed.ts';
import { createLogger } from '../src/log.ts';
import { createReceiveMetrics } from '../src/receive/metrics.ts';
import { PgReceivedFaxSink } from '../src/receive/sink.ts';
import { seedAccount } from './support/client.ts';
import { makeFaxTiff } from './support/faxtiff.ts';
import { startService } from './support/harness.ts';
import { makePdf } from './support/pdf.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const bin = join(root, 'bin/faxline.js');
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe('faxline CLI against the running service', { timeout: 300_000 }, () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let seed: DemoSeed;
  let dir: string;
  let pdf: string;

  /** Runs `faxline args…` with the PATH's node (any version), bounded in time. */
  function faxline(args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Promise<Ran> {
    const e: NodeJS.ProcessEnv = {
      ...process.env,
      FAXLINE_URL: s.url,
      FAXLINE_API_KEY: seed.api_key,
      FAXLINE_CONFIG: join(dir, 'no-config.json'),
      ...env,
    };
    delete e.NODE_V8_COVERAGE;
    delete e.NODE_TEST_CONTEXT;
    delete e.NODE_OPTIONS;
    return new Promise((resolve, reject) => {
      const child = spawn('node', [bin, ...args], { env: e, cwd: dir });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (b: Buffer) => (stdout += b));
      child.stderr.on('data', (b: Buffer) => (stderr += b));
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`faxline ${args.join(' ')} did not exit within ${timeoutMs} ms; stderr: ${stderr}`));
      }, timeoutMs);
      child.on('error', reject);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
  }
  const show = (r: Ran) => `exit ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;

  before(async () => {
    // A fifth of real time: a three-page fax is sending for about 1.5 s, long enough to be seen
    // sending by --wait's polls every 100 ms.
    s = await startService({ env: { SIM_SPEEDUP: '5' } });
    seed = await seedAccount(s);
    dir = mkdtempSync(join(tmpdir(), 'faxline-cli-'));
    pdf = join(dir, 'letter.pdf');
    writeFileSync(pdf, await makePdf(3));
  });
  after(async () => {
    await s?.dropAll();
  });

  it('send --wait to a delivering number exits 0; status, --json and report work on it', async () => {
    const r = await faxline([
      'send',
      '-d',
      '+15550100000',
      '--reference',
      'cli-1',
      '--wait',
      '--interval',
      '100ms',
      pdf,
    ]);
    assert.equal(r.code, 0, show(r));
    assert.match(r.stderr, /^sending page [123] of 3$/m, 'progress while sending');
    assert.match(r.stderr, /^delivered, 3 of 3 pages$/m);
    const jobId = UUID.exec(r.stdout)?.[0];
    assert.ok(jobId, show(r));
    assert.match(r.stdout, new RegExp(`job ${jobId}: delivered to \\+15550100000, 3 pages`));

    const one = await faxline(['status', jobId, '--json']);
    assert.equal(one.code, 0, show(one));
    const fax = JSON.parse(one.stdout);
    assert.deepEqual(
      [fax.job_id, fax.state, fax.pages_sent, fax.client_reference],
      [jobId, 'delivered', 3, 'cli-1'],
    );
    assert.ok(
      fax.history.some((h: { to: string }) => h.to === 'delivered'),
      one.stdout,
    );

    const text = await faxline(['status', jobId]);
    assert.equal(text.code, 0, show(text));
    assert.match(text.stdout, /^state\s+delivered$/m);
    assert.match(text.stdout, /^AT\s+FROM\s+TO\s+ATTEMPT$/m);
    assert.ok(!text.stdout.includes('\u001b['), 'no colour when stdout is not a terminal');

    const list = await faxline(['status', '--json', '--reference', 'cli-1']);
    assert.equal(list.code, 0, show(list));
    assert.deepEqual(
      JSON.parse(list.stdout).map((f: { job_id: string }) => f.job_id),
      [jobId],
    );

    const out = join(dir, 'report.pdf');
    const rep = await faxline(['report', jobId, '-o', out]);
    assert.equal(rep.code, 0, show(rep));
    assert.equal(readFileSync(out).subarray(0, 5).toString(), '%PDF-');
    assert.match(rep.stdout, new RegExp(`wrote ${out} \\(${statSync(out).size} bytes\\)`));
  });

  it('send --wait to a failing test number exits 1 with the reason; --json says the same', async () => {
    const r = await faxline(['send', '-d', '+15550100005', '--wait', '--interval', '200ms', pdf]);
    assert.equal(r.code, 1, show(r));
    assert.match(r.stderr, /faxline: job [0-9a-f-]{36} to \+15550100005 failed: .*invalid_number/, show(r));

    const j = await faxline(['send', '-d', '+15550100005', '--wait', '--json', '--interval', '200ms', pdf]);
    assert.equal(j.code, 1, show(j));
    const body = JSON.parse(j.stdout);
    assert.match(body.job_id, UUID);
    assert.equal(body.faxes[0].state, 'failed');
    assert.equal(body.faxes[0].failure.code, 'invalid_number');
  });

  it('send without --wait prints the job id; a broadcast prints its id and one job per number', async () => {
    const r = await faxline(['send', '-d', '+15550100000', '--json', pdf]);
    assert.equal(r.code, 0, show(r));
    assert.match(JSON.parse(r.stdout).job_id, UUID);
    const list = join(dir, 'numbers.txt');
    writeFileSync(list, '# two recipients\n+15550100000\nDr. Adams@+15551230002\n');
    const b = await faxline(['send', '-z', list, '--json', pdf]);
    assert.equal(b.code, 0, show(b));
    const sent = JSON.parse(b.stdout);
    assert.match(sent.broadcast_id, UUID);
    assert.equal(sent.job_ids.length, 2);
  });

  it('cancel cancels a scheduled fax; cancelling it again exits 3 with the API message', async () => {
    const r = await faxline(['send', '-d', '+15550100000', '--at', '+1d', pdf]);
    assert.equal(r.code, 0, show(r));
    const jobId = UUID.exec(r.stdout)![0];
    const c = await faxline(['cancel', jobId]);
    assert.equal(c.code, 0, show(c));
    assert.equal(c.stdout.trim(), `job ${jobId}: Scheduled fax cancelled successfully`);
    const st = await faxline(['status', jobId, '--json']);
    assert.equal(JSON.parse(st.stdout).state, 'cancelled');
    const again = await faxline(['cancel', jobId]);
    assert.equal(again.code, 3, show(again));
    assert.match(
      again.stderr,
      /^faxline: Fax cannot be cancelled: it is no longer scheduled \(current state: cancelled\)$/m,
    );
  });

  it('received lists a received fax, --unread filters, received get -o writes its PDF', async () => {
    const pool = new pg.Pool({ connectionString: s.cfg.DATABASE_URL, max: 2 });
    let id: string;
    try {
      const sink = new PgReceivedFaxSink({
        db: pool,
        log: createLogger('silent'),
        metrics: createReceiveMetrics(new promClient.Registry()),
      });
      const to = seed.numbers[3]!;
      const rec = await sink.begin({
        accountId: seed.account_id,
        numberId: null,
        to,
        from: '+15557654321',
        stationId: to,
        callId: null,
      });
      const stored = await rec.complete(
        {
          ok: true,
          code: 0,
          text: 'OK',
          pages: 1,
          bitRate: 14400,
          ecm: true,
          remoteIdent: '+15557654321',
          transport: 'audio',
          durationMs: 20_000,
        },
        makeFaxTiff(1, 'standard'),
      );
      assert.equal(stored.status, 'received');
      id = rec.id;
    } finally {
      await pool.end();
    }
    const unread = await faxline(['received', '--unread', '--json']);
    assert.equal(unread.code, 0, show(unread));
    assert.deepEqual(
      JSON.parse(unread.stdout).map((f: { id: string }) => f.id),
      [id],
    );
    const table = await faxline(['received']);
    assert.equal(table.code, 0, show(table));
    assert.match(
      table.stdout,
      new RegExp(`^${id}\\s+received\\s+\\+15557654321\\s+\\S+\\s+1\\s+\\S+\\s+no$`, 'm'),
    );

    const out = join(dir, 'fax.pdf');
    const g = await faxline(['received', 'get', id, '-o', out, '--mark-read']);
    assert.equal(g.code, 0, show(g));
    assert.equal(readFileSync(out).subarray(0, 5).toString(), '%PDF-');
    const after = await faxline(['received', '--unread', '--json']);
    assert.deepEqual(JSON.parse(after.stdout), [], 'marked read');

    const missing = await faxline([
      'received',
      'get',
      '00000000-0000-4000-8000-000000000000',
      '-o',
      join(dir, 'x.pdf'),
    ]);
    assert.equal(missing.code, 3, show(missing));
    assert.match(missing.stderr, /^faxline: Received fax not found$/m);
  });

  it('a wrong API key: a clear message on stderr and exit 4 (also as JSON)', async () => {
    const r = await faxline(['status'], { FAXLINE_API_KEY: 'fxl_key_wrong' });
    assert.equal(r.code, 4, show(r));
    assert.equal(r.stdout, '');
    assert.match(
      r.stderr,
      /^faxline: API Secret Key is invalid\. \(HTTP 401: check FAXLINE_API_KEY or run `faxline login`\)$/m,
    );
    const j = await faxline(['status', '--json'], { FAXLINE_API_KEY: 'fxl_key_wrong' });
    assert.equal(j.code, 4, show(j));
    assert.deepEqual(JSON.parse(j.stderr).error.http, 401);
  });

  it('a refused send names the field (exit 3); a missing file and a bad flag are usage errors (exit 2)', async () => {
    const r = await faxline(['send', '-d', '12345', '--json', pdf]);
    assert.equal(r.code, 3, show(r));
    const e = JSON.parse(r.stderr).error;
    assert.equal(e.http, 422);
    assert.equal(e.field, 'fax_number');
    assert.match(e.message, /^fax_number: must be an E\.164 number/);
    // The test account's Fax Defaults draw no cover (seedAccount): --cover has none to choose.
    const cover = await faxline(['send', '-d', '+15550100000', '--cover', pdf]);
    assert.equal(cover.code, 3, show(cover));
    assert.match(cover.stderr, /^faxline: no Fax Default of this account draws the cover page: /m);
    const nofile = await faxline(['send', '-d', '+15550100000', join(dir, 'nope.pdf')]);
    assert.equal(nofile.code, 2, show(nofile));
    assert.match(nofile.stderr, /cannot read .*nope\.pdf/);
    const flag = await faxline(['send', '--bogus', pdf]);
    assert.equal(flag.code, 2, show(flag));
    assert.match(flag.stderr, /unknown option '--bogus'/);
  });

  it('login checks the key and writes the config file with mode 0600; commands then need no environment', async () => {
    const config = join(dir, 'cfg', 'config.json');
    const bad = await faxline(['login', '--url', s.url, '--key', 'fxl_key_wrong'], {
      FAXLINE_CONFIG: config,
      FAXLINE_URL: '',
      FAXLINE_API_KEY: '',
    });
    assert.equal(bad.code, 4, show(bad));
    assert.throws(() => statSync(config), /ENOENT/, 'a refused key is not saved');
    const r = await faxline(['login', '--url', s.url, '--key', seed.api_key], {
      FAXLINE_CONFIG: config,
      FAXLINE_URL: '',
      FAXLINE_API_KEY: '',
    });
    assert.equal(r.code, 0, show(r));
    assert.equal(statSync(config).mode & 0o777, 0o600);
    assert.deepEqual(JSON.parse(readFileSync(config, 'utf8')), { url: s.url, api_key: seed.api_key });
    const st = await faxline(['status', '--json'], {
      FAXLINE_CONFIG: config,
      FAXLINE_URL: '',
      FAXLINE_API_KEY: '',
    });
    assert.equal(st.code, 0, show(st));
    assert.ok(Array.isArray(JSON.parse(st.stdout)));
  });
});
