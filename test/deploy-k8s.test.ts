// deploy/k8s: every kustomization (base, overlays small, large and sip) rendered with `kubectl kustomize`
// and every rendered object validated:
//   1. against the JSON schemas of its kind — Kubernetes 1.29-1.34 built-ins (kubernetes-models, built
//      from the Kubernetes OpenAPI), KEDA and Prometheus Operator CRDs (their @kubernetes-models
//      packages, built from the CRDs' OpenAPI), RabbitmqCluster and CloudNativePG Cluster (schemas in
//      deploy/k8s/schemas, written from the operators' documented fields);
//   2. strictly: unknown fields are refused (the object type-checked as a literal of its kind's
//      TypeScript type, which rejects excess properties, the way kubeconform -strict does);
//   3. against faxline itself: entry points exist, every variable is a config variable, probes hit
//      /healthz and /readyz, every Deployment has an autoscaler and a PodDisruptionBudget, KEDA watches
//      the queues the topology declares, monitoring matches deploy/prometheus, and so on.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Ajv } from 'ajv';
import ts from 'typescript';
import YAML from 'yaml';
import * as apps from 'kubernetes-models/apps/v1';
import * as autoscaling from 'kubernetes-models/autoscaling/v2';
import * as batch from 'kubernetes-models/batch/v1';
import * as core from 'kubernetes-models/v1';
import * as networking from 'kubernetes-models/networking.k8s.io/v1';
import * as policy from 'kubernetes-models/policy/v1';
import * as keda from '@kubernetes-models/keda/keda.sh/v1alpha1';
import * as monitoring from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { commandTypes, topologyNames } from '../src/amqp/topology.ts';
import { variables } from '../src/config.ts';
import { buildPrometheusRule, buildServiceMonitors } from '../scripts/deploy-monitoring.ts';

const repo = new URL('../', import.meta.url);
const repoPath = fileURLToPath(repo);

type Obj = Record<string, any>;

/** Validator and TypeScript type for every kind the manifests may contain (nothing else is allowed). */
const kinds: Record<string, { validate: (o: Obj) => void; type?: [module: string, name: string] }> = {};
function model(
  apiVersion: string,
  kind: string,
  cls: { new (data: any): { validate(): void } },
  module: string,
  type: string,
) {
  kinds[`${apiVersion}/${kind}`] = { validate: (o) => new cls(o).validate(), type: [module, type] };
}
model('v1', 'Namespace', core.Namespace, 'kubernetes-models/v1', 'INamespace');
model('v1', 'ServiceAccount', core.ServiceAccount, 'kubernetes-models/v1', 'IServiceAccount');
model('v1', 'ConfigMap', core.ConfigMap, 'kubernetes-models/v1', 'IConfigMap');
model('v1', 'Service', core.Service, 'kubernetes-models/v1', 'IService');
model('apps/v1', 'Deployment', apps.Deployment, 'kubernetes-models/apps/v1', 'IDeployment');
model('batch/v1', 'Job', batch.Job, 'kubernetes-models/batch/v1', 'IJob');
model(
  'policy/v1',
  'PodDisruptionBudget',
  policy.PodDisruptionBudget,
  'kubernetes-models/policy/v1',
  'IPodDisruptionBudget',
);
model(
  'autoscaling/v2',
  'HorizontalPodAutoscaler',
  autoscaling.HorizontalPodAutoscaler,
  'kubernetes-models/autoscaling/v2',
  'IHorizontalPodAutoscaler',
);
model(
  'networking.k8s.io/v1',
  'NetworkPolicy',
  networking.NetworkPolicy,
  'kubernetes-models/networking.k8s.io/v1',
  'INetworkPolicy',
);
model(
  'keda.sh/v1alpha1',
  'ScaledObject',
  keda.ScaledObject,
  '@kubernetes-models/keda/keda.sh/v1alpha1',
  'IScaledObject',
);
model(
  'keda.sh/v1alpha1',
  'TriggerAuthentication',
  keda.TriggerAuthentication,
  '@kubernetes-models/keda/keda.sh/v1alpha1',
  'ITriggerAuthentication',
);
model(
  'monitoring.coreos.com/v1',
  'ServiceMonitor',
  monitoring.ServiceMonitor,
  '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1',
  'IServiceMonitor',
);
model(
  'monitoring.coreos.com/v1',
  'PrometheusRule',
  monitoring.PrometheusRule,
  '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1',
  'IPrometheusRule',
);
const ajv = new Ajv({ allErrors: true, strict: true });
for (const [key, file] of [
  ['rabbitmq.com/v1beta1/RabbitmqCluster', 'rabbitmqcluster.rabbitmq.com-v1beta1.json'],
  ['postgresql.cnpg.io/v1/Cluster', 'cluster.postgresql.cnpg.io-v1.json'],
] as const) {
  const check = ajv.compile(JSON.parse(readFileSync(new URL(`deploy/k8s/schemas/${file}`, repo), 'utf8')));
  kinds[key] = {
    validate: (o: Obj) => {
      const kind = String(o.kind);
      if (!check(o)) throw new Error(ajv.errorsText(check.errors, { dataVar: kind }));
    },
  };
}

