// Wiring: the one place where the parts are built and connected. Entry points choose components.
import { consoleSettings } from './api/console/plugin.ts';
import { setMaxListeners } from 'node:events';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { Broker } from './amqp/broker.ts';
import type { BroadcastLimits } from './intake/recipient-limit.ts';
import { workspaceLimits } from './accounts/workspace.ts';
import { buildServer, httpEdge } from './api/server.ts';
import { createApiParts, type ApiParts } from './api/setup.ts';
import { registerOpsRoutes, type Readiness } from './api/routes/ops.ts';
import { systemClock, type Clock } from './clock.ts';
import type { Config } from './config.ts';
import { isDbUnavailable } from './db/errors.ts';
import { startEncryptExisting } from './db/encrypt-existing.ts';
import { installEncryption, resolveKeyRing } from './db/encryption.ts';
import { migrate, migrationsApplied, waitForMigrations } from './db/migrate.ts';
import { createPool, ensureDatabase } from './db/pool.ts';
import { parseAllowList } from './documents/addresses.ts';
import { PdfSandbox } from './documents/check.ts';
import { httpFetcher } from './documents/fetch.ts';
import type { DocumentChecks } from './documents/prepare.ts';
import { RenderPool, type RenderLimits } from './documents/render/pool.ts';
import { PgDocumentStore } from './documents/store.ts';
import { purgeOutboxAll } from './accounts/mail.ts';
import { retentionPass } from './accounts/retention.ts';
import { scheduleRetention } from './scheduler/retention.ts';
import { Scheduler } from './scheduler/scheduler.ts';
import { CommandPublisher } from './jobs/command-publisher.ts';
import { createLogger, type Logger } from './log.ts';
import { attachCollectors } from './metrics/collectors.ts';
import { nameKind, routingKeyType } from './metrics/labels.ts';
import { allComponents, opsPort, type Component } from './components.ts';
import { createMetrics } from './metrics/registry.ts';
import { cancelHandler } from './consumers/cancel.ts';
import { PgSharedRenders } from './documents/render/shared.ts';
import { sendGiveUp, sendHandler } from './consumers/send.ts';
import { lineOptions } from './lines/options.ts';
import { LineCaller } from './lines/caller.ts';
import { createBackend } from './transmission/select.ts';
import { startAmqpIntake } from './amqp-intake/intake.ts';
import { registerEventRoutes } from './api/routes/webhooks.ts';
import { allowList, startEvents } from './events/component.ts';
import { createEventMetrics } from './events/metrics.ts';
import { startReceiveHousekeeping } from './receive/housekeeping.ts';
import { answeringHooks, sipAnswering } from './receive/answering.ts';
import { createReceiving } from './receive/component.ts';
import { SipLine } from './transmission/sip/line.ts';
import type { TransmissionBackend } from './transmission/backend.ts';
import type { DNSResolver } from 'mailauth';
import { startMail, type MailComponent } from './mail/component.ts';

export interface Running {
  /** Base URL of the HTTP server (API, or ops-only for worker processes). */
  url: string;
  log: Logger;
  backend: TransmissionBackend;
  /** The line caller of this process (send component only). */
  lines?: LineCaller;
  stop(): Promise<void>;
  /** The HTTP server (API, or ops-only): its registered routes, for the contract tests. */
  http: FastifyInstance;
  /** The SMTP listener's address (mail component with SMTP_LISTEN). */
  smtp?: { host: string; port: number };
}

export interface StartOptions {
  components: Component[];
  clock?: Clock;
  log?: Logger;
  backend?: TransmissionBackend;
  /**
   * ENCRYPTION=on without KEK or KEK_FILE: create and use this KEK file (the all-in-one `npm start`,
   * so it runs with no setup; docs/encryption.md). Without it such a process does not start.
   */
  devKekFile?: string;
  /** DNS answers for the mail gateway's SPF/DKIM/DMARC checks (tests); the system's when absent. */
  mailResolver?: DNSResolver;
}

