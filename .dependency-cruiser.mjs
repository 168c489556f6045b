// The layers of src/ and the rules that keep them pointing down (docs/source-layout.md, "Layers").
// `npm run deps:layers` checks them; test/layers.test.ts shows that each rule catches a violation.
//
// A module may import its own layer and any layer below it, never one above. Layers, bottom first:
const layers = [
  {
    // The customer contract and the rules of the state machine: job states, command messages, ids and
    // E.164, the envelope with ApiError and the messages, the zod request schemas and parseBody.
    // No I/O (see the rule domain-is-pure).
    name: 'domain',
    paths: ['^src/domain/'],
  },
  {
    // Process-wide helpers with no knowledge of faxes: logger, clock, deadlines, the polling loop,
    // the tracing helpers on the OpenTelemetry API (trace.ts).
    name: 'base',
    paths: ['^src/(clock|deadline|log|pid|poll-loop|trace)[.]ts$'],
  },
  {
    // Drivers: PostgreSQL (pool, migrations, tenant-scoped access), RabbitMQ (broker, topology), the
    // Prometheus registry and its collectors, and the SIP user agent (it knows nothing of faxes).
    name: 'drivers',
    paths: ['^src/(db|amqp|metrics|sip)/'],
  },
  {
    // Resources built on the drivers: documents (fetch, PDF check, render, store), keys, tokens and
    // senders (auth), job SQL and the command publisher (jobs), the line backends (transmission), and
    // the configuration (it parses FETCH_ALLOW_HOSTS with documents/addresses.ts, so it sits here).
    name: 'resources',
    paths: ['^src/(documents|auth|jobs|transmission|audit)/', '^src/config[.]ts$'],
  },
  {
    // The flow of a fax: intake (accepting commands), the scheduler of scheduled faxes, the RabbitMQ
    // consumers (send, cancel), the line caller, the event relay and webhook delivery; and what an
    // account sets up itself (contacts, numbers and the caller id rule, API keys, workspace usage); the
    // receiving side (inbound call routing, received-fax storage and its events).
    name: 'flow',
    paths: ['^src/(intake|scheduler|consumers|lines|events|webhooks|accounts|receive)/'],
  },
  {
    // Adapters: the HTTP API, the AMQP intake, the admin CLI, the SMTP gateway. Each is a leaf: no adapter imports
    // another (rule adapters-are-independent); only the wiring imports them.
    name: 'adapters',
    paths: ['^src/(api|amqp-intake|admin|mail)/'],
  },
  {
    // The wiring and the entry points: builds every long-lived resource and starts the components;
    // starts tracing before the rest loads (entry.ts, telemetry.ts).
    name: 'wiring',
    paths: ['^src/(app|main|api-main|run|components|entry|telemetry)[.]ts$', '^workers/'],
  },
  {
    // The typed client (faxline/client) and the `faxline` CLI on it: built on the public HTTP
    // contract only, so they import nothing else of src/ (rule client-stands-alone).
    name: 'client',
    paths: ['^src/(client|cli)/'],
  },
];

const upward = layers.slice(0, -1).map((layer, i) => ({
  name: `no-upward-from-${layer.name}`,
  severity: 'error',
  comment: `The ${layer.name} layer may import only itself and the layers below it.`,
  from: { path: layer.paths },
  to: { path: layers.slice(i + 1).flatMap((l) => l.paths) },
}));

const adapters = ['api', 'amqp-intake', 'admin'];

/** @type {import('dependency-cruiser').IConfiguration} */
export default {
  forbidden: [
    ...upward,
    {
      name: 'adapters-are-independent',
      severity: 'error',
      comment:
        'An adapter (HTTP, AMQP intake, admin CLI) never imports another: what they share lives lower.',
      // `$1` in `to` is the folder the `from` path matched: any adapter but the importer's own.
      from: { path: `^src/(${adapters.join('|')})/` },
      to: { path: `^src/(${adapters.join('|')})/`, pathNot: '^src/$1/' },
    },
    {
      name: 'domain-is-pure',
      severity: 'error',
      comment: 'The domain imports only the domain, zod and node:crypto (ids): no driver, no I/O.',
      from: { path: '^src/domain/' },
      to: { pathNot: ['^src/domain/', '(^|/)node_modules/zod/', '^(node:)?crypto$'] },
    },
    {
      name: 'client-stands-alone',
      severity: 'error',
      comment:
        'The client and the CLI speak to the service over HTTP only: they import no other part of src/ (the CLI imports the client).',
      from: { path: '^src/(client|cli)/' },
      to: { path: '^(src|workers)/', pathNot: '^src/(client|cli)/' },
    },
    {
      name: 'in-a-layer',
      severity: 'error',
      comment:
        'Every module of src/ and workers/ belongs to a layer: name a new folder in one of the layers above.',
      from: {},
      to: { path: '^(src|workers)/', pathNot: layers.flatMap((l) => l.paths) },
    },
    {
      // The same from the importing side: a module no one imports (a new entry point, say) is outside
      // the rule above, and outside every no-upward rule too, unless its own imports are caught here.
      name: 'importer-in-a-layer',
      severity: 'error',
      comment:
        'Every module of src/ and workers/ belongs to a layer: name a new folder in one of the layers above.',
      from: { path: '^(src|workers)/', pathNot: layers.flatMap((l) => l.paths) },
      to: {},
    },
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No import cycle, type-only imports included.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'not-to-unresolvable',
      severity: 'error',
      comment: 'Every import resolves to a file or a package.',
      from: {},
      to: { couldNotResolve: true },
    },
    {
      name: 'not-to-tests-or-tools',
      severity: 'error',
      comment:
        'Tests, benchmarks, scripts and examples may import anything, but nothing in src/ or workers/ imports them.',
      from: { path: '^(src|workers)/' },
      to: { path: '^(test|bench|scripts|examples)/' },
    },
  ],
  options: {
    doNotFollow: { path: ['node_modules'] },
    // Type-only imports count: a type from a higher layer is an upward dependency too.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    // node_modules is a symbolic link in worktrees: keep the paths as written.
    preserveSymlinks: true,
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
  },
};
