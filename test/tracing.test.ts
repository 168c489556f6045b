// Traces without content (issue 32, part 4): a local OTLP/HTTP receiver on loopback takes what the
// service exports. One fax sent over HTTP and delivered on the simulated line is one trace: the HTTP
// request, the publish to RabbitMQ, its consumption, the send worker's preparation and the line call
// share one trace id. No span name, attribute, event, link or status of any exported span (nor any
// byte of the export) holds the fax number, the document's text, the subject, the file name or the
// names. Exported as protobuf (the default), then, after a restart of tracing, as JSON.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import protobuf from 'protobufjs';
import { PDFDocument, StandardFonts } from 'pdf-lib';
// Tracing starts before the service's modules load (as src/entry.ts does): pg, amqplib and fastify
// are imported below, dynamically, once the instrumentations are in place.
import { startTracing, type Telemetry } from '../src/telemetry.ts';

/** The subset of the OTLP trace protobuf schema the receiver reads (opentelemetry-proto, v1). */
const OTLP_PROTO = `
syntax = "proto3";
package otlp;
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message ScopeSpans { Scope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message Scope { string name = 1; string version = 2; repeated KeyValue attributes = 3; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4;
  string name = 5; int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; uint32 dropped_attributes_count = 10; repeated Event events = 11;
  uint32 dropped_events_count = 12; repeated Link links = 13; uint32 dropped_links_count = 14;
  Status status = 15; fixed32 flags = 16;
}
message Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; }
message Link { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; repeated KeyValue attributes = 4; }
message Status { string message = 2; int32 code = 3; }
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue {
  oneof value {
    string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
    ArrayValue array_value = 5; KeyValueList kvlist_value = 6; bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
`;
const ExportRequest = protobuf.parse(OTLP_PROTO).root.lookupType('otlp.ExportTraceServiceRequest');

interface SeenSpan {
  encoding: 'protobuf' | 'json';
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** Everything the span says, as text: attributes, events, links, status (for the content check). */
  text: string;
  attrs: Record<string, unknown>;
  links: string[];
}

const hex = (b: unknown): string =>
  typeof b === 'string' ? b : b instanceof Uint8Array ? Buffer.from(b).toString('hex') : '';

interface RawSpan {
  traceId?: unknown;
  spanId?: unknown;
  parentSpanId?: unknown;
  name?: string;
  attributes?: { key: string; value?: Record<string, unknown> }[];
  events?: unknown[];
  links?: { traceId?: unknown }[];
  status?: unknown;
}

function collect(encoding: SeenSpan['encoding'], req: unknown, into: SeenSpan[]): void {
  const r = req as { resourceSpans?: { scopeSpans?: { spans?: RawSpan[] }[] }[] };
  for (const rs of r.resourceSpans ?? [])
    for (const ss of rs.scopeSpans ?? [])
      for (const s of ss.spans ?? []) {
        const attrs: Record<string, unknown> = {};
        for (const a of s.attributes ?? []) attrs[a.key] = Object.values(a.value ?? {})[0];
        into.push({
          encoding,
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          name: s.name ?? '',
          text: JSON.stringify([s.name, s.attributes, s.events, s.links, s.status]),
          attrs,
          links: (s.links ?? []).map((l) => hex(l.traceId)),
        });
      }
}

