// How each entry point picks its ops port, the METRICS_ENABLED switch, and bounded label values.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { createMetrics } from '../src/metrics/registry.ts';
import { nameKind, routingKeyType } from '../src/metrics/labels.ts';
import { defaultOpsPorts, opsPort } from '../src/components.ts';

describe('ops port and metrics switch', () => {
  it('the API and the all-in-one process serve /metrics on PORT', () => {
    const cfg = loadConfig({ PORT: '8081', METRICS_PORT: '9999' });
    assert.equal(opsPort(cfg, ['api']), 8081);
    assert.equal(opsPort(cfg, ['api', 'send', 'cancel', 'scheduler']), 8081);
  });

  it('worker-only processes use METRICS_PORT, or a port per worker kind when it is auto', () => {
    const auto = loadConfig({});
    assert.equal(auto.METRICS_PORT, 'auto');
    assert.equal(opsPort(auto, ['send']), 9464);
    assert.equal(opsPort(auto, ['cancel']), 9465);
    assert.equal(opsPort(auto, ['scheduler']), 9466);
    assert.equal(
      new Set(Object.values(defaultOpsPorts)).size,
      Object.keys(defaultOpsPorts).length,
      'one machine can run every kind',
    );
    assert.equal(opsPort(loadConfig({ METRICS_PORT: '9500' }), ['cancel']), 9500);
    assert.throws(() => loadConfig({ METRICS_PORT: 'ninety' }), /METRICS_PORT: expected auto or a port/);
  });

  it('METRICS_ENABLED=false leaves an empty registry and metrics that do nothing', async () => {
    assert.equal(loadConfig({ METRICS_ENABLED: 'false' }).METRICS_ENABLED, false);
    const off = createMetrics('x', { enabled: false });
    off.httpRequests.inc({ route: '/r', method: 'GET', status: '200' });
    off.httpDuration.observe({ route: '/r', method: 'GET' }, 0.1);
    off.linesInUse.inc({ backend: 'simulated' });
    assert.equal((await off.registry.metrics()).trim(), '');
    const on = createMetrics('x');
    on.httpRequests.inc({ route: '/r', method: 'GET', status: '200' });
    assert.match(
      await on.registry.metrics(),
      /faxline_http_requests_total\{route="\/r",method="GET",status="200",process="x"\} 1/,
    );
  });

  it('labels from exchange, queue and routing-key names never carry an identifier', () => {
    assert.equal(nameKind('faxline.commands'), 'commands');
    assert.equal(nameKind('t_ab12.cmd.send'), 'send');
    assert.equal(nameKind('faxline.dead-letter'), 'dead-letter');
    assert.equal(routingKeyType('send'), 'send');
    assert.equal(routingKeyType('3f2c9a10-1b2c-4d5e-8f90-0123456789ab.fax.delivered'), 'fax.delivered');
    assert.equal(routingKeyType('acct.12345.fax.page_sent'), 'acct.fax.page_sent');
    assert.equal(routingKeyType('Some Weird/Key'), 'other');
  });
});
