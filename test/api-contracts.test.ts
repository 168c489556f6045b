// The published contracts: /openapi.json lists every route the server registers (it is generated
// from the routes), and /openapi.json and /asyncapi.json are valid against their specifications'
// schemas, checked by maintained validators (@seriousme/openapi-schema-validator for OpenAPI 3.1,
// @asyncapi/parser for AsyncAPI 3).
import { Parser } from '@asyncapi/parser';
import { Validator } from '@seriousme/openapi-schema-validator';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { tags } from '../src/api/openapi.ts';
import { startService } from './support/harness.ts';

/** Registered on purpose outside the customer API document: probes, metrics and the documents. */
const NOT_IN_OPENAPI = [
  'GET /asyncapi.json',
  'GET /docs',
  'GET /healthz',
  'GET /metrics',
  'GET /openapi.json',
  'GET /readyz',
];

const HTTP_METHODS = ['get', 'post', 'put', 'patch', 'delete', 'head', 'options', 'trace'];

/**
 * "METHOD /path/{param}" of every route, read from Fastify's route tree (printRoutes with full
 * segments): each line is a node at 4 characters of indent per level, its methods in parentheses.
 */
function registeredRoutes(tree: string): string[] {
  const out: string[] = [];
  const stack: string[] = [];
  const lines = tree.split('\n').filter((l) => l.trim() !== '');
  assert.ok(lines.length > 0 && lines.length < 10_000, 'a route tree of sensible size');
  for (const line of lines) {
    const m = /^([│ ]*)[├└]── (\S+)(?: \(([A-Z, ]+)\))?$/.exec(line);
    assert.ok(m, `route tree line understood: ${JSON.stringify(line)}`);
    const depth = m[1]!.length / 4;
    assert.ok(Number.isInteger(depth) && depth <= stack.length, `indent of ${JSON.stringify(line)}`);
    stack.length = depth;
    const path = (stack.at(-1) ?? '') + m[2]!;
    stack.push(path);
    for (const method of (m[3] ?? '').split(', ').filter(Boolean))
      if (method !== 'HEAD') out.push(`${method} ${path.replace(/:([A-Za-z0-9_]+)/g, '{$1}')}`);
  }
  return out.sort();
}

type Operation = {
  tags?: string[];
  summary?: string;
  operationId?: string;
  security?: unknown[];
  responses: Record<string, { description?: string; content?: Record<string, unknown> }>;
};

/** Answers whose body is a file, with their media types. */
const binaryAnswers: Record<string, string[]> = {
  'get /v1/faxes/{job_id}/report 200': ['application/pdf'],
  'get /v1/faxes/{job_id}/image 200': ['image/tiff', 'application/pdf'],
  'get /v1/received-faxes/{id}/pdf 200': ['application/pdf'],
  'get /v1/received-faxes/{id}/tiff 200': ['image/tiff'],
};

describe('published contracts', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let openapi: { paths: Record<string, Record<string, Operation>> } & Record<string, unknown>;

  before(async () => {
    s = await startService();
    const r = await fetch(`${s.url}/openapi.json`);
    assert.equal(r.status, 200);
    openapi = (await r.json()) as typeof openapi;
  });
  after(async () => {
    await s.dropAll();
  });

  it('/openapi.json lists every route the server registers, except the named internal ones', () => {
    const routes = registeredRoutes(s.running.http.printRoutes({ commonPrefix: false }));
    for (const r of NOT_IN_OPENAPI) assert.ok(routes.includes(r), `${r} is registered (the list is current)`);
    // The web console's pages (docs/console.md) are not part of the customer API.
    const consolePages = routes.filter((r) => / \/console(\/|$)/.test(r));
    assert.ok(consolePages.includes('GET /console/sign-in'), 'the console is registered');
    const documented = Object.entries(openapi.paths)
      .flatMap(([path, ops]) =>
        Object.keys(ops)
          .filter((m) => HTTP_METHODS.includes(m))
          .map((m) => `${m.toUpperCase()} ${path}`),
      )
      .sort();
    assert.deepEqual(
      documented,
      routes.filter((r) => !NOT_IN_OPENAPI.includes(r) && !consolePages.includes(r)),
    );
    // The operations issue 17 found missing from the hand-kept list.
    for (const r of [
      'POST /v1/faxes/preview',
      'POST /v1/webhooks',
      'GET /v1/webhooks',
      'DELETE /v1/webhooks/{id}',
      'GET /v1/webhooks/{id}/deliveries',
    ])
      assert.ok(documented.includes(r), r);
  });

  it('every operation has a spec tag, a summary, a unique operationId, its security and described answers', () => {
    assert.deepEqual(
      (openapi.tags as { name: string }[]).map((t) => t.name),
      [...tags],
    );
    const ids = new Set<string>();
    for (const [path, ops] of Object.entries(openapi.paths))
      for (const [method, op] of Object.entries(ops)) {
        const name = `${method} ${path}`;
        assert.equal(op.tags?.length, 1, name);
        assert.ok((tags as readonly string[]).includes(op.tags[0]!), `${name}: tag ${op.tags[0]}`);
        assert.ok(op.summary, `${name}: summary`);
        assert.ok(op.operationId && !ids.has(op.operationId), `${name}: operationId`);
        ids.add(op.operationId);
        assert.ok(Array.isArray(op.security), `${name}: security`);
        for (const code of ['200', '404', '405', '500']) assert.ok(op.responses[code], `${name} ${code}`);
        for (const [code, r] of Object.entries(op.responses)) {
          assert.ok(r.description && r.description !== 'Default Response', `${name} ${code}: description`);
          // The proof-of-transmission files and the received faxes' downloads are the only bodies that
          // are not the JSON envelope.
          const binary = binaryAnswers[`${name} ${code}`];
          if (binary) assert.deepEqual(Object.keys(r.content ?? {}), binary, `${name} ${code}: ${binary}`);
          else assert.ok(r.content?.['application/json'], `${name} ${code}: JSON body`);
        }
      }
  });

  it('/openapi.json is a valid OpenAPI 3.1 document', async () => {
    const validator = new Validator();
    const res = await validator.validate(structuredClone(openapi));
    assert.equal(validator.version, '3.1');
    assert.ok(res.valid, JSON.stringify(res.errors, null, 2));
  });

  it('/asyncapi.json is a valid AsyncAPI 3 document', async () => {
    const r = await fetch(`${s.url}/asyncapi.json`);
    assert.equal(r.status, 200);
    const text = await r.text();
    const { document, diagnostics } = await new Parser().parse(text);
    // Severity 0 is an error; warnings and hints (style advice) do not make the document invalid.
    const errors = diagnostics.filter((d) => d.severity === 0);
    assert.deepEqual(
      errors.map((d) => `${d.path.join('.')}: ${d.message}`),
      [],
    );
    assert.ok(document, 'parsed');
    assert.equal(document.version(), '3.0.0');
    assert.deepEqual(
      document
        .operations()
        .all()
        .map((o) => o.id())
        .sort(),
      ['receiveEvents', 'sendCommand'],
    );
  });
});