/** An OTLP/HTTP receiver: POST /v1/traces, protobuf or JSON; keeps the spans and the raw bodies. */
async function receiver(): Promise<{
  url: string;
  spans: SeenSpan[];
  raw: Buffer[];
  close(): Promise<void>;
}> {
  const spans: SeenSpan[] = [];
  const raw: Buffer[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      raw.push(body);
      const type = req.headers['content-type'] ?? '';
      if (req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      if (type.startsWith('application/x-protobuf')) {
        collect('protobuf', ExportRequest.toObject(ExportRequest.decode(body), { longs: String }), spans);
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      } else {
        collect('json', JSON.parse(body.toString('utf8')), spans);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    raw,
    // The exporter's keep-alive connections would hold close() open: they are ended first.
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const otlp = await receiver();
let telemetry: Telemetry = await startTracing({
  endpoint: otlp.url,
  protocol: 'http/protobuf',
  serviceName: 'faxline-test',
  processName: 'all',
  simple: true,
});
const { call, seedAccount, tokenFor } = await import('./support/client.ts');
const { eventually, startService } = await import('./support/harness.ts');
const { loadMediaEngine } = await import('../src/transmission/sip/media-engine.ts');
const sipMedia = loadMediaEngine() !== null;

/** What must never leave in a span: the fax's number (in any spelling), text, subject, names. */
const SECRET = {
  number: '+15557340921',
  text: 'Hemoglobin A1c for Rosalind Quimby',
  subject: 'Lab results Quimby',
  fileName: 'quimby-chart.pdf',
  sender: 'Dr Amadeus Pollard',
  recipient: 'Rosalind Quimby',
};
const forbidden = [
  SECRET.number,
  SECRET.number.slice(1), // 15557340921
  SECRET.number.slice(2), // 5557340921
  '7340921',
  SECRET.text,
  'Hemoglobin',
  SECRET.subject,
  SECRET.fileName,
  'quimby',
  'Quimby',
  'Pollard',
];

async function documentBase64(): Promise<string> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  doc.addPage([612, 792]).drawText(SECRET.text, { x: 72, y: 700, size: 14, font });
  return Buffer.from(await doc.save()).toString('base64');
}

describe('tracing: one fax, one trace, no content', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let token: string;
  // Serves the document for a send by file_url; its URL names the patient and carries a token.
  let docs: http.Server;
  let docUrl: string;
  before(async () => {
    const pdf = Buffer.from(await documentBase64(), 'base64');
    docs = http.createServer((_req, res) =>
      res.writeHead(200, { 'content-type': 'application/pdf' }).end(pdf),
    );
    await new Promise<void>((r) => docs.listen(0, '127.0.0.1', r));
    docUrl = `http://127.0.0.1:${(docs.address() as AddressInfo).port}/Quimby/${SECRET.fileName}?token=Quimby`;
    s = await startService({ env: { FETCH_ALLOW_HOSTS: '127.0.0.1' } });
    const seed = await seedAccount(s);
    token = await tokenFor(s.url, seed.api_key);
  });
  after(async () => {
    await s.dropAll();
    await new Promise((r) => docs.close(r));
    await telemetry.shutdown();
    await otlp.close();
  });

  /** Sends the fax over HTTP and waits until it is delivered and its line call's span arrived. */
  async function sendTraced(
    encoding: SeenSpan['encoding'],
    o: { byUrl?: boolean } = {},
  ): Promise<{ jobId: string; trace: SeenSpan[] }> {
    const sent = await call(s.url, 'POST', '/v1/faxes/send?ref=quimby', {
      token,
      body: {
        fax_number: SECRET.number,
        subject: SECRET.subject,
        sender_name: SECRET.sender,
        recipient_name: SECRET.recipient,
        fax_data: [
          o.byUrl
            ? { file_name: SECRET.fileName, file_url: docUrl }
            : { file_name: SECRET.fileName, file_data: await documentBase64() },
        ],
      },
    });
    assert.equal(sent.http, 200, JSON.stringify(sent.body));
    const jobId = sent.body.data.job_id as string;
    await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${jobId}`, { token });
      return r.body.data?.state === 'delivered' ? r : null;
    });
    const callSpan = await eventually(async () =>
      otlp.spans.find(
        (x) => x.encoding === encoding && x.name === 'fax.call' && x.attrs['faxline.job_id'] === jobId,
      ),
    );
    const request = otlp.spans.find(
      (x) =>
        x.encoding === encoding &&
        x.name === 'request' &&
        x.attrs['http.route'] === '/v1/faxes/send' &&
        x.traceId === callSpan.traceId,
    );
    assert.ok(request, `the line call's trace ${callSpan.traceId} starts at the HTTP request`);
    return { jobId, trace: otlp.spans.filter((x) => x.traceId === callSpan.traceId) };
  }

  function assertNoContent(): void {
    assert.ok(otlp.spans.length > 0);
    for (const sp of otlp.spans)
      for (const f of forbidden) assert.ok(!sp.text.includes(f), `span ${sp.name} holds "${f}": ${sp.text}`);
    // Also no byte of any export (protobuf or JSON), resource attributes included.
    for (const body of otlp.raw)
      for (const f of forbidden) assert.ok(!body.includes(Buffer.from(f)), `an export holds "${f}"`);
  }

  it('exports a fax from its HTTP request to its line call as one trace (protobuf)', async () => {
    const { jobId, trace } = await sendTraced('protobuf');
    const names = new Set(trace.map((x) => x.name));
    for (const n of ['request', 'fax.prepare', 'fax.check', 'fax.render', 'fax.call'])
      assert.ok(names.has(n), `span ${n} in the fax's trace; have ${[...names].join(', ')}`);
    assert.ok(
      trace.some(
        (x) => x.name.startsWith('publish ') && x.attrs['messaging.rabbitmq.routing_key'] === 'send',
      ),
      'the command publish (amqplib) is in the trace',
    );
    assert.ok(
      trace.some((x) => x.name.endsWith(' process') && x.attrs['messaging.rabbitmq.routing_key'] === 'send'),
      'the command consumption (amqplib) is in the trace',
    );
    assert.ok(
      trace.some((x) => x.name.startsWith('pg.query')),
      'PostgreSQL statements are in the trace',
    );
    const prepare = trace.find((x) => x.name === 'fax.prepare')!;
    assert.equal(prepare.attrs['faxline.job_id'], jobId);
    assert.equal(prepare.attrs['faxline.state'], 'queued');
    const callSpan = trace.find((x) => x.name === 'fax.call')!;
    assert.equal(callSpan.attrs['faxline.outcome'], 'delivered');
    // The URL's query string is not kept, statements carry no parameter values.
    const request = trace.find((x) => x.name === 'request')!;
    assert.equal(request.attrs['url.path'], '/v1/faxes/send');
    assertNoContent();
  });

  it('exports as OTLP JSON when asked, with the same trace and no content', async () => {
    await telemetry.shutdown();
    telemetry = await startTracing({
      endpoint: otlp.url,
      protocol: 'http/json',
      serviceName: 'faxline-test',
      processName: 'all',
      simple: true,
    });
    const { trace } = await sendTraced('json');
    const names = new Set(trace.map((x) => x.name));
    for (const n of ['request', 'fax.prepare', 'fax.call'])
      assert.ok(names.has(n), `span ${n} in the fax's trace; have ${[...names].join(', ')}`);
    assertNoContent();
  });

  it('traces the download of a file_url document as a client span of the fax, without its URL', async () => {
    const { trace } = await sendTraced('json', { byUrl: true });
    const fetch = trace.find((x) => x.name === 'document.fetch');
    assert.ok(fetch, `a document.fetch span in the fax's trace; have ${trace.map((x) => x.name).join(', ')}`);
    const parent = trace.find((x) => x.spanId === fetch.parentSpanId);
    assert.ok(
      parent && parent.name.startsWith('fax.'),
      `its parent is a span of the send worker, not ${parent?.name}`,
    );
    assert.equal(fetch.attrs['http.response.status_code'], 200);
    assert.ok(Number(fetch.attrs['faxline.bytes']) > 0);
    assert.doesNotMatch(fetch.text, /127\.0\.0\.1|token|\/Quimby\//, 'no URL, host or query in the span');
    assertNoContent();
  });

  it(
    'traces a fax over the SIP line: INVITE, re-INVITE and BYE are spans of the call; the inbound call has its own trace; no number in any',
    { skip: !sipMedia && 'the SIP media engine is not built (npm run build:native)' },
    async () => {
      // The service calls itself over SIP on loopback (as receive-sip.test.ts does): account A sends,
      // a number of account B receives.
      const { portBlock, sipPort } = await import('./support/telephony/ports.ts');
      const { twoAccounts } = await import('./support/accounts.ts');
      const sip = await sipPort();
      const rtp = await portBlock('rtp', 16, { align: 16 });
      const t = await twoAccounts({
        BACKEND: 'sip',
        SIP_RECEIVE: 'true',
        SIP_LISTEN: `127.0.0.1:${sip}`,
        SIP_PUBLIC_ADDRESS: '127.0.0.1',
        SIP_TRUNK: `sip:127.0.0.1:${sip};transport=udp`,
        SIP_INBOUND_ALLOW: '127.0.0.1',
        SIP_T38: 'prefer',
        RTP_PORTS: `${rtp}-${rtp + 15}`,
      });
      try {
        const to = t.b.numbers[0]!;
        const sent = await t.api('POST', '/v1/faxes/send', t.tokenA, {
          fax_number: to,
          fax_data: [{ file_name: SECRET.fileName, file_data: await documentBase64() }],
        });
        assert.equal(sent.http, 200, JSON.stringify(sent.body));
        const jobId = sent.body.data.job_id as string;
        const job = await eventually(
          async () => {
            const j = await t.api('GET', `/v1/faxes/${jobId}`, t.tokenA);
            return ['delivered', 'failed', 'unknown'].includes(j.body.data?.state) ? j.body.data : null;
          },
          150_000,
          500,
        );
        assert.equal(job.state, 'delivered', JSON.stringify(job));
        const callSpan = await eventually(async () =>
          otlp.spans.find((x) => x.name === 'fax.call' && x.attrs['faxline.job_id'] === jobId),
        );
        const childrenOf = (parent: SeenSpan, name: string) =>
          otlp.spans.filter((x) => x.name === name && x.parentSpanId === parent.spanId);
        const invite = await eventually(async () => childrenOf(callSpan, 'sip.invite')[0]);
        assert.equal(Number(invite.attrs['faxline.sip.status']), 200);
        const inbound = await eventually(async () =>
          otlp.spans.find((x) => x.name === 'sip.inbound_call' && x.attrs['faxline.receive.ok'] === true),
        );
        assert.equal(inbound.parentSpanId, '', 'the inbound call starts its own trace');
        assert.notEqual(inbound.traceId, callSpan.traceId);
        assert.equal(Number(inbound.attrs['faxline.pages']), 1);
        // One side hangs up (the receiver, once it has the sender's DCN): one BYE, a span of that
        // side's call (it may end after the call's own span: it waits for the answer).
        const byes = await eventually(async () => {
          const b = [...childrenOf(callSpan, 'sip.bye'), ...childrenOf(inbound, 'sip.bye')];
          return b.length > 0 ? b : null;
        });
        assert.equal(byes.length, 1, 'one BYE');
        // Both ends ask for T.38 (SIP_T38=prefer): the caller's re-INVITE is a span of its call
        // whether it was accepted or met the callee's at once (491) and waited.
        const reinvites = otlp.spans.filter(
          (x) =>
            x.name === 'sip.reinvite' &&
            (x.parentSpanId === callSpan.spanId || x.parentSpanId === inbound.spanId),
        );
        assert.ok(reinvites.length >= 1, 'a re-INVITE to T.38 is traced');
        assert.ok(
          reinvites.some((x) => Number(x.attrs['faxline.sip.status']) === 200),
          `one re-INVITE was accepted: ${reinvites.map((x) => x.attrs['faxline.sip.status']).join(', ')}`,
        );
        // No number of either side in any span (every spelling of the last 7 digits).
        for (const n of [to, t.a.numbers[0]!])
          for (const sp of otlp.spans)
            assert.ok(!sp.text.includes(n.slice(-7)), `span ${sp.name} holds a number: ${sp.text}`);
        assertNoContent();
      } finally {
        await t.close();
      }
    },
  );
});