export async function start(cfg: Config, o: StartOptions): Promise<Running> {
  const log = o.log ?? createLogger(cfg.LOG_LEVEL, undefined, { phi: cfg.LOG_PHI });
  const clock = o.clock ?? systemClock;
  const has = (c: Component) => o.components.includes(c);
  const mailListens = has('mail') && cfg.SMTP_LISTEN !== '';
  const processName = o.components.length === allComponents.length ? 'all' : o.components.join('+');
  const metrics = createMetrics(processName, { enabled: cfg.METRICS_ENABLED });

  // Keys first: a process that would store content in clear without being told to does not start.
  const keys = await resolveKeyRing({
    encryption: cfg.ENCRYPTION,
    kek: cfg.KEK,
    kekFile: cfg.KEK_FILE,
    ...(o.devKekFile ? { devKekFile: o.devKekFile } : {}),
  });
  installEncryption(keys.ring, { seal: cfg.ENCRYPTION === 'on' });
  if (keys.devKek)
    log.warn(
      { kekFile: keys.devKek.path },
      keys.devKek.created
        ? 'ENCRYPTION: no KEK_FILE or KEK configured; created a development key-encryption key file. Losing it loses every fax stored with it: for production set KEK_FILE (docs/encryption.md)'
        : 'ENCRYPTION: no KEK_FILE or KEK configured; using the development key-encryption key file (docs/encryption.md)',
    );
  if (cfg.ENCRYPTION === 'off')
    log.warn('ENCRYPTION=off: fax content and secrets are stored in clear (docs/encryption.md)');
  const encryptionDetail =
    cfg.ENCRYPTION === 'off'
      ? 'off: content stored in clear'
      : `on (key-encryption key ${keys.ring!.active.id})`;

  if (cfg.DB_CREATE) await ensureDatabase(cfg.DATABASE_URL);
  const db = createPool(cfg.DATABASE_URL, cfg.DB_POOL_SIZE, log);
  if (cfg.MIGRATE_ON_START) {
    const applied = await migrate(db);
    if (applied.length > 0) log.info({ applied }, 'migrations applied');
  } else {
    await waitForMigrations(db, log);
  }

  const broker = new Broker(
    {
      url: cfg.AMQP_URL,
      prefix: cfg.QUEUE_PREFIX,
      queueType: cfg.QUEUE_TYPE,
      deliveryLimit: cfg.DELIVERY_LIMIT,
      deadLetterMaxBytes: cfg.AMQP_DEAD_LETTER_MAX_BYTES,
    },
    log,
    {
      onReply: (outcome) => metrics.amqpReplies.inc({ outcome }),
      onPublish: (exchange, type, okay) =>
        metrics.commandsPublished.inc({
          exchange: nameKind(exchange),
          type: routingKeyType(type),
          outcome: okay ? 'confirmed' : 'failed',
        }),
      retryInPlace: isDbUnavailable,
      onConsume: (queue, outcome) => metrics.commandsConsumed.inc({ queue: nameKind(queue), outcome }),
    },
  );
  await broker.start();
  const publisher = new CommandPublisher(db, broker, log);
  // pg-boss: for the components that schedule (API, AMQP intake), unschedule (cancel) or fire.
  const scheduler =
    has('api') || has('intake') || has('cancel') || has('scheduler') || mailListens
      ? new Scheduler({
          databaseUrl: cfg.DATABASE_URL,
          schema: cfg.PGBOSS_SCHEMA,
          clock,
          log,
          metrics,
          horizonDays: cfg.SCHEDULE_HORIZON_DAYS,
          pastToleranceSeconds: cfg.SCHEDULE_PAST_TOLERANCE_SECONDS,
          nearWindowSeconds: cfg.SCHEDULE_NEAR_WINDOW_SECONDS,
          promoteSeconds: cfg.SCHEDULE_PROMOTE_SECONDS,
          pollMs: cfg.SCHEDULE_POLL_MS,
        })
      : null;
  await scheduler?.start();

  // The PDF sandbox (one per process, shared fairly between accounts) for the components that check
  // documents: the send worker, and the API's previews; both with the same PDF_* and FAX_* limits.
  const sandbox =
    has('send') || has('api')
      ? new PdfSandbox({
          maxPages: cfg.PDF_MAX_PAGES,
          maxStreamBytes: cfg.PDF_MAX_STREAM_BYTES,
          maxDecodedBytes: cfg.PDF_MAX_DECODED_BYTES,
          timeoutMs: cfg.PDF_CHECK_TIMEOUT_SECONDS * 1000,
          memoryMb: cfg.PDF_CHECK_MEMORY_MB,
          concurrency: cfg.PDF_CHECK_CONCURRENCY,
        })
      : null;
  const documentChecks: DocumentChecks | null = sandbox && {
    pdf: sandbox,
    faxLimits: { maxPages: cfg.FAX_MAX_PAGES, maxDecodedBytes: cfg.FAX_MAX_DECODED_BYTES },
  };
  // Render processes: the send worker's for faxes, the API's own (small) ones for previews, so a
  // preview never waits on faxes. Their processes start on the first render.
  const renderLimits: Omit<RenderLimits, 'size'> = {
    memoryMb: cfg.RENDER_MEMORY_MB,
    recycleAfterTasks: cfg.RENDER_RECYCLE_TASKS,
    pageTimeoutMs: cfg.RENDER_PAGE_SECONDS * 1000,
    faxTimeoutMs: cfg.RENDER_FAX_SECONDS * 1000,
    maxTiffBytes: cfg.FAX_MAX_TIFF_BYTES,
  };
  const renderPool = has('send') ? new RenderPool({ ...renderLimits, size: cfg.RENDER_PROCESSES }) : null;
  const previewPool = has('api')
    ? new RenderPool({ ...renderLimits, size: cfg.RENDER_PREVIEW_PROCESSES })
    : null;
  const shutdown = new AbortController();
  // Every command waiting for its turn in the send worker listens to it (up to SEND_PREFETCH).
  setMaxListeners(0, shutdown.signal);
  const backend = o.backend ?? createBackend(cfg, metrics.enabled ? { registry: metrics.registry } : {});
  let lines: LineCaller | undefined;

  const documents = new PgDocumentStore(db);
  const fetcher = httpFetcher({
    maxBytes: cfg.MAX_DOCUMENT_BYTES,
    timeoutMs: cfg.FETCH_TIMEOUT_SECONDS * 1000,
    maxRedirects: cfg.FETCH_MAX_REDIRECTS,
    allow: parseAllowList(cfg.FETCH_ALLOW_HOSTS),
    log: log.child({ component: 'fetch' }),
  });
  let purge: { stop(): Promise<void> } | null = null;
  if (has('send')) {
    const lineCaller = new LineCaller({
      db,
      backend,
      log,
      metrics,
      opts: lineOptions(cfg),
    });
    lines = lineCaller;
    // Receiving (BACKEND=sip with SIP_RECEIVE): the line's user agent also answers inbound calls,
    // routed and stored by src/receive/ (docs/receiving.md).
    if (cfg.SIP_RECEIVE) {
      if (!(backend instanceof SipLine)) throw new Error('SIP_RECEIVE=true needs BACKEND=sip');
      const receiving = await createReceiving({
        db,
        log,
        registry: metrics.registry,
        cfg,
        trunk: cfg.SIP_TRUNK,
      });
      await backend.answer(sipAnswering(await answeringHooks(receiving), log));
    }
    // Received faxes: the sweep of receptions whose process died, and their retention.
    const receiving = startReceiveHousekeeping({
      db,
      retentionDays: cfg.DOCUMENT_RETENTION_DAYS,
      maxCallSeconds: cfg.INBOUND_MAX_CALL_SECONDS,
      intervalMs: cfg.DOCUMENT_PURGE_INTERVAL_SECONDS * 1000,
      onDone: (r) =>
        log.info(r, 'received faxes: abandoned receptions failed, images past retention removed'),
      onError: (err) => log.warn({ err }, 'received-fax housekeeping failed; retried next interval'),
    });
    // Content stored before encryption was on is sealed in the background (docs/encryption.md).
    const sealing =
      cfg.ENCRYPTION === 'on'
        ? startEncryptExisting(db, {
            batch: cfg.ENCRYPT_EXISTING_BATCH,
            onBatch: (p) => log.info(p, 'encrypting existing content'),
            onDone: (sealed) => {
              if (Object.values(sealed).some((n) => n > 0))
                log.info({ sealed }, 'existing content encrypted');
            },
            onError: (err) =>
              log.warn({ err }, 'encrypting existing content failed; resumed at the next start'),
          })
        : null;
    purge = {
      stop: () => Promise.all([receiving.stop(), sealing?.stop()]).then(() => undefined),
    };
    const handler = sendHandler({
      db,
      documents,
      fetcher,
      checks: required(documentChecks, 'the PDF sandbox'),
      renderPool: required(renderPool, 'the render pool'),
      shared: new PgSharedRenders(db),
      log: log.child({ component: 'send-worker' }),
      metrics,
      shutdown: shutdown.signal,
      onQueued: (jobId) => lineCaller.wake(jobId),
      prepareConcurrency: cfg.PREPARE_CONCURRENCY,
      prepareAccountConcurrency: cfg.PREPARE_ACCOUNT_CONCURRENCY,
      prepareAccountBacklog: cfg.PREPARE_ACCOUNT_BACKLOG,
      parkSeconds: cfg.PREPARE_PARK_SECONDS,
      unpark: (accountId, max) => publisher.unpark(accountId, max),
    });
    const giveUp = sendGiveUp({ db, log, metrics });
    await broker.consume(broker.names.queue('send'), cfg.SEND_PREFETCH, handler, giveUp);
    await broker.consume(broker.names.queue('forward'), cfg.SEND_PREFETCH, handler, giveUp);
    lineCaller.start();
  }
  if (has('cancel')) {
    await broker.consume(
      broker.names.queue('cancel'),
      16,
      cancelHandler({ db, scheduler: required(scheduler, 'pg-boss'), log }),
    );
  }
  if (has('scheduler')) {
    await required(scheduler, 'pg-boss').work(db, publisher);
    // Retention (docs/audit-retention.md): sent content, received images and audit events past their
    // time, and the outgoing mail queue's sent and given-up rows past MAIL_KEEP_DAYS (docs/mail.md).
    await scheduleRetention(required(scheduler, 'pg-boss').boss, {
      cron: cfg.RETENTION_PURGE_CRON,
      log: log.child({ component: 'retention' }),
      pass: async () => ({
        ...(await retentionPass(db, {
          now: clock.now(),
          defaultDays: cfg.DOCUMENT_RETENTION_DAYS,
          auditDays: cfg.AUDIT_RETENTION_DAYS,
        })),
        mailOutbox: await purgeOutboxAll(db, clock.now(), cfg.MAIL_KEEP_DAYS),
      }),
    });
  }
  const eventMetrics = createEventMetrics(metrics.registry, has('events') ? db : undefined);
  const events = has('events') ? startEvents({ db, broker, log, cfg, metrics: eventMetrics }) : undefined;
  if (has('intake')) {
    await startAmqpIntake({
      db,
      broker,
      publisher,
      scheduler: required(scheduler, 'pg-boss'),
      clock,
      log,
      maxDocumentBytes: cfg.MAX_DOCUMENT_BYTES,
      defaultCallerId: cfg.FAX_DEFAULT_CALLER_ID,
      maxBroadcastRecipients: cfg.BROADCAST_MAX_RECIPIENTS,
      broadcastLimits: broadcastLimits(cfg),
      prefetch: cfg.INTAKE_PREFETCH,
      metrics: eventMetrics,
      maxMessageBytes: cfg.AMQP_INTAKE_MAX_BYTES,
      deadLetterMaxBytes: cfg.AMQP_DEAD_LETTER_MAX_BYTES,
      maxJsonDepth: cfg.MAX_JSON_DEPTH,
      inlineDocuments: cfg.AMQP_INLINE_DOCUMENTS,
    });
  }
  if (has('api') || has('scheduler')) publisher.startSweeping(cfg.OUTBOX_SWEEP_SECONDS);

  // Service-wide gauges from PostgreSQL come from the API and the scheduler (see docs/observability.md).
  attachCollectors(metrics, {
    db,
    broker,
    databaseGauges: (has('api') || has('scheduler')) && cfg.METRICS_DB_SECONDS > 0,
    cacheMs: cfg.METRICS_DB_SECONDS * 1000,
  });

  const readiness: Readiness = async () => {
    const dbOk = await db.query('SELECT 1').then(
      () => true,
      () => false,
    );
    const checks = {
      postgres: dbOk,
      migrations: dbOk && (await migrationsApplied(db)),
      rabbitmq: broker.isConnected,
      consumers: broker.consumersAttached === broker.consumersRegistered,
    };
    return { ready: Object.values(checks).every(Boolean), checks, details: { encryption: encryptionDetail } };
  };

  const api: ApiParts | null = has('api')
    ? await createApiParts(cfg, db, log, clock, required(scheduler, 'pg-boss'))
    : null;
  const http: FastifyInstance = api
    ? buildServer({
        ...api,
        db,
        broker,
        publisher,
        scheduler: required(scheduler, 'pg-boss'),
        clock,
        log,
        metrics,
        readiness,
        maxRequestBytes: cfg.MAX_REQUEST_BYTES,
        maxDocumentBytes: cfg.MAX_DOCUMENT_BYTES,
        fetcher,
        previews: {
          checks: required(documentChecks, 'the PDF sandbox'),
          renderPool: required(previewPool, 'the preview render pool'),
        },
        templateChecks: required(sandbox, 'the PDF sandbox'),
        edge: httpEdge(cfg),
        accountLimits: workspaceLimits(cfg),
        defaultCallerId: cfg.FAX_DEFAULT_CALLER_ID,
        maxBroadcastRecipients: cfg.BROADCAST_MAX_RECIPIENTS,
        broadcastLimits: broadcastLimits(cfg),
        console: consoleSettings(cfg, db),
      })
    : Fastify({
        loggerInstance: log.child({ component: 'ops-http' }) as FastifyBaseLogger,
        logController: new LogController({ disableRequestLogging: true }),
      });
  if (!api) registerOpsRoutes(http, { metrics, readiness });
  else
    registerEventRoutes(http, {
      tenant: api.tenant,
      limiter: api.limiter,
      clock,
      webhookAllow: allowList(cfg),
      maxEndpoints: cfg.WEBHOOK_ENDPOINTS_PER_ACCOUNT,
      queuePrefix: cfg.QUEUE_PREFIX,
    });
  const address = await http.listen({ port: opsPort(cfg, o.components), host: cfg.HOST });
  // The mail gateway: its intake is the API's (same checks, limits, idempotency), with its own pools.
  let mail: MailComponent | null = null;
  let mailIntake: ApiParts | null = null;
  if (has('mail') && (mailListens || cfg.SMTP_RELAY !== '')) {
    mailIntake = mailListens
      ? await createApiParts(cfg, db, log, clock, required(scheduler, 'pg-boss'))
      : null;
    mail = await startMail({
      cfg,
      db,
      log,
      metrics,
      apiUrl: `http://${cfg.HOST === '0.0.0.0' ? '127.0.0.1' : cfg.HOST}:${cfg.PORT}`,
      ...(o.mailResolver ? { resolver: o.mailResolver } : {}),
      intake: mailIntake && {
        tenant: mailIntake.tenant,
        commits: mailIntake.commits,
        idempotencyTtlHours: mailIntake.idempotencyTtlHours,
        broker,
        publisher,
        scheduler: required(scheduler, 'pg-boss'),
        clock,
        maxDocumentBytes: cfg.MAX_DOCUMENT_BYTES,
        defaultCallerId: cfg.FAX_DEFAULT_CALLER_ID,
        maxBroadcastRecipients: cfg.BROADCAST_MAX_RECIPIENTS,
        broadcastLimits: broadcastLimits(cfg),
      },
    });
  }
  log.info({ address, components: o.components, backend: backend.name }, 'faxline started');

  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      log.info('stopping: draining in-flight work');
      const grace = setTimeout(() => shutdown.abort(), cfg.SHUTDOWN_GRACE_SECONDS * 1000);
      const deadline = Date.now() + cfg.SHUTDOWN_GRACE_SECONDS * 1000;
      // Stop taking work, and let what is in flight finish (or hand it back).
      lines?.drain(); // no calls from the backlog; jobs still being prepared here are called here
      await mail?.stop(); // no new messages (those in DATA finish); the mail being sent is sent
      await http.close(); // no new requests; in-flight requests (previews included) finish
      await scheduler?.stopWork(); // no new fires; in-flight fires publish their command
      await broker.close(); // stop consuming; in-flight handlers finish and ack; then its channels
      await events?.stop(); // the relay's unpublished rows stay in the outbox for the next start
      clearTimeout(grace);
      // Calls in progress finish within the grace time, or are hung up and queued again.
      await lines?.stop(Math.max(0, deadline - Date.now()));
      if (!o.backend) await backend.close?.(); // a backend passed in is its owner's to close
      await purge?.stop();
      // Nothing checks or renders any more: the sandbox and render processes go.
      await Promise.all([sandbox?.close(), renderPool?.close(), previewPool?.close()]);
      // Then the pools: pg-boss's, the API role's and the owner's.
      await publisher.stop();
      await scheduler?.stop();
      await api?.stop();
      await mailIntake?.stop();
      await db.end();
      log.info('stopped');
    })();
    return stopping;
  };
  return {
    url: address.replace('0.0.0.0', '127.0.0.1'),
    log,
    backend,
    ...(lines ? { lines } : {}),
    stop,
    http,
    ...(mail?.smtp ? { smtp: mail.smtp } : {}),
  };
}

/** What a component needs and the wiring built for it (the choice above is made from the same list). */
function required<T>(x: T | null, what: string): T {
  if (x === null) throw new Error(`${what} was not built for these components`);
  return x;
}

/** What a broadcast costs its account (src/intake/recipient-limit.ts), from the configuration. */
function broadcastLimits(cfg: Config): BroadcastLimits {
  return {
    perSecond: cfg.BROADCAST_RECIPIENTS_PER_SECOND,
    burst: cfg.BROADCAST_RECIPIENTS_BURST,
    maxOpenJobs: cfg.ACCOUNT_MAX_OPEN_JOBS,
  };
}