function render(dir: string): Obj[] {
  const out = execFileSync('kubectl', ['kustomize', `deploy/k8s/${dir}`], {
    cwd: repoPath,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return YAML.parseAllDocuments(out)
    .map((d) => d.toJS() as Obj)
    .filter(Boolean);
}

/**
 * Type-checks every object as a literal of its kind's TypeScript type in one in-memory program:
 * excess (unknown or misspelt) properties and wrong types are errors. Returns the messages.
 */
function strictCheck(docs: Obj[]): string[] {
  const lines: string[] = [];
  const owner: number[] = [];
  const imports = new Map<string, Set<string>>();
  docs.forEach((d, i) => {
    const t = kinds[`${d.apiVersion}/${d.kind}`]?.type;
    if (!t) return;
    if (!imports.has(t[0])) imports.set(t[0], new Set());
    imports.get(t[0])!.add(t[1]);
    const body = JSON.stringify(d, null, 1).split('\n');
    body[0] = `export const doc${i}: ${t[1]} = ${body[0]}`;
    for (const l of body) {
      lines.push(l);
      owner.push(i);
    }
  });
  const head = [...imports].map(([m, names]) => `import type { ${[...names].join(', ')} } from '${m}';`);
  const text = [...head, ...lines].join('\n');
  const file = fileURLToPath(new URL('test/__k8s_strict_check__.ts', repo));
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) =>
    name === file ? ts.createSourceFile(name, text, lang) : getSourceFile(name, lang, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file?.fileName === file || !d.file)
    .map((d) => {
      const msg = ts.flattenDiagnosticMessageText(d.messageText, '\n');
      if (!d.file || d.start === undefined) return msg;
      const line = d.file.getLineAndCharacterOfPosition(d.start).line - head.length;
      const doc = docs[owner[line] ?? -1];
      return `${doc ? `${doc.kind}/${doc.metadata?.name}` : 'imports'}: ${msg}`;
    });
}

/** A memory quantity in MiB (the forms these manifests use). */
const mebibytes = (q: string) => {
  const m = /^(\d+)(Mi|Gi)$/.exec(q);
  assert.ok(m, `memory quantity ${q}`);
  return Number(m[1]) * (m[2] === 'Gi' ? 1024 : 1);
};
const byKind = (docs: Obj[], kind: string) => docs.filter((d) => d.kind === kind);
const one = (docs: Obj[], kind: string, name: string) => {
  const found = docs.filter((d) => d.kind === kind && d.metadata?.name === name);
  assert.equal(found.length, 1, `${kind}/${name} present once`);
  return found[0]!;
};
const matches = (selector: Record<string, string>, labels: Record<string, string> = {}) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

/** Labels of the pods the operators create (what faxline's selectors may point at). */
const operatorPods = [{ 'app.kubernetes.io/name': 'faxline-rabbitmq' }, { 'cnpg.io/cluster': 'faxline-db' }];

const entryPoints: Record<string, string> = {
  api: 'src/api-main.ts',
  'send-worker': 'workers/send.ts',
  'cancel-worker': 'workers/cancel.ts',
  scheduler: 'workers/scheduler.ts',
  events: 'workers/events.ts',
  'amqp-intake': 'workers/amqp-intake.ts',
  mail: 'workers/mail.ts',
};
const workerKinds = Object.keys(entryPoints);

for (const dir of ['base', 'overlays/small', 'overlays/large', 'overlays/sip']) {
  describe(`deploy/k8s/${dir}`, () => {
    let docs: Obj[];
    before(() => {
      docs = render(dir);
    });

    it('renders, and every object is of a known kind and valid against its schema', () => {
      assert.ok(docs.length >= 30, `rendered ${docs.length} objects`);
      const problems: string[] = [];
      const seen = new Set<string>();
      for (const d of docs) {
        const key = `${d.apiVersion}/${d.kind}`;
        const name = `${d.kind}/${d.metadata?.name}`;
        assert.ok(!seen.has(name), `${name} appears once`);
        seen.add(name);
        const k = kinds[key];
        if (!k) {
          problems.push(`${name}: ${key} is not a kind these manifests may use`);
          continue;
        }
        try {
          k.validate(d);
        } catch (err) {
          problems.push(`${name}: ${(err as Error).message}`);
        }
      }
      assert.deepEqual(problems, []);
    });

    it('has no unknown or misspelt fields (strict check against the kinds’ types)', () => {
      assert.deepEqual(strictCheck(docs), []);
    });

    it('runs each process kind from the same image, hardened, with probes and resources', () => {
      const deployments = byKind(docs, 'Deployment');
      assert.deepEqual(
        deployments.map((d) => d.metadata.name).sort(),
        workerKinds.map((k) => `faxline-${k}`).sort(),
      );
      const images = new Set<string>();
      for (const d of deployments) {
        const kind = d.metadata.name.replace(/^faxline-/, '');
        assert.equal(d.spec.replicas, undefined, `${kind}: replicas are left to the autoscaler`);
        assert.ok(matches(d.spec.selector.matchLabels, d.spec.template.metadata.labels), `${kind}: selector`);
        const pod = d.spec.template.spec;
        assert.equal(pod.securityContext.runAsNonRoot, true);
        assert.equal(pod.automountServiceAccountToken, false);
        assert.equal(pod.containers.length, 1);
        const c = pod.containers[0];
        images.add(c.image);
        assert.deepEqual(c.args, [entryPoints[kind]], `${kind}: entry point`);
        assert.ok(existsSync(new URL(c.args[0], repo)), `${c.args[0]} exists`);
        assert.equal(c.securityContext.readOnlyRootFilesystem, true);
        assert.equal(c.securityContext.allowPrivilegeEscalation, false);
        assert.deepEqual(c.securityContext.capabilities.drop, ['ALL']);
        for (const r of ['requests', 'limits'])
          for (const res of ['cpu', 'memory']) assert.ok(c.resources?.[r]?.[res], `${kind}: ${r}.${res}`);
        const portNames = new Set((c.ports ?? []).map((p: Obj) => p.name));
        for (const [probe, path] of [
          ['startupProbe', '/healthz'],
          ['livenessProbe', '/healthz'],
          ['readinessProbe', '/readyz'],
        ] as const) {
          assert.equal(c[probe]?.httpGet?.path, path, `${kind}: ${probe}`);
          assert.ok(portNames.has(c[probe].httpGet.port), `${kind}: ${probe} port is a container port`);
        }
        // The process listens where the probes look: PORT for the API, METRICS_PORT for workers.
        const env = Object.fromEntries((c.env ?? []).map((e: Obj) => [e.name, e.value]));
        const port = c.ports[0].containerPort;
        assert.equal(
          Number(kind === 'api' ? env.PORT : env.METRICS_PORT),
          port,
          `${kind}: listens on ${port}`,
        );
        if (kind === 'send-worker') {
          // PDF checks run in sandbox processes: their number is fixed (0 would follow the node's cores,
          // not the pod's) and the pod's memory holds the worker plus every sandbox at its cap.
          const sandboxes = Number(env.PDF_CHECK_CONCURRENCY);
          assert.ok(sandboxes >= 1, 'PDF_CHECK_CONCURRENCY set');
          // Render processes too (src/documents/render/pool.ts), each at its cap, plus the one reserve
          // process the pool may start beyond its size for light accounts (issue 27).
          const renderers = (Number(env.RENDER_PROCESSES ?? 1) + 1) * Number(env.RENDER_MEMORY_MB ?? 256);
          assert.ok(Number(env.RENDER_PROCESSES ?? 1) >= 1, 'RENDER_PROCESSES fixed, not per node core');
          // The worker itself: 320 MiB (its measured peak in bench:hostile was 275 MB).
          const need = 320 + sandboxes * Number(env.PDF_CHECK_MEMORY_MB ?? 512) + renderers;
          assert.ok(
            mebibytes(c.resources.limits.memory) >= need,
            `send-worker memory limit covers ${need} MiB`,
          );
        }
        if (kind === 'api') {
          // Previews are checked in the API pod's own sandbox processes and rendered in its own render
          // processes, each at its cap; the sandboxes' number is fixed (0 would follow the node's cores).
          const sandboxes = Number(env.PDF_CHECK_CONCURRENCY);
          assert.ok(sandboxes >= 1, 'api: PDF_CHECK_CONCURRENCY set');
          const need =
            256 +
            sandboxes * Number(env.PDF_CHECK_MEMORY_MB ?? 512) +
            (Number(env.RENDER_PREVIEW_PROCESSES ?? 1) + 1) * Number(env.RENDER_MEMORY_MB ?? 256);
          assert.ok(mebibytes(c.resources.limits.memory) >= need, `api memory limit covers ${need} MiB`);
        }
        // Draining gets its time: the pod's grace period outlasts SHUTDOWN_GRACE_SECONDS.
        assert.ok(pod.terminationGracePeriodSeconds > Number(env.SHUTDOWN_GRACE_SECONDS), `${kind}: grace`);
      }
      assert.equal(images.size, 1, 'one image for every process kind');
      const job = one(docs, 'Job', 'faxline-migrate');
      assert.deepEqual(job.spec.template.spec.containers[0].args, ['src/admin/cli.ts', 'migrate']);
      assert.ok(
        images.has(job.spec.template.spec.containers[0].image),
        'the migration Job runs the same image',
      );
    });

    it('configures processes only with faxline configuration variables, from objects that exist', () => {
      const known = new Set(Object.keys(variables));
      const configMaps = new Map(byKind(docs, 'ConfigMap').map((c) => [c.metadata.name, c]));
      const secretRefs = new Set<string>();
      for (const w of [...byKind(docs, 'Deployment'), ...byKind(docs, 'Job')]) {
        for (const c of w.spec.template.spec.containers) {
          for (const e of c.env ?? []) {
            assert.ok(known.has(e.name), `${w.metadata.name}: ${e.name} is a configuration variable`);
            if (e.valueFrom?.secretKeyRef)
              secretRefs.add(`${e.valueFrom.secretKeyRef.name}/${e.valueFrom.secretKeyRef.key}`);
          }
          for (const f of c.envFrom ?? []) {
            const cm = configMaps.get(f.configMapRef?.name);
            assert.ok(cm, `${w.metadata.name}: ConfigMap ${f.configMapRef?.name} is rendered`);
            for (const k of Object.keys(cm.data))
              assert.ok(known.has(k), `ConfigMap key ${k} is a configuration variable`);
          }
        }
      }
      // Secrets come from the operators (CloudNativePG's app secret) or the operator's runbook (AMQP URL).
      // The SIP overlay adds the trunk's credentials (its own Secret, see its kustomization).
      assert.deepEqual([...secretRefs].sort(), [
        'faxline-amqp/url',
        'faxline-db-app/uri',
        'faxline-kek/keys',
        ...(dir === 'overlays/sip' ? ['faxline-sip/password', 'faxline-sip/username'] : []),
      ]);
      // Encryption at rest is on by default and a process without a key-encryption key does not start
      // (docs/encryption.md): every Deployment's container gets the keys from the Secret faxline-kek.
      for (const d of byKind(docs, 'Deployment'))
        for (const c of d.spec.template.spec.containers)
          assert.ok(
            (c.env ?? []).some(
              (e: { name: string; valueFrom?: { secretKeyRef?: { name: string } } }) =>
                e.name === 'KEK' && e.valueFrom?.secretKeyRef?.name === 'faxline-kek',
            ),
            `${d.metadata.name}/${c.name}: KEK from the Secret faxline-kek`,
          );
      const cfg = configMaps.values().next().value!.data;
      assert.equal(cfg.MIGRATE_ON_START, 'false', 'migrations run in the Job, once per release');
      assert.equal(cfg.DB_CREATE, 'false');
      assert.equal(cfg.QUEUE_TYPE, 'quorum');
    });

    it('gives every Deployment an autoscaler and a disruption budget, and every Service a backend', () => {
      const deployments = byKind(docs, 'Deployment');
      const scaled = [
        ...byKind(docs, 'HorizontalPodAutoscaler').map((h) => h.spec.scaleTargetRef.name),
        ...byKind(docs, 'ScaledObject').map((s) => s.spec.scaleTargetRef.name),
      ];
      for (const d of deployments) {
        assert.equal(
          scaled.filter((n) => n === d.metadata.name).length,
          1,
          `${d.metadata.name}: one autoscaler`,
        );
        const labels = d.spec.template.metadata.labels;
        const pdbs = byKind(docs, 'PodDisruptionBudget').filter((p) =>
          matches(p.spec.selector.matchLabels, labels),
        );
        assert.equal(pdbs.length, 1, `${d.metadata.name}: one PodDisruptionBudget`);
      }
      assert.equal(scaled.length, deployments.length, 'no autoscaler points at nothing');
      const hpa = one(docs, 'HorizontalPodAutoscaler', 'faxline-api');
      assert.equal(hpa.spec.scaleTargetRef.kind, 'Deployment');
      assert.ok(hpa.spec.minReplicas >= 2 && hpa.spec.maxReplicas > hpa.spec.minReplicas);
      for (const s of byKind(docs, 'Service')) {
        const backends = deployments.filter((d) => matches(s.spec.selector, d.spec.template.metadata.labels));
        assert.equal(backends.length, 1, `Service ${s.metadata.name} selects one Deployment`);
        const ports = new Set(backends[0]!.spec.template.spec.containers[0].ports.map((p: Obj) => p.name));
        for (const p of s.spec.ports)
          assert.ok(ports.has(p.targetPort), `${s.metadata.name}: port ${p.targetPort}`);
      }
    });

    it('scales each worker kind with KEDA on the queues the topology declares', () => {
      const prefix = byKind(docs, 'ConfigMap')[0]!.data.QUEUE_PREFIX as string;
      const names = topologyNames(prefix);
      const auths = new Set(byKind(docs, 'TriggerAuthentication').map((a) => a.metadata.name));
      const queuesOf = (name: string) => {
        const so = one(docs, 'ScaledObject', name);
        assert.ok(so.spec.minReplicaCount >= 1 && so.spec.maxReplicaCount >= so.spec.minReplicaCount, name);
        for (const t of so.spec.triggers)
          assert.ok(auths.has(t.authenticationRef?.name), `${name}: auth exists`);
        return so.spec.triggers
          .filter((t: Obj) => t.type === 'rabbitmq')
          .map((t: Obj) => {
            assert.equal(t.metadata.mode, 'QueueLength');
            assert.ok(Number(t.metadata.value) > 0);
            return t.metadata.queueName as string;
          })
          .sort();
      };
      assert.deepEqual(queuesOf('faxline-send-worker'), [names.queue('forward'), names.queue('send')].sort());
      assert.deepEqual(queuesOf('faxline-cancel-worker'), [names.queue('cancel')]);
      assert.deepEqual(queuesOf('faxline-amqp-intake'), [names.intake]);
      for (const pgScaled of ['faxline-scheduler', 'faxline-events']) {
        assert.deepEqual(queuesOf(pgScaled), [], `${pgScaled} scales on a PostgreSQL backlog`);
        assert.equal(one(docs, 'ScaledObject', pgScaled).spec.triggers[0].type, 'postgresql');
      }
      // Every command queue has a scaler.
      const watched = byKind(docs, 'ScaledObject').flatMap((s) =>
        s.spec.triggers.map((t: Obj) => t.metadata.queueName),
      );
      for (const t of commandTypes)
        assert.ok(watched.includes(names.queue(t)), `${names.queue(t)} is watched`);
    });

    it('asks the operators for replicated RabbitMQ (3 nodes, quorum queues) and PostgreSQL', () => {
      const rmq = one(docs, 'RabbitmqCluster', 'faxline-rabbitmq');
      assert.equal(rmq.spec.replicas, 3);
      assert.ok(rmq.spec.rabbitmq.additionalPlugins.includes('rabbitmq_prometheus'));
      assert.ok(rmq.spec.rabbitmq.additionalPlugins.includes('rabbitmq_management'));
      assert.match(rmq.spec.rabbitmq.additionalConfig, /quorum_queue\.initial_cluster_size = 3/);
      const pgc = one(docs, 'Cluster', 'faxline-db');
      assert.ok(pgc.spec.instances >= 3);
      assert.equal(pgc.spec.bootstrap.initdb.database, 'faxline');
    });

    it('points network policies at pods that exist', () => {
      const pods = [
        ...byKind(docs, 'Deployment').map((d) => d.spec.template.metadata.labels),
        ...byKind(docs, 'Job').map((j) => j.spec.template.metadata.labels),
      ];
      const policies = byKind(docs, 'NetworkPolicy');
      assert.ok(
        policies.some((p) => p.spec.policyTypes.includes('Ingress') && p.spec.policyTypes.includes('Egress')),
      );
      for (const p of policies) {
        assert.ok(
          pods.some((l) => matches(p.spec.podSelector.matchLabels, l)),
          `${p.metadata.name} selects pods`,
        );
        for (const rule of p.spec.egress ?? [])
          for (const to of rule.to ?? [])
            if (to.podSelector && !to.namespaceSelector)
              assert.ok(
                [...pods, ...operatorPods].some((l) => matches(to.podSelector.matchLabels, l)),
                `${p.metadata.name}: egress to ${JSON.stringify(to.podSelector.matchLabels)}`,
              );
      }
      // Every Deployment's pods are covered by a default-deny policy.
      const deny = policies.find((p) => !p.spec.ingress && !p.spec.egress)!;
      for (const l of pods) assert.ok(matches(deny.spec.podSelector.matchLabels, l));
    });

    it('scrapes and alerts like deploy/prometheus', async () => {
      const services = byKind(docs, 'Service');
      for (const sm of byKind(docs, 'ServiceMonitor')) {
        const sel = sm.spec.selector.matchLabels;
        const target = services.find((s) => matches(sel, s.metadata.labels));
        if (target) {
          for (const e of sm.spec.endpoints)
            assert.ok(
              target.spec.ports.some((p: Obj) => p.name === e.port),
              `${sm.metadata.name}: port ${e.port}`,
            );
        } else {
          assert.ok(
            operatorPods.some((l) => matches(sel, l)),
            `${sm.metadata.name} selects a faxline or operator Service`,
          );
        }
      }
      const rule = one(docs, 'PrometheusRule', 'faxline');
      assert.ok(rule.spec.groups.length > 0, 'the PrometheusRule has rule groups');
      const strip = (s: string) => YAML.parseAllDocuments(s).map((d) => d.toJS());
      const inRepo = (f: string) => readFileSync(new URL(`deploy/k8s/base/${f}`, repo), 'utf8');
      const hint = 'deploy/prometheus changed: run `npm run deploy:monitoring`';
      assert.deepEqual(strip(inRepo('servicemonitor.yaml')), strip(await buildServiceMonitors()), hint);
      assert.deepEqual(strip(inRepo('prometheusrule.yaml')), strip(await buildPrometheusRule()), hint);
    });

    if (dir !== 'base')
      it('puts everything in the faxline namespace', () => {
        for (const d of docs)
          if (d.kind !== 'Namespace')
            assert.equal(d.metadata.namespace, 'faxline', `${d.kind}/${d.metadata.name}`);
      });
  });
}

describe('deploy/k8s overlays', () => {
  it('the large installation scales further than the small one', () => {
    const small = render('overlays/small');
    const large = render('overlays/large');
    for (const name of ['faxline-send-worker', 'faxline-cancel-worker']) {
      assert.ok(
        one(large, 'ScaledObject', name).spec.maxReplicaCount >
          one(small, 'ScaledObject', name).spec.maxReplicaCount,
        name,
      );
    }
    assert.ok(
      one(large, 'HorizontalPodAutoscaler', 'faxline-api').spec.maxReplicas >
        one(small, 'HorizontalPodAutoscaler', 'faxline-api').spec.maxReplicas,
    );
    const conns = (docs: Obj[]) =>
      Number(one(docs, 'Cluster', 'faxline-db').spec.postgresql.parameters.max_connections);
    // PostgreSQL connections cover the largest fleet: per process its pool plus pg-boss's 4; an API
    // process also has the API role's pool (DB_POOL_SIZE again) and the group commit's (default 1),
    // and so has the mail gateway (its intake is the API's).
    for (const docs of [small, large]) {
      let needed = 0;
      for (const d of byKind(docs, 'Deployment')) {
        const max =
          docs.find((s) => s.kind === 'ScaledObject' && s.spec.scaleTargetRef.name === d.metadata.name)?.spec
            .maxReplicaCount ??
          docs.find(
            (h) => h.kind === 'HorizontalPodAutoscaler' && h.spec.scaleTargetRef.name === d.metadata.name,
          )?.spec.maxReplicas;
        const env = Object.fromEntries(
          d.spec.template.spec.containers[0].env.map((e: Obj) => [e.name, e.value]),
        );
        const pool = Number(env.DB_POOL_SIZE);
        const perProcess =
          d.metadata.name === 'faxline-api' || d.metadata.name === 'faxline-mail'
            ? 2 * pool + 4 + Number(env.INTAKE_COMMIT_CONCURRENCY ?? 1)
            : pool + 4;
        needed += max * perProcess;
      }
      assert.ok(
        conns(docs) >= needed + 10,
        `max_connections ${conns(docs)} covers ${needed} + superuser slack`,
      );
    }
  });
});

describe('deploy/k8s/overlays/sip', () => {
  it('runs send workers as SIP user agents on the node network, one per node, within the trunk', () => {
    const docs = render('overlays/sip');
    const cfg = byKind(docs, 'ConfigMap')[0]!.data;
    assert.equal(cfg.BACKEND, 'sip');
    assert.match(cfg.SIP_TRUNK, /^sip:/);
    const d = one(docs, 'Deployment', 'faxline-send-worker');
    const pod = d.spec.template.spec;
    assert.equal(pod.hostNetwork, true, 'the trunk reaches the worker that placed the call');
    assert.equal(
      pod.dnsPolicy,
      'ClusterFirstWithHostNet',
      'cluster DNS (RabbitMQ, PostgreSQL) still resolves',
    );
    const anti = pod.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0];
    assert.equal(
      anti.topologyKey,
      'kubernetes.io/hostname',
      'two workers never share a node (and its ports)',
    );
    const c = pod.containers[0];
    const env = Object.fromEntries(c.env.map((e: Obj) => [e.name, e]));
    assert.equal(env.SIP_PUBLIC_ADDRESS.valueFrom.fieldRef.fieldPath, 'status.hostIP');
    const sipPort = Number(cfg.SIP_LISTEN.split(':').at(-1));
    assert.deepEqual(
      c.ports
        .filter((p: Obj) => p.containerPort === sipPort)
        .map((p: Obj) => p.protocol)
        .sort(),
      ['TCP', 'UDP'],
    );
    // LINES is the trunk's channels across all workers; the workers at their maximum carry them all,
    // and each worker's RTP range holds its calls (one even port each).
    const maxWorkers = one(docs, 'ScaledObject', 'faxline-send-worker').spec.maxReplicaCount;
    const perWorker = Number(env.WORKER_MAX_CALLS.value);
    assert.ok(maxWorkers * perWorker >= Number(cfg.LINES), 'the workers can carry every line');
    const [lo, hi] = (cfg.RTP_PORTS as string).split('-').map(Number);
    assert.ok(hi! - lo! + 1 >= 2 * perWorker, 'RTP_PORTS holds a worker’s calls');
  });
});
