// The one place that reads process.env. Every variable is listed here, with its default and meaning;
// docs/configuration.md's table is written from this list (test/config.test.ts checks they agree).
import { z } from 'zod';
import { parseAllowList } from './documents/addresses.ts';
import { E164_PATTERN } from './domain/e164.ts';
import { parsePgUrl } from './db/hosts.ts';

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

/** One URL or several separated by commas (the nodes of a RabbitMQ cluster). */
const urlList = (def: string, protocols: string[]) =>
  z
    .string()
    .default(def)
    .refine(
      (s) =>
        s.split(',').every((one) => {
          try {
            return protocols.includes(new URL(one.trim()).protocol);
          } catch {
            return false;
          }
        }),
      { message: `expected a URL starting with ${protocols.join(' or ')} (several: separated by commas)` },
    );

/** A PostgreSQL URL with one host or several (libpq's host1:port1,host2:port2 form); '' if `def` is. */
const pgUrl = (def: string) =>
  z
    .string()
    .default(def)
    .superRefine((s, ctx) => {
      if (s === '' && def === '') return;
      try {
        parsePgUrl(s);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
      }
    });

/** name → [schema, meaning]. The meaning is documentation, printed by `npm run admin -- config`. */
export const variables = {
  PORT: [int(8080, 0, 65535), 'HTTP port of the API (customer API, /metrics, /healthz, /readyz).'],
  HOST: [z.string().min(1).default('0.0.0.0'), 'Address the HTTP servers bind to.'],
  DATABASE_URL: [
    pgUrl('postgres://postgres@127.0.0.1:5432/faxline'),
    'PostgreSQL connection string; the database is created on start when missing and DB_CREATE is true. Several hosts (h1:5432,h2:5432) with target_session_attrs=read-write: connections follow the primary (docs/clustering.md).',
  ],
  DB_CREATE: [bool(true), 'Create the database named in DATABASE_URL when it does not exist.'],
  DB_POOL_SIZE: [int(10, 1, 200), 'Connections in each process’s PostgreSQL pool.'],
  MIGRATE_ON_START: [
    bool(true),
    "Apply pending migrations at start. false: wait for the release's migration step (admin migrate).",
  ],
  AMQP_URL: [
    urlList('amqp://guest:guest@127.0.0.1:5672', ['amqp:', 'amqps:']),
    'RabbitMQ connection string, or several separated by commas (the nodes of a cluster): each reconnect tries the next one (docs/clustering.md).',
  ],
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
  SEND_PREFETCH: [
    int(256, 1, 5000),
    'Unacknowledged send/forward commands one worker process holds at once; those beyond PREPARE_CONCURRENCY wait in the process, queued per account, so one account’s backlog cannot hold the whole window.',
  ],
  PREPARE_CONCURRENCY: [
    int(4, 1, 256),
    'Jobs one send worker process prepares (fetch, check, render) at once.',
  ],
  PREPARE_ACCOUNT_CONCURRENCY: [
    int(2, 1, 256),
    'Of PREPARE_CONCURRENCY, the most jobs of one account prepared at once while another account waits (its share); an account alone may use every place but one (work-conserving). The others wait their turn, accounts taking turns.',
  ],
  PREPARE_ACCOUNT_BACKLOG: [
    int(64, 1, 5000),
    'Commands of one account waiting for preparation in one send worker process; beyond it a command is parked (its job stays accepted). The worker republishes parked commands itself once half of this or less waits; those it does not (its process ended) the outbox sweep republishes after PREPARE_PARK_SECONDS.',
  ],
  PREPARE_PARK_SECONDS: [
    int(10, 1, 3600),
    'How long a parked command waits before the outbox sweep (API, scheduler) republishes it, when the send worker that parked it has not taken it back first (it does as soon as it has room).',
  ],
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
  LOG_PHI: [
    bool(false),
    'Allow fax numbers, caller ids and names in log lines (docs/observability.md#what-the-log-may-contain). Off: they are censored at every level.',
  ],
  OTEL_EXPORTER_OTLP_ENDPOINT: [
    z
      .string()
      .default('')
      .refine((s) => s === '' || /^https?:\/\/[^\s?#]+$/.test(s), {
        message: 'expected an http(s) URL without query, e.g. http://collector:4318',
      }),
    'OpenTelemetry collector base URL (traces go to <url>/v1/traces, docs/observability.md#tracing). Empty: tracing off, no SDK loaded.',
  ],
  OTEL_EXPORTER_OTLP_PROTOCOL: [
    z.enum(['http/protobuf', 'http/json']).default('http/protobuf'),
    'OTLP encoding of exported spans: http/protobuf or http/json.',
  ],
  OTEL_SERVICE_NAME: [
    z.string().min(1).max(100).default('faxline'),
    'service.name of the exported spans (the process kind is added as faxline.process).',
  ],
  METRICS_PORT: [
    z
      .string()
      .default('auto')
      .transform((s, ctx): number | 'auto' => {
        if (s.trim() === 'auto') return 'auto';
        if (!/^\d+$/.test(s.trim()) || Number(s) > 65535) {
          ctx.addIssue({ code: 'custom', message: `expected auto or a port 0..65535, got "${s}"` });
          return z.NEVER;
        }
        return Number(s);
      }),
    'Port of /metrics, /healthz and /readyz on worker-only processes; auto = 9464 for the send worker, 9465 cancel, 9466 scheduler, 9467 events, 9468 AMQP intake (src/components.ts). The API and the all-in-one process serve them on PORT.',
  ],
  METRICS_DB_SECONDS: [
    int(15, 0, 3600),
    'API and scheduler processes: the service-wide gauges (jobs by state, outbox, scheduled) are read from PostgreSQL at most once per this many seconds; 0 = this process does not export them.',
  ],
  METRICS_ENABLED: [
    bool(true),
    'Export Prometheus metrics. false turns every metric into a no-op (used to measure their cost); /metrics then answers an empty page.',
  ],
  BACKEND: [
    z.enum(['simulated', 'loopback', 'sip']).default('simulated'),
    'Transmission backend: `simulated` (line physics, test numbers), `loopback` (real T.30 through SpanDSP; needs `npm run build:native`) or `sip` (real fax calls on a SIP trunk, docs/sip.md; needs `npm run build:native`).',
  ],
  SIP_TRUNK: [
    z
      .string()
      .default('sip:127.0.0.1:5060;transport=udp')
      .refine(
        (s) => /^sip:(?:[^@;?\s]+@)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::\d{1,5})?(;[^?\s]*)?$/.test(s),
        {
          message: 'expected a SIP URI such as sip:trunk.example.net:5060;transport=udp',
        },
      )
      .refine((s) => !/;transport=(?!udp\b|tcp\b)/i.test(s), { message: 'transport must be udp or tcp' }),
    'SIP line: the trunk (carrier, PBX or proxy) every fax call goes to, as a SIP URI; `;transport=tcp` for TCP. The Request-URI is sip:<E.164 number with +>@<trunk host>.',
  ],
  SIP_USERNAME: [
    z.string().default(''),
    'SIP line: user name for digest authentication at the trunk (401/407), and the user registered when SIP_REGISTER is true; empty: no authentication.',
  ],
  SIP_PASSWORD: [z.string().default(''), 'SIP line: digest password for SIP_USERNAME.'],
  SIP_LISTEN: [
    z
      .string()
      .default('0.0.0.0:5060')
      .refine(
        (s) => /^(\[[0-9a-fA-F:.]+\]|[0-9.]+):\d{1,5}$/.test(s) && Number(s.split(':').at(-1)) <= 65535,
        {
          message: 'expected address:port, e.g. 0.0.0.0:5060',
        },
      ),
    'SIP line: address:port the user agent binds, on UDP and TCP both.',
  ],
  SIP_PUBLIC_ADDRESS: [
    z.string().default(''),
    'SIP line: address written in Via, Contact and SDP (the address the trunk reaches this worker at, e.g. behind NAT); empty: the SIP_LISTEN address, or the first non-loopback IPv4 address when it is 0.0.0.0.',
  ],
  SIP_T38: [
    z.enum(['prefer', 'accept', 'off']).default('accept'),
    'SIP line: T.38. `accept`: switch to T.38 when the far end re-INVITEs to it; `prefer`: also ask for it ourselves after answer (a 488 keeps audio); `off`: G.711 audio only.',
  ],
  SIP_AUDIO_CONCEAL: [
    z.enum(['repeat', 'silence']).default('repeat'),
    'SIP line: what a lost RTP packet is played to the fax modem as on audio calls: `repeat` the last 20 ms (keeps the carrier up, so ECM can repair the page), or `silence`. docs/lines-retries.md has the measurement.',
  ],
  SIP_REGISTER: [
    bool(false),
    'SIP line: register SIP_USERNAME at SIP_TRUNK and refresh it (for trunks that send calls only to registered users).',
  ],
  SIP_RECEIVE: [
    bool(false),
    'SIP line: this send worker also answers inbound calls on SIP_LISTEN and receives faxes for the numbers that receive (docs/receiving.md: run it in one process, or in several behind Kamailio’s dispatcher).',
  ],
  SIP_RING_TIMEOUT_S: [
    int(60, 5, 600),
    'SIP line: seconds a call may ring before we CANCEL it; it then fails as no_answer.',
  ],
  SIP_MEDIA_TIMEOUT_S: [
    int(20, 2, 600),
    'SIP line: seconds without any RTP or UDPTL packet from the far end after which a call (sending or receiving) is ended with BYE; fax never suppresses silence, so a live far end always sends. Sending: call_dropped (MEDIA_TIMEOUT); receiving: a failed reception with that reason.',
  ],
  RTP_PORTS: [
    z
      .string()
      .default('20000-20999')
      .transform((s, ctx) => {
        const m = /^(\d{1,5})-(\d{1,5})$/.exec(s.trim());
        const min = Number(m?.[1]);
        const max = Number(m?.[2]);
        if (!m || min < 1024 || max > 65535 || max < min + 1) {
          ctx.addIssue({ code: 'custom', message: `expected a port range such as 20000-20999, got "${s}"` });
          return z.NEVER;
        }
        return { min, max };
      }),
    'SIP line: UDP ports for media (RTP audio and UDPTL T.38 share one even port per call); open them in the firewall.',
  ],
  LOOPBACK_TRANSPORT: [
    z.enum(['audio', 't38']).default('t38'),
    'Loopback line: T.30 over audio modems or over T.38.',
  ],
  LOOPBACK_ECM: [bool(true), 'Loopback line: offer error correction mode (needed for T.6/MMR on the line).'],
  SIM_SPEEDUP: [
    num(1, 0, 1_000_000),
    'Simulated line: divide line time by this factor (1 = real time; 0 = no line time at all).',
  ],
  LINES: [
    int(4, 1, 100_000),
    'Lines of the transmission backend across the whole installation (calls in progress at once, all worker processes together).',
  ],
  WORKER_MAX_CALLS: [int(1000, 1, 100_000), 'Calls one worker process drives at once.'],
  DESTINATION_MAX_CALLS: [
    int(1, 0, 1000),
    'Calls in progress at once to one destination number; others wait as blocked (0 = no limit).',
  ],
  PRIORITY_AGING_SECONDS: [
    num(900, 0, 86_400 * 7),
    'A regular fax ready for longer than this is served like a high one (regular faxes are never starved).',
  ],
  LINE_LEASE_SECONDS: [
    num(30, 0.2, 3600),
    'Lease of a worker on a call in progress, renewed every third of it; a lapsed lease means the worker died.',
  ],
  LINE_POLL_MS: [
    int(500, 5, 60_000),
    'How often the line caller looks for ready jobs and lapsed leases (one statement when there is nothing to do). A job queued or a call ended in the same process starts a round at once; a retry falling due sooner gets a round at its due time.',
  ],
  CALL_TIMEOUT_SECONDS: [num(1800, 0.1, 86_400), 'Deadline of one call; the call is aborted after it.'],
  UNKNOWN_OUTCOME_POLICY: [
    z.enum(['reconcile', 'mark', 'retry']).default('reconcile'),
    'When a worker died during a call: reconcile = ask the backend, else mark unknown; mark = mark unknown; retry = call again (may send twice).',
  ],
  RETRY_BUSY_SECONDS: [num(180, 0, 86_400), 'Wait before calling again after a busy signal.'],
  RETRY_NO_ANSWER_SECONDS: [num(300, 0, 86_400), 'Wait before calling again after no answer.'],
  RETRY_PROTOCOL_SECONDS: [
    num(60, 0, 86_400),
    'Wait before calling again after a dropped call or fax protocol error.',
  ],
  RETRY_OTHER_SECONDS: [
    num(300, 0, 86_400),
    'Wait before calling again after other retryable failures (no fax tone, backend error).',
  ],
  MAX_DIALS: [int(12, 1, 1000), 'Calls placed for one fax before it is given up.'],
  MAX_TRIES: [
    int(3, 1, 1000),
    'Calls that reached the fax machine (dropped, protocol error) before the fax is given up.',
  ],
  KILL_TIME_SECONDS: [
    num(10_800, 1, 86_400 * 30),
    'No new call is placed once this long has passed since the fax was first ready to send.',
  ],
  MAX_DOCUMENT_BYTES: [
    int(20 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    'Largest PDF accepted, per document.',
  ],
  BROADCAST_MAX_RECIPIENTS: [
    int(1000, 1, 10_000),
    'Most recipients of one broadcast (POST /v1/faxes/send with recipients, HTTP and AMQP); more → 422.',
  ],
  BROADCAST_RECIPIENTS_PER_SECOND: [
    num(20, 0, 1_000_000),
    'Broadcast recipients per second allowed per account, shared by every API and AMQP intake process (a token bucket in PostgreSQL; one token per recipient; 0 = no rate). More → 429 with Retry-After, nothing written.',
  ],
  BROADCAST_RECIPIENTS_BURST: [
    int(1000, 1, 10_000_000),
    'Broadcast recipients an account may send at once above its rate (bucket size; keep it at least BROADCAST_MAX_RECIPIENTS). A broadcast with more recipients than this is refused (422).',
  ],
  ACCOUNT_MAX_OPEN_JOBS: [
    int(20_000, 0, 100_000_000),
    'Faxes of one account not yet final (not delivered, failed, cancelled, rejected or unknown) that a broadcast may add to; one that would pass it → 429 (0 = no bound). Final faxes do not count.',
  ],
  MAX_REQUEST_BYTES: [
    int(50 * 1024 * 1024, 1024, 2 * 1024 * 1024 * 1024),
    'Largest HTTP request body (Base64 adds a third to a PDF’s size).',
  ],
  FETCH_ALLOW_HOSTS: [
    z
      .string()
      .default('')
      .refine(
        (s) => {
          try {
            parseAllowList(s);
            return true;
          } catch {
            return false;
          }
        },
        { message: 'expected host names (`*.example.com` for subdomains), IP addresses or CIDRs' },
      ),
    'file_url hosts the worker may fetch from even when they resolve to non-public addresses: comma-separated host names (`*.example.com` matches subdomains), IP addresses or CIDR ranges (`10.1.0.0/16`). Empty: public addresses only.',
  ],
  FETCH_TIMEOUT_SECONDS: [
    int(30, 1, 600),
    'Total time to fetch one file_url document (DNS, connects, redirects and body).',
  ],
  FETCH_MAX_REDIRECTS: [int(5, 0, 20), 'Redirects followed for one file_url (each target checked again).'],
  PDF_MAX_PAGES: [int(500, 1, 100_000), 'Most pages accepted in one document.'],
  PDF_MAX_STREAM_BYTES: [
    int(256 * 1024 * 1024, 1024 * 1024, 4 * 1024 * 1024 * 1024),
    'Largest decoded size of one compressed stream (or declared image) in a PDF; beyond it the file is refused as a decompression bomb.',
  ],
  PDF_CHECK_TIMEOUT_SECONDS: [
    int(30, 1, 3600),
    'Time allowed to check one PDF in the sandbox (and to read or fill a Smart Template’s form there).',
  ],
  PDF_CHECK_MEMORY_MB: [
    int(512, 192, 16_384),
    'Memory (resident set) allowed to the sandbox process that checks one PDF; it is killed past it. The process itself takes about 100 MB, and counting a large stream leaves up to 64 MB of spent chunks until V8 collects them, hence the minimum of 192.',
  ],
  PDF_CHECK_CONCURRENCY: [
    int(0, 0, 64),
    'Sandbox processes that check PDFs at once in one worker process (0 = one per CPU core).',
  ],
  PDF_MAX_DECODED_BYTES: [
    int(1024 * 1024 * 1024, 1024 * 1024, 16 * 1024 * 1024 * 1024),
    'Largest decoded size of all streams of one PDF together (every filter’s output counted, images as declared); beyond it the file is refused as a decompression bomb. Default: 500 pages of 2 MiB.',
  ],
  FAX_MAX_PAGES: [
    int(1000, 1, 1_000_000),
    'Most pages of one fax’s documents together (the cover page not counted); beyond it the job fails with fax_too_many_pages.',
  ],
  FAX_MAX_DECODED_BYTES: [
    int(2 * 1024 * 1024 * 1024, 1024 * 1024, 64 * 1024 * 1024 * 1024),
    'Largest decoded size of one fax’s documents together (as PDF_MAX_DECODED_BYTES counts it); beyond it the job fails with fax_decoded_too_large.',
  ],
  DOCUMENT_RETENTION_DAYS: [
    num(30, 0, 36_500),
    'Days a finished fax keeps its content (documents, file name, file_url, rendered image) before it is purged, and a received fax its images (TIFF and PDF): the installation default, which an account may replace with its own (PATCH /v1/workspace retention, admin set-received-retention); 0 keeps them forever.',
  ],
  DOCUMENT_PURGE_INTERVAL_SECONDS: [
    int(3600, 1, 86_400),
    'How often the send workers sweep abandoned receptions (and remove received images past retention, as the retention schedule does).',
  ],
  RETENTION_PURGE_CRON: [
    z
      .string()
      .default('* * * * *')
      .refine((s) => /^\S+( \S+){4,5}$/.test(s.trim()), {
        message: 'expected a cron expression of 5 or 6 fields',
      }),
    'When the retention purge runs (cron, UTC; a pg-boss schedule run by the scheduler component): it deletes the content of sent faxes past their account’s retention (zero footprint: as soon as final), received images past theirs, and audit events past AUDIT_RETENTION_DAYS. Every minute by default, which is how soon zero footprint deletes (docs/audit-retention.md).',
  ],
  AUDIT_RETENTION_DAYS: [
    int(2192, 1, 36_500),
    'Days audit events are kept (default six years), then deleted by the retention purge (docs/audit-retention.md).',
  ],
  ENCRYPTION: [
    z.enum(['on', 'off']).default('on'),
    'Encryption at rest of fax content and secrets (docs/encryption.md). on: a key-encryption key must be configured (KEK_FILE or KEK), or the process does not start; `npm start` (the all-in-one process) alone creates .faxline/dev-kek on its first start when none is. off: content is written in clear, said in the log and in /readyz.',
  ],
  KEK_FILE: [
    z.string().default(''),
    'File of key-encryption keys: 32 random bytes in Base64 per line, the first one wraps data keys, the others (old ones during a rotation) are read only. Keep it apart from the database and its backups (docs/encryption.md).',
  ],
  KEK: [
    z.string().default(''),
    'Key-encryption keys given directly: Base64 keys separated by commas, the first one active; put before those of KEK_FILE when both are set.',
  ],
  ENCRYPT_EXISTING_BATCH: [
    int(200, 1, 10_000),
    'Rows per transaction of the background task that seals content stored before encryption was on (send worker processes); 0 rows left: it stops.',
  ],
  INBOUND_LINES: [
    int(30, 1, 100_000),
    'Inbound fax calls one receiving process answers at once; one more is refused 486 Busy Here (and counted). With one receiving process (docs/receiving.md) it is the installation’s inbound line limit.',
  ],
  SIP_INBOUND_ALLOW: [
    z.string().default(''),
    'Addresses, CIDR ranges or host names (resolved at start) that may place inbound calls, separated by commas; empty: the addresses of SIP_TRUNK’s host. A call from anywhere else is refused 403 and counted.',
  ],
  SIP_INBOUND_USERNAME: [
    z.string().default(''),
    'Receiving: user name inbound INVITEs must authenticate with (digest, after SIP_INBOUND_ALLOW); set with SIP_INBOUND_PASSWORD. An INVITE without credentials is challenged 401 (WWW-Authenticate, SHA-256 and MD5), a wrong answer refused 403; both counted. Empty: no authentication (docs/sip.md).',
  ],
  SIP_INBOUND_PASSWORD: [
    z.string().default(''),
    'Receiving: digest password for SIP_INBOUND_USERNAME; the same in every receiving process (a nonce one issues is accepted by the others).',
  ],
  SIP_INBOUND_REALM: [
    z
      .string()
      .default('faxline')
      .refine((s) => /^[\x20-\x7e]+$/.test(s) && !/["\\]/.test(s), {
        message: 'expected printable ASCII without quotes or backslashes',
      }),
    'Receiving: the realm of the inbound digest challenge (what the trunk’s credentials are configured for).',
  ],
  SIP_INBOUND_ALGORITHMS: [
    z
      .string()
      .default('MD5,SHA-256')
      .transform((s, ctx) => {
        const list = s
          .split(/[\s,]+/)
          .filter(Boolean)
          .map((a) => a.toUpperCase());
        if (
          list.length === 0 ||
          list.some((a) => a !== 'MD5' && a !== 'SHA-256') ||
          new Set(list).size !== list.length
        ) {
          ctx.addIssue({
            code: 'custom',
            message: `expected MD5 and/or SHA-256, comma-separated, got "${s}"`,
          });
          return z.NEVER;
        }
        return list as ('MD5' | 'SHA-256')[];
      }),
    'Receiving: the digest algorithms of the 401 challenge, in order (one WWW-Authenticate each), and the only ones accepted. MD5 first by default: some trunks read only the first challenge and know only MD5 (Kamailio 5.6 uac_auth); `SHA-256` alone refuses MD5 answers.',
  ],
  SIP_INBOUND_COUNTRY_CODE: [
    z
      .string()
      .default('')
      .refine((s) => /^([1-9]\d{0,2})?$/.test(s), {
        message: 'expected 1 to 3 digits (a country code) or empty',
      }),
    'Country code of national numbers in inbound calls (e.g. 1, 44): a called number of digits only is read as national (a leading 0 dropped) unless it already starts with this code; empty: digits-only numbers are E.164 without their +. See docs/receiving.md.',
  ],
  INBOUND_MAX_CALL_SECONDS: [
    int(3600, 60, 86_400),
    'Longest inbound fax call: the SIP line ends an answered call this long after its answer with BYE (a failed reception); a reception still receiving a minute later (its process died) is marked failed and announced as fax.receive_failed by the sweep.',
  ],
  INBOUND_MAX_PAGE_MM: [
    int(1000, 0, 100_000),
    'Longest page an inbound fax may have, in millimetres (at the page’s own resolution): a longer page ends the call (BYE), the pages before it kept as a partial fax whose result names the limit. The receiver holds a page in memory, decoded, until it ends; 1000 mm is about 4 MB at the finest resolution. 0: no limit. See docs/receiving.md.',
  ],
  INBOUND_MAX_PAGES: [
    int(500, 0, 100_000),
    'Most pages one inbound fax may have: once this many arrived and the sender announces more, the call ends after that page’s confirmation, the pages kept as a partial fax whose result names the limit. 0: no limit. See docs/receiving.md.',
  ],
  INBOUND_T6: [
    bool(false),
    'Receiving with ECM: also offer T.6 (MMR) coding. Off, a sender codes with T.4 2-D, and one error-correction block decodes to at most about 9 MB (a T.4 row ends with an end-of-line code); on, T.6 saves some line time but one block of hostile data can decode to 113 MB before INBOUND_MAX_PAGE_MM is checked. See docs/receiving.md.',
  ],
  OUTBOX_SWEEP_SECONDS: [
    int(10, 1, 3600),
    'How often the sweep of the command publisher republishes commands of accepted jobs whose publish was not confirmed.',
  ],
  SCHEDULE_HORIZON_DAYS: [
    int(90, 1, 3650),
    'Longest scheduling horizon: a scheduled_date further ahead is refused with 422.',
  ],
  SCHEDULE_PAST_TOLERANCE_SECONDS: [
    int(300, 0, 86_400),
    'A scheduled_date at most this far in the past is sent at once (clock skew); further back is refused with 422.',
  ],
  SCHEDULE_NEAR_WINDOW_SECONDS: [
    int(120, 2, 86_400),
    'Scheduled faxes due within this window are held in the pg-boss due queue; later ones wait in fax_jobs until promoted.',
  ],
  SCHEDULE_PROMOTE_SECONDS: [
    num(10, 0.1, 3600),
    'How often the scheduler promotes faxes entering the near window into pg-boss (keep well below the window).',
  ],
  SCHEDULE_POLL_MS: [
    int(100, 10, 60_000),
    'How often the scheduler looks whether a scheduled fax is due (one index probe; pg-boss is asked only when one is), unless the next one falls due sooner.',
  ],
  SHUTDOWN_GRACE_SECONDS: [int(25, 1, 3600), 'Time allowed to drain in-flight work on SIGTERM.'],
  API_DATABASE_URL: [
    pgUrl(''),
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
  INTAKE_COMMIT_CONCURRENCY: [
    int(1, 1, 100),
    'Group-commit transactions of send/forward in flight at once in each API process (each holds one pooled connection). Fewer means larger batches and less CPU per request.',
  ],
  EVENTS_POLL_MS: [
    int(200, 10, 60_000),
    'How often the event relay looks for committed state changes to publish when it is idle (and the webhook deliverer for due deliveries); an idle look is one statement.',
  ],
  INTAKE_PREFETCH: [
    int(1000, 1, 10_000),
    'Unacknowledged commands the AMQP intake queue holds at once; they are checked concurrently and committed in batches.',
  ],
  WEBHOOK_TIMEOUT_MS: [int(10_000, 100, 120_000), 'Time a webhook receiver has to answer one delivery.'],
  WEBHOOK_RETRY_BASE_SECONDS: [
    num(30, 0.01, 86_400),
    'Delay before the second webhook attempt; each further delay doubles (up to WEBHOOK_RETRY_MAX_SECONDS).',
  ],
  WEBHOOK_RETRY_MAX_SECONDS: [num(14_400, 0.01, 86_400), 'Longest delay between two webhook attempts.'],
  WEBHOOK_GIVE_UP_HOURS: [
    num(30, 0.0001, 720),
    'A webhook delivery is retried until its first attempt is this old, then marked failed.',
  ],
  WEBHOOK_ALLOW: [
    z.string().default(''),
    'Comma-separated host or host:port that webhooks may reach even though internal (e.g. a receiver on a private network, or tests); empty: none.',
  ],
  WEBHOOK_ENDPOINTS_PER_ACCOUNT: [
    int(20, 1, 1000),
    'Most webhook endpoints one account may register; POST /v1/webhooks over it answers 422.',
  ],
  FAX_DEFAULT_CALLER_ID: [
    z
      .string()
      .default('')
      .refine((s) => s === '' || E164_PATTERN.test(s), { message: 'expected an E.164 number or empty' }),
    'The installation’s caller id (E.164): any account may present it, and a send with no caller_id and no Fax Default to take fax_as from uses it. Every other caller id must be one of the account’s numbers (admin add-number). Empty: none.',
  ],
  CONTACTS_PER_ACCOUNT: [
    int(10_000, 1, 10_000_000),
    'Most contacts one account may hold; POST /v1/contacts over it answers 422.',
  ],
  FAX_DEFAULTS_PER_ACCOUNT: [
    int(100, 1, 100_000),
    'Most Fax Defaults one account may hold; POST /v1/fax-defaults over it answers 422.',
  ],
  SMART_TEMPLATES_PER_ACCOUNT: [
    int(20, 1, 10_000),
    'Most Smart Templates one account may hold (each a PDF of up to MAX_DOCUMENT_BYTES); POST /v1/smart-templates over it answers 422.',
  ],
  API_KEYS_PER_ACCOUNT: [
    int(20, 1, 1000),
    'Most active (unrevoked) API keys one account may hold; POST /v1/api-keys over it answers 422.',
  ],
  WEBHOOK_CONCURRENCY: [
    int(50, 1, 1000),
    'Webhook attempts in flight at once in each events worker (all accounts together).',
  ],
  WEBHOOK_ACCOUNT_CONCURRENCY: [
    int(4, 1, 1000),
    'Of WEBHOOK_CONCURRENCY, the most one account may hold, so slow receivers of one account cannot delay the others.',
  ],
  RENDER_PROCESSES: [
    int(1, 0, 256),
    'Render processes (PDFium) of each send worker process (0 = one per CPU core); each may use up to RENDER_MEMORY_MB. One more may run beside them while a heavy account renders (the render reserve, SECURITY.md).',
  ],
  RENDER_PREVIEW_PROCESSES: [
    int(1, 1, 64),
    'Render processes of each API process, for previews (the API never renders in its own heap); one more may run beside them while a heavy account renders (the render reserve).',
  ],
  RENDER_MEMORY_MB: [
    int(256, 128, 16_384),
    'Memory (resident set) allowed to one render process; past it the process is killed and the fax fails with render_memory_exceeded.',
  ],
  RENDER_RECYCLE_TASKS: [
    int(1000, 1, 1_000_000),
    'Render tasks (up to 8 pages each) one render process serves before it is replaced; it is also replaced after a task that left it half-way to RENDER_MEMORY_MB. A new process costs about half a CPU-second (PDFium compiled again), so a low value costs CPU on every fax.',
  ],
  RENDER_PAGE_SECONDS: [
    num(5, 0.1, 600),
    'CPU time allowed to render one page (wall time: four times this); past it the render process is killed and the fax fails with render_timeout.',
  ],
  RENDER_FAX_SECONDS: [
    num(120, 1, 86_400),
    'Render CPU time allowed to one fax, all its pages together; past it the fax fails with render_timeout.',
  ],
  FAX_MAX_TIFF_BYTES: [
    int(64 * 1024 * 1024, 64 * 1024, 4 * 1024 * 1024 * 1024),
    'Largest fax image (the TIFF of all its pages, G4-compressed); rendering stops past it and the fax fails with fax_image_too_large.',
  ],
  HTTP_REQUEST_TIMEOUT_SECONDS: [
    int(60, 1, 3600),
    'Time a client has to send one whole HTTP request (headers and body); then 408 and the connection is closed. 60 s carries a 40 MB body at 5.3 Mbit/s; slower links should send file_url.',
  ],
  HTTP_HEADERS_TIMEOUT_SECONDS: [
    int(10, 1, 3600),
    'Time a client has to send the headers of a request (at most HTTP_REQUEST_TIMEOUT_SECONDS).',
  ],
  HTTP_TRUST_PROXY: [
    z.string().default(''),
    'Comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-For gives the client address (used by the /v1/auth failure limit); empty: the TCP peer is the client.',
  ],
  MAX_JSON_DEPTH: [
    int(32, 4, 1000),
    'Deepest nesting of arrays and objects accepted in a JSON request body; deeper bodies get 400.',
  ],
  AUTH_FAILURES_PER_ADDRESS: [
    int(20, 1, 1_000_000),
    'Failed POST /v1/auth attempts allowed per client address (IPv6: per /64) per AUTH_FAILURE_WINDOW_SECONDS and API process; then 429 with Retry-After.',
  ],
  AUTH_FAILURES_PER_KEY: [
    int(5, 1, 1_000_000),
    'Failed POST /v1/auth attempts allowed with one and the same api_secret_key per AUTH_FAILURE_WINDOW_SECONDS and API process; then 429 with Retry-After.',
  ],
  AUTH_FAILURE_WINDOW_SECONDS: [
    int(300, 1, 86_400),
    'Window of the /v1/auth failure limits: the allowance refills evenly over this time.',
  ],
  AUTH_MAX_TOKENS_PER_KEY: [
    int(100, 1, 100_000),
    'Live access tokens one API key may hold; issuing one more deletes the oldest (it then gets 401).',
  ],
  CONSOLE_SESSION_IDLE_MINUTES: [
    int(30, 1, 7 * 24 * 60),
    'Web console (/console/): a session unused this long ends (the user signs in again).',
  ],
  CONSOLE_SESSION_MAX_HOURS: [
    int(12, 1, 24 * 30),
    'Web console: a session ends this long after its sign-in, however busy (absolute timeout).',
  ],
  CONSOLE_COOKIE_SECURE: [
    z.enum(['auto', 'true', 'false'], { message: 'expected auto, true or false' }).default('auto'),
    "Web console session cookie's Secure flag: auto sets it on HTTPS requests (X-Forwarded-Proto counts only from HTTP_TRUST_PROXY) and on loopback hosts; true always; false never (plain HTTP on a non-local host, not recommended).",
  ],
  CONSOLE_SIGNIN_FAILURES_PER_EMAIL: [
    int(5, 1, 1_000_000),
    'Web console: failed sign-ins allowed per email address per CONSOLE_SIGNIN_WINDOW_SECONDS, counted in PostgreSQL across replicas; then every sign-in of that email is refused until the window ends.',
  ],
  CONSOLE_SIGNIN_FAILURES_PER_ADDRESS: [
    int(20, 1, 1_000_000),
    'Web console: failed sign-ins allowed per client address per CONSOLE_SIGNIN_WINDOW_SECONDS (across replicas).',
  ],
  CONSOLE_SIGNIN_WINDOW_SECONDS: [int(900, 1, 86_400), 'Web console: window of the sign-in failure limits.'],
  CONSOLE_INVITE_HOURS: [int(72, 1, 24 * 30), 'Web console: how long an invitation link stays valid.'],
  AMQP_INTAKE_MAX_BYTES: [
    int(50 * 1024 * 1024, 1024, 512 * 1024 * 1024),
    'Largest AMQP intake message; a larger one is refused unparsed (413 answer, truncated dead letter). Default: the default MAX_REQUEST_BYTES, the same command over HTTP.',
  ],
  AMQP_INLINE_DOCUMENTS: [
    z.enum(['allow', 'refuse']).default('allow'),
    'Documents inline in AMQP intake messages (fax_data[].file_data): allow, or refuse (422) so that patient documents never sit in RabbitMQ queues in clear; file_url documents are accepted either way (docs/amqp-intake.md, "Patient data over AMQP").',
  ],
  AMQP_DEAD_LETTER_MAX_BYTES: [
    int(64 * 1024, 0, 512 * 1024 * 1024),
    'Largest message body a dead letter keeps whole; of a larger one it keeps the first 4096 bytes and its size (header x-faxline-original-bytes).',
  ],
  SMTP_LISTEN: [
    z
      .string()
      .default('')
      .refine((s) => s === '' || /^[^\s]+:\d{1,5}$/.test(s), {
        message: 'expected address:port, e.g. 0.0.0.0:25',
      }),
    'Mail gateway (docs/mail.md): address:port the SMTP listener binds to (email to fax). Empty: no listener. `npm start` runs it when set; `npm run worker:mail` alone.',
  ],
  MAIL_DOMAIN: [
    z
      .string()
      .default('')
      .refine((s) => s === '' || /^[a-z0-9.-]+$/i.test(s), { message: 'expected a domain name' }),
    'Mail gateway: the fax domain; mail to <number>@MAIL_DOMAIN becomes a fax, any other domain is refused at RCPT (no relay). Required with SMTP_LISTEN.',
  ],
  SMTP_TLS_CERT: [
    z.string().default(''),
    'Mail gateway: PEM file of the certificate offered with STARTTLS (with SMTP_TLS_KEY). Empty: no STARTTLS.',
  ],
  SMTP_TLS_KEY: [z.string().default(''), 'Mail gateway: PEM file of the private key of SMTP_TLS_CERT.'],
  SMTP_REQUIRE_TLS: [
    bool(false),
    'Mail gateway: refuse a message whose client did not STARTTLS first (530 5.7.0 at MAIL FROM). Needs SMTP_TLS_CERT and SMTP_TLS_KEY; a Postfix in front must then use TLS towards the gateway (smtp_tls_security_level = encrypt).',
  ],
  SMTP_MAX_BYTES: [
    int(25 * 1024 * 1024, 1024, 512 * 1024 * 1024),
    'Mail gateway: largest message accepted (announced with SIZE; a larger one is refused 552).',
  ],
  SMTP_XFORWARD_FROM: [
    z.string().default(''),
    'Mail gateway: comma-separated client addresses (e.g. the Postfix in front, 127.0.0.1) allowed to pass the original client with XFORWARD, so that SPF judges the sending host. Empty: XFORWARD is not offered.',
  ],
  SMTP_RELAY: [
    z
      .string()
      .default('')
      .refine((s) => s === '' || /^smtps?:\/\//.test(s), {
        message: 'expected smtp://host:port or smtps://…',
      }),
    'Mail gateway: SMTP URL of the outgoing mail server (receipts, results, received faxes, invitations), e.g. smtp://user:pass@mail.example:587. Empty: outgoing mail stays queued in PostgreSQL.',
  ],
  MAIL_FROM: [
    z.string().default(''),
    'Mail gateway: From address of the mails faxline sends. Empty: fax@MAIL_DOMAIN (or fax@localhost).',
  ],
  MAIL_MESSAGES_PER_MINUTE: [
    int(30, 0, 1_000_000),
    'Mail gateway: messages one account may send to the gateway per minute (PostgreSQL bucket, shared by every listener; 0 = no limit). Past it: 451, the sending server retries later.',
  ],
  MAIL_LINK_BASE: [
    z.string().default(''),
    'Mail gateway: base URL put in mails of numbers with email_attach "link" (e.g. https://fax.example.com); the link is <base>/v1/received-faxes/<id>. Empty: the API URL from HOST and PORT.',
  ],
  MAIL_RETRY_SECONDS: [
    int(30, 1, 86_400),
    'Mail gateway: first delay before an outgoing mail the relay refused or could not take is tried again; doubled each time, at most one hour.',
  ],
  MAIL_GIVE_UP_HOURS: [
    num(48, 0.001, 8760),
    'Mail gateway: an outgoing mail still not taken by the relay this many hours after it was queued is given up (marked failed, counted in faxline_mail_outgoing_total{outcome="failed"}, logged without content), as MTAs bounce after two days.',
  ],
  MAIL_KEEP_DAYS: [
    num(7, 0, 36_500),
    'Mail gateway: days a sent or given-up mail stays in the outgoing queue (mail_outbox) before the retention purge deletes it; 0 deletes it at the next purge.',
  ],
  MAIL_POLL_MS: [
    int(1000, 10, 60_000),
    'Mail gateway: how often the outgoing queue is polled when idle (one statement).',
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
