// The components a process can run, and which port it serves /metrics, /healthz and /readyz on.
// The wiring (`app.ts`) starts the components an entry point names. The API (and the all-in-one
// process) serve the ops endpoints next to the customer API on PORT. A worker-only process uses
// METRICS_PORT, or, when it is `auto`, a default per worker kind so that one machine can run every
// kind at once.
export type Component = 'api' | 'send' | 'cancel' | 'scheduler' | 'events' | 'intake' | 'mail';
// `mail` does something only when SMTP_LISTEN or SMTP_RELAY is set (docs/mail.md).
export const allComponents: Component[] = ['api', 'send', 'cancel', 'scheduler', 'events', 'intake', 'mail'];

export const defaultOpsPorts: Readonly<Record<Exclude<Component, 'api'>, number>> = {
  send: 9464,
  cancel: 9465,
  scheduler: 9466,
  events: 9467,
  intake: 9468,
  mail: 9469,
};

export function opsPort(
  cfg: { PORT: number; METRICS_PORT: number | 'auto' },
  components: readonly Component[],
): number {
  if (components.includes('api')) return cfg.PORT;
  if (cfg.METRICS_PORT !== 'auto') return cfg.METRICS_PORT;
  const first = components.find((c): c is Exclude<Component, 'api'> => c !== 'api');
  return first ? defaultOpsPorts[first] : defaultOpsPorts.send;
}
