import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../../metrics/registry.ts';
import { internal } from '../openapi.ts';

export type Readiness = () => Promise<{
  ready: boolean;
  checks: Record<string, boolean>;
  /** Facts that do not decide readiness (encryption on or off). */
  details?: Record<string, string>;
}>;

/** /healthz (alive), /readyz (dependencies reachable), /metrics (Prometheus). */
export function registerOpsRoutes(app: FastifyInstance, d: { metrics: Metrics; readiness: Readiness }): void {
  app.get('/healthz', { schema: internal }, async () => ({ status: 1, message: 'alive' }));
  app.get('/readyz', { schema: internal }, async (_req, reply) => {
    const r = await d.readiness();
    void reply.code(r.ready ? 200 : 503);
    return {
      status: r.ready ? 1 : 0,
      message: r.ready ? 'ready' : 'not ready',
      data: { ...r.checks, ...r.details },
    };
  });
  app.get('/metrics', { schema: internal }, async (_req, reply) => {
    void reply.header('content-type', d.metrics.registry.contentType);
    return d.metrics.registry.metrics();
  });
}
