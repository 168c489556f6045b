// The one place that reads process.env. Every variable is listed here, with its default and meaning;
// README.md's configuration table is written from this list (test/config.test.ts checks they agree).
import { z } from 'zod';

const int = (def: number, min: number, max: number) =>
  z
    .string()
    .default(String(def))
    .transform((s, ctx) => {
      const n = Number(s);
      if (!/^-?\d+$/.test(s.trim()) || !Number.isSafeInteger(n)) {
        ctx.addIssue({ code: 'custom', message: `expected an integer, got "${s}"` });
        return z.NEVER;
      }
      if (n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `expected ${min}..${max}, got ${n}` });
        return z.NEVER;
      }
      return n;
    });

const num = (def: number, min: number, max: number) =>
  z
    .string()
    .default(String(def))
    .transform((s, ctx) => {
      const n = Number(s);
      if (s.trim() === '' || !Number.isFinite(n) || n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `expected a number in ${min}..${max}, got "${s}"` });
        return z.NEVER;
      }
      return n;
    });

const bool = (def: boolean) =>
  z
    .enum(['true', 'false', '1', '0', 'yes', 'no'], { message: 'expected true or false' })
    .default(def ? 'true' : 'false')
    .transform((s) => s === 'true' || s === '1' || s === 'yes');

const url = (def: string, protocols: string[]) =>
  z
    .string()
    .default(def)
    .refine(
      (s) => {
        try {
          return protocols.includes(new URL(s).protocol);
        } catch {
          return false;
        }
      },
      { message: `expected a URL starting with ${protocols.join(' or ')}` },
    );

/** name → [schema, meaning]. The meaning is documentation, printed by `npm run admin -- config`. */
export const variables = {
  PORT: [int(8080, 0, 65535), 'HTTP port of the API (customer API, /metrics, /healthz, /readyz).'],
  HOST: [z.string().min(1).default('0.0.0.0'), 'Address the HTTP servers bind to.'],
  DATABASE_URL: [
    url('postgres://postgres@127.0.0.1:5432/faxline', ['postgres:', 'postgresql:']),
    'PostgreSQL connection string. The database is created on start when missing and DB_CREATE is true.',
  ],
  DB_CREATE: [bool(true), 'Create the database named in DATABASE_URL when it does not exist.'],
  DB_POOL_SIZE: [int(10, 1, 200), 'Connections in each process’s PostgreSQL pool.'],
  AMQP_URL: [url('amqp://guest:guest@127.0.0.1:5672', ['amqp:', 'amqps:']), 'RabbitMQ connection string.'],
  QUEUE_PREFIX: [
    z
      .string()
      .regex(/^[a-z][a-z0-9_-]{0,40}$/, 'expected lowercase letters, digits, - or _')
      .default('faxline'),
    'Prefix of every RabbitMQ exchange and queue name (lets several installations share a broker).',
  ],
  QUEUE_TYPE: [
    z.enum(['quorum', 'classic']).default('quorum'),
    'RabbitMQ queue type for command queues. Quorum queues are replicated; keep quorum in production.',
  ],
  DELIVERY_LIMIT: [
    int(5, 1, 100),
    'Deliveries of one command before it is dead-lettered with its reason (poison-message guard).',
  ],
  SEND_PREFETCH: [int(32, 1, 5000), 'Unacknowledged send/forward commands one worker process holds at once.'],
  PGBOSS_SCHEMA: [
    z
      .string()
      .regex(/^[a-z_][a-z0-9_]{0,50}$/)
      .default('pgboss'),
    'PostgreSQL schema where pg-boss keeps its tables.',
  ],
  LOG_LEVEL: [
    z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    'pino log level.',
  ],
  METRICS_PORT: [
    int(9464, 0, 65535),
    'Port of /metrics, /healthz and /readyz on worker-only processes (the API serves them on PORT).',
  ],
  BACKEND: [z.enum(['simulated']).default('simulated'), 'Transmission backend.'],
  SIM_SPEEDUP: [
    num(1, 0, 1_000_000),
    'Simulated line: divide line time by this factor (1 = real time; 0 = no line time at all).',
  ],
  MAX_DOCUMENT_BYTES: [
    int(20 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    'Largest PDF accepted, per document.',
  ],
  MAX_REQUEST_BYTES: [
    int(50 * 1024 * 1024, 1024, 2 * 1024 * 1024 * 1024),
    'Largest HTTP request body (Base64 adds a third to a PDF’s size).',
  ],
  OUTBOX_SWEEP_SECONDS: [
    int(10, 1, 3600),
    'How often the dispatcher republishes commands of accepted jobs whose publish was not confirmed.',
  ],
  SHUTDOWN_GRACE_SECONDS: [int(25, 1, 3600), 'Time allowed to drain in-flight work on SIGTERM.'],
  API_DATABASE_URL: [
    z
      .string()
      .default('')
      .refine((s) => s === '' || /^postgres(ql)?:/.test(s), {
        message: 'expected a postgres:// URL or empty',
      }),
    'PostgreSQL connection string of the customer API’s request handling: a role that cannot bypass row-level security (see Security). Empty: DATABASE_URL with the user faxline_api and no password.',
  ],
  RATE_LIMIT_PER_SECOND: [
    num(50, 0, 1_000_000),
    'Customer API requests per second allowed per account and API process (token bucket; 0 = no limit).',
  ],
  RATE_LIMIT_BURST: [
    int(100, 1, 10_000_000),
    'Requests an account may make at once above its rate (bucket size).',
  ],
  IDEMPOTENCY_TTL_HOURS: [int(24, 1, 24 * 30), 'How long an Idempotency-Key of send/forward is remembered.'],
  CURSOR_SECRET: [
    z
      .string()
      .default('')
      .refine((s) => s === '' || s.length >= 16, { message: 'expected at least 16 characters, or empty' }),
    'HMAC key of pagination cursors. Empty: a random key kept in the database (table server_secrets), shared by every API process.',
  ],
  INTAKE_BATCH_MAX: [
    int(64, 1, 1000),
    'Most send/forward requests committed together in one PostgreSQL transaction (group commit).',
  ],
} as const;

type Vars = typeof variables;
export type Config = { [K in keyof Vars]: z.output<Vars[K][0]> };

export class ConfigError extends Error {
  readonly issues: string[];
  constructor(issues: string[]) {
    super(`Invalid configuration:\n${issues.map((i) => `  - ${i}`).join('\n')}`);
    this.name = 'ConfigError';
    this.issues = issues;
  }
}

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const out: Record<string, unknown> = {};
  const issues: string[] = [];
  for (const [name, [schema]] of Object.entries(variables)) {
    const raw = env[name];
    const r = (schema as z.ZodType).safeParse(raw === '' ? undefined : raw);
    if (r.success) out[name] = r.data;
    else issues.push(`${name}: ${r.error.issues.map((i) => i.message).join('; ')}`);
  }
  if (issues.length > 0) throw new ConfigError(issues);
  return out as Config;
}

/** For entry points: parse, or print what is wrong and exit non-zero. */
export function loadConfigOrExit(): Config {
  try {
    return loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`faxline: ${err.message}\n`);
      process.exit(78); // EX_CONFIG
    }
    throw err;
  }
}
