// Container health check (Dockerfile HEALTHCHECK): alive when the process answers /healthz, on PORT
// (the API) or on METRICS_PORT (worker-only processes). Exit 0 = healthy, 1 = unhealthy.
const ports = [process.env.PORT ?? '8080', process.env.METRICS_PORT ?? '9464'];
for (const port of ports) {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2000) });
    if (res.ok) process.exit(0);
  } catch {
    // not this port
  }
}
process.exit(1);
