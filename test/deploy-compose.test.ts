// deploy/compose.yaml, checked without a Docker engine: validated by Debian's docker-compose
// (`docker-compose config`, its own Compose schema), then parsed and held against faxline itself:
// every faxline service is the same image with a real entry point and a configuration that
// src/config.ts accepts, migrations run once before the app starts, RabbitMQ has its plugins, and
// Prometheus and Grafana read deploy/prometheus and deploy/grafana.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { loadConfig, variables } from '../src/config.ts';
import { buildComposePrometheus, composePrometheusFile, promDir } from '../scripts/deploy-monitoring.ts';

const repo = fileURLToPath(new URL('../', import.meta.url));
const deployDir = join(repo, 'deploy');
const composeFile = join(deployDir, 'compose.yaml');
const compose = YAML.parse(readFileSync(composeFile, 'utf8'), { merge: true }) as {
  services: Record<string, Record<string, any>>;
  volumes: Record<string, unknown>;
};
const services = compose.services;
const faxline = Object.entries(services).filter(([, s]) => s.build);
const app = faxline.filter(([name]) => name !== 'migrate');

describe('deploy/compose.yaml', () => {
  it('is a valid Compose file (docker-compose config)', () => {
    const out = execFileSync('docker-compose', ['-f', composeFile, 'config'], {
      cwd: repo,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const resolved = YAML.parse(out) as { services: Record<string, unknown> };
    assert.deepEqual(Object.keys(resolved.services).sort(), Object.keys(services).sort());
  });

  it('runs PostgreSQL, RabbitMQ, the API, every worker kind, Prometheus and Grafana', () => {
    for (const s of [
      'postgres',
      'rabbitmq',
      'migrate',
      'api',
      'send-worker',
      'cancel-worker',
      'scheduler',
      'events',
      'amqp-intake',
      'mail',
      'prometheus',
      'grafana',
    ])
      assert.ok(services[s], s);
  });

  it('runs every faxline process from the one image, hardened, with an entry point that exists', () => {
    const images = new Set(faxline.map(([, s]) => s.image));
    assert.equal(images.size, 1);
    for (const [name, s] of faxline) {
      assert.equal(s.build.dockerfile, 'deploy/Dockerfile', name);
      assert.ok(existsSync(join(resolve(deployDir, s.build.context), s.build.dockerfile)), name);
      assert.ok(existsSync(join(repo, s.command[0])), `${name}: ${s.command[0]} exists`);
      assert.equal(s.read_only, true, `${name}: read-only root filesystem`);
      assert.match(String(s.user), /^[1-9]\d*:[1-9]\d*$/, `${name}: non-root`);
    }
    const entry = Object.fromEntries(faxline.map(([n, s]) => [n, s.command.join(' ')]));
    assert.deepEqual(entry, {
      migrate: 'src/admin/cli.ts migrate',
      api: 'src/api-main.ts',
      'send-worker': 'workers/send.ts',
      'cancel-worker': 'workers/cancel.ts',
      scheduler: 'workers/scheduler.ts',
      events: 'workers/events.ts',
      'amqp-intake': 'workers/amqp-intake.ts',
      mail: 'workers/mail.ts',
    });
    // Every worker entry point of the repository runs in the stack.
    for (const f of readdirSync(join(repo, 'workers')))
      assert.ok(Object.values(entry).includes(`workers/${f}`), `workers/${f} has a compose service`);
  });

  it('configures faxline processes with values src/config.ts accepts, pointing at the compose services', () => {
    const pg = services.postgres!.environment;
    for (const [name, s] of faxline) {
      for (const k of Object.keys(s.environment))
        assert.ok(k in variables, `${name}: ${k} is a config variable`);
      const cfg = loadConfig(s.environment); // throws, naming the variable, on a bad value
      const db = new URL(cfg.DATABASE_URL);
      assert.equal(db.hostname, 'postgres');
      assert.equal(db.username, pg.POSTGRES_USER);
      assert.equal(db.password, pg.POSTGRES_PASSWORD);
      assert.equal(db.pathname, `/${pg.POSTGRES_DB}`);
      const amqpUrl = new URL(cfg.AMQP_URL);
      assert.equal(amqpUrl.hostname, 'rabbitmq');
      // RabbitMQ refuses guest from anywhere but localhost: the stack's own user, as the broker has it.
      assert.notEqual(amqpUrl.username, 'guest');
      assert.equal(amqpUrl.username, services.rabbitmq!.environment.RABBITMQ_DEFAULT_USER);
      assert.equal(amqpUrl.password, services.rabbitmq!.environment.RABBITMQ_DEFAULT_PASS);
      assert.equal(cfg.QUEUE_TYPE, 'quorum');
      assert.equal(cfg.DB_CREATE, false);
    }
  });

  it('gives every faxline process the key-encryption key, made once in its own volume', () => {
    // Encryption at rest is on by default: a process without a key does not start (docs/encryption.md).
    const kek = services.kek!;
    assert.deepEqual(kek.volumes, ['kek:/keys']);
    assert.equal(kek.restart, 'no');
    assert.equal(services.migrate!.depends_on.kek.condition, 'service_completed_successfully');
    for (const [name, s] of faxline) {
      assert.equal(s.environment.KEK_FILE, '/run/faxline-kek/kek', name);
      assert.ok(
        ((s.volumes ?? []) as string[]).includes('kek:/run/faxline-kek:ro'),
        `${name} mounts the key read-only`,
      );
      assert.equal(loadConfig(s.environment).ENCRYPTION, 'on', name);
    }
  });

  it('migrates once, before any app process starts; app processes do not migrate', () => {
    assert.equal(services.migrate!.restart, 'no');
    assert.equal(services.migrate!.depends_on.postgres.condition, 'service_healthy');
    for (const [name, s] of app) {
      assert.equal(loadConfig(s.environment).MIGRATE_ON_START, false, name);
      assert.equal(s.depends_on.migrate.condition, 'service_completed_successfully', name);
      assert.equal(s.depends_on.rabbitmq.condition, 'service_healthy', name);
    }
    assert.ok(services.postgres!.healthcheck && services.rabbitmq!.healthcheck);
  });

  it('enables the RabbitMQ management and prometheus plugins', () => {
    const mount = (services.rabbitmq!.volumes as string[]).find((v) =>
      v.includes('/etc/rabbitmq/enabled_plugins'),
    );
    assert.ok(mount);
    const plugins = readFileSync(resolve(deployDir, mount.split(':')[0]!), 'utf8');
    assert.match(plugins, /^\[([a-z_]+,)*[a-z_]+\]\.\s*$/, 'an Erlang list term');
    assert.match(plugins, /rabbitmq_management/);
    assert.match(plugins, /rabbitmq_prometheus/);
    assert.match(services.rabbitmq!.image, /management/);
  });

  it('mounts files that exist, and wires Prometheus and Grafana to deploy/prometheus and deploy/grafana', () => {
    const binds = Object.entries(services).flatMap(([name, s]) =>
      ((s.volumes ?? []) as string[])
        .filter((v) => v.startsWith('./'))
        .map((v) => ({ name, source: v.split(':')[0]!, target: v.split(':')[1]! })),
    );
    const has = (name: string, source: string, target: string) =>
      binds.some((b) => b.name === name && b.source === source && b.target === target);
    assert.ok(has('prometheus', './prometheus', '/etc/prometheus/faxline'));
    assert.ok(has('prometheus', './compose/prometheus.yml', '/etc/prometheus/prometheus.yml'));
    assert.ok(has('grafana', './grafana', '/var/lib/grafana/dashboards/faxline'));
    for (const b of binds) {
      assert.ok(existsSync(resolve(deployDir, b.source)), `${b.name}: ${b.source} exists`);
    }
    // Grafana is provisioned with the compose Prometheus and the dashboards directory.
    const ds = YAML.parse(readFileSync(join(deployDir, 'compose/grafana-datasource.yaml'), 'utf8'));
    assert.equal(ds.datasources[0].url, 'http://prometheus:9090');
    const dash = YAML.parse(readFileSync(join(deployDir, 'compose/grafana-dashboards.yaml'), 'utf8'));
    assert.equal(dash.providers[0].options.path, '/var/lib/grafana/dashboards/faxline');
  });

  it('scrapes every faxline process kind and RabbitMQ by compose service name', async () => {
    const cfg = YAML.parse(readFileSync(composePrometheusFile, 'utf8'));
    const targets = new Set(
      cfg.scrape_configs.flatMap((j: any) => j.dns_sd_configs.map((d: any) => `${d.names[0]}:${d.port}`)),
    );
    const port = (name: string) =>
      String(services[name]!.environment.METRICS_PORT ?? services[name]!.environment.PORT);
    for (const s of ['api', 'send-worker', 'cancel-worker', 'scheduler'])
      assert.ok(targets.has(`${s}:${port(s)}`), `${s} scraped on ${port(s)}`);
    assert.ok(targets.has('rabbitmq:15692'));
    assert.deepEqual(
      YAML.parse(readFileSync(composePrometheusFile, 'utf8')),
      YAML.parse(await buildComposePrometheus()),
      'deploy/prometheus changed: run `npm run deploy:monitoring`',
    );
    // promtool (Debian's prometheus package) checks the config and its rule files as mounted.
    const dir = mkdtempSync(join(tmpdir(), 'faxline-compose-prom-'));
    try {
      cpSync(composePrometheusFile, join(dir, 'prometheus.yml'));
      cpSync(fileURLToPath(promDir), join(dir, 'faxline'), { recursive: true });
      execFileSync('promtool', ['check', 'config', join(dir, 'prometheus.yml')], { stdio: 'pipe' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
