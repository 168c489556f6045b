// Admin CLI: `npm run admin -- <command> [options]`. Prints one JSON line on success.
import { parseArgs } from 'node:util';
import { createAccount, revokeKey } from '../auth/service.ts';
import { type ConsoleRole, ConsoleUserError, createUser } from '../auth/console-users.ts';
import { loadConfigOrExit, variables } from '../config.ts';
import { existsSync } from 'node:fs';
import { countClear, encryptExisting } from '../db/encrypt-existing.ts';
import { installEncryption, keysByKek, resolveKeyRing, rotateKek } from '../db/encryption.ts';
import { migrate } from '../db/migrate.ts';
import { editPgUrl } from '../db/hosts.ts';
import { createPool, ensureDatabase, withTx } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import { ApiError } from '../domain/envelope.ts';
import { rejectFax } from '../intake/approval.ts';
import { accountOfJob, approveFromCli, listAwaiting } from './approval.ts';
import { PgDocumentStore } from '../documents/store.ts';
import { deleteDocuments } from './delete-documents.ts';
import { seedDemo } from './seed.ts';
import { housekeepingPass } from '../receive/housekeeping.ts';
import { isId } from '../domain/ids.ts';
import { assignNumber, releaseNumber } from '../accounts/numbers.ts';
import { retentionPass } from '../accounts/retention.ts';
import { EventsUsageError, eventsOptions, eventsUsage, runEventsCommand } from './events-cli.ts';

const usage = `usage: npm run admin -- <command>
  create-account --name <name>   new account and API key
  create-user --account <id> --email <email> --role <owner|admin|sender|viewer> --password-stdin
                                 a web console user (the first owner); the password is read from
                                 standard input (one line), never from the command line
  seed-demo                      new demo account with Fax Defaults, contacts, numbers, e-sign data
  revoke-key --key <api key|id>  revoke an API key and every token issued from it (immediately)
  add-number --account <id> --number <e164> [--receive] [--label <text>] [--station-id <tsi>]
                                 assign a fax number to an account (a number belongs to one account)
  remove-number --number <e164>  release a number from the account that holds it
  list-awaiting [--account <id>] faxes awaiting approval (all accounts, or one)
  approve --job <job id>         approve a fax awaiting approval (sends it, or schedules it)
  reject --job <job id> [--reason <text>]  reject a fax awaiting approval (it is never sent)
  delete-documents --job <id> | --account <id> [--force]
                                 delete document content, file names and URLs (privacy request)
  purge-documents                run the retention pass now (sent content, received images, audit events)
  set-received-retention --account <id> --days <n|default>
                                 days the account's received faxes keep their images (0: forever;
                                 default: DOCUMENT_RETENTION_DAYS)
  rotate-kek                     re-wrap every account's data key with the first key of KEK/KEK_FILE
                                 (content is not re-encrypted; docs/encryption.md)
  kek-status                     data keys per key-encryption key, and values still in clear per table
  encrypt-existing               encrypt content stored before encryption was on, now, to the end
  migrate                        apply database migrations
  config                         list configuration variables
${eventsUsage}`;

function fail(msg: string, code = 1): never {
  process.stderr.write(`faxline admin: ${msg}\n`);
  process.exit(code);
}

const [command, ...rest] = process.argv.slice(2);
if (!command || command === 'help' || command === '--help') {
  process.stdout.write(usage + '\n');
  process.exit(command ? 0 : 2);
}
if (command === 'config') {
  for (const [name, [, meaning]] of Object.entries(variables)) process.stdout.write(`${name}\t${meaning}\n`);
  process.exit(0);
}

const cfg = loadConfigOrExit();
const log = createLogger('warn');
const { values } = parseArgs({
  args: rest,
  options: {
    name: { type: 'string' },
    key: { type: 'string' },
    job: { type: 'string' },
    account: { type: 'string' },
    reason: { type: 'string' },
    force: { type: 'boolean' },
    number: { type: 'string' },
    receive: { type: 'boolean' },
    label: { type: 'string' },
    'station-id': { type: 'string' },
    days: { type: 'string' },
    email: { type: 'string' },
    role: { type: 'string' },
    'password-stdin': { type: 'boolean' },
    ...eventsOptions,
  },
  strict: true,
});

let pool;
try {
  if (cfg.DB_CREATE) await ensureDatabase(cfg.DATABASE_URL);
  pool = createPool(cfg.DATABASE_URL, 2, log);
  await migrate(pool);
} catch (err) {
  fail(`cannot reach the database at ${redactUrl(cfg.DATABASE_URL)}: ${(err as Error).message}`);
}

/** The development KEK file `npm start` creates (src/main.ts): used when it exists and nothing else is set. */
const DEV_KEK_FILE = '.faxline/dev-kek';

/** Commands that write or read content or keys get the key ring, as the service does. */
async function installKeys(): Promise<void> {
  const dev = existsSync(DEV_KEK_FILE) ? { devKekFile: DEV_KEK_FILE } : {};
  const keys = await resolveKeyRing({
    encryption: cfg.ENCRYPTION,
    kek: cfg.KEK,
    kekFile: cfg.KEK_FILE,
    ...dev,
  });
  if (keys.devKek)
    process.stderr.write(`faxline admin: using the development key file ${keys.devKek.path}\n`);
  installEncryption(keys.ring, { seal: cfg.ENCRYPTION === 'on' });
}

try {
  if (
    ['seed-demo', 'add-webhook', 'list-webhooks', 'rotate-kek', 'kek-status', 'encrypt-existing'].includes(
      command,
    )
  )
    await installKeys();
  switch (command) {
    case 'rotate-kek': {
      const keys = await resolveKeyRing({ encryption: 'on', kek: cfg.KEK, kekFile: cfg.KEK_FILE });
      const ring = keys.ring!;
      const r = await rotateKek(pool, ring, {
        onBatch: (n) => process.stderr.write(`faxline admin: ${n} data keys re-wrapped\n`),
      });
      const byKek = await keysByKek(pool);
      out({ active_kek: ring.active.id, rewrapped: r.rewrapped, keys_by_kek: byKek, missing: r.missing });
      if (Object.keys(r.missing).length > 0)
        fail(
          `data keys wrapped by ${Object.keys(r.missing).join(', ')} were not re-wrapped: add that key to KEK_FILE (after the new one) and run rotate-kek again; keep it until then`,
        );
      break;
    }
    case 'kek-status':
      out({ keys_by_kek: await keysByKek(pool), clear_values: await countClear(pool) });
      break;
    case 'encrypt-existing': {
      const sealed = await encryptExisting(pool, {
        batch: cfg.ENCRYPT_EXISTING_BATCH,
        onBatch: (p) => process.stderr.write(`faxline admin: ${p.table}: ${p.sealed} rows encrypted\n`),
      });
      out({ sealed, clear_values: await countClear(pool) });
      break;
    }
    case 'create-account': {
      if (!values.name) fail('create-account needs --name <name>', 2);
      const r = await withTx(pool, (c) => createAccount(c, values.name!));
      out(r);
      break;
    }
    case 'create-user': {
      if (!values.account || !values.email || !values.role || !values['password-stdin'])
        fail('create-user needs --account <id> --email <email> --role <role> --password-stdin', 2);
      const password = (await readStdin()).replace(/\r?\n$/, '');
      try {
        out(
          await createUser(pool, {
            accountId: values.account!,
            email: values.email!,
            role: values.role as ConsoleRole,
            password,
          }),
        );
      } catch (err) {
        if (err instanceof ConsoleUserError) fail(err.message, 2);
        throw err;
      }
      break;
    }
    case 'seed-demo':
      out(await withTx(pool, (c) => seedDemo(c)));
      break;
    case 'revoke-key': {
      if (!values.key) fail('revoke-key needs --key <api key or key id>', 2);
      const n = await revokeKey(pool, values.key);
      if (n === 0) fail('no active API key matches');
      out({ revoked: n });
      break;
    }
    case 'add-number': {
      if (!values.account || !values.number)
        fail('add-number needs --account <account id> --number <E.164 number>', 2);
      const r = await withTx(pool, (c) =>
        assignNumber(c, {
          accountId: values.account!,
          number: values.number!,
          ...(values.receive !== undefined ? { receive: values.receive } : {}),
          ...(values.label !== undefined ? { label: values.label } : {}),
          ...(values['station-id'] !== undefined ? { stationId: values['station-id'] } : {}),
        }),
      );
      out(r);
      break;
    }
    case 'remove-number': {
      if (!values.number) fail('remove-number needs --number <E.164 number>', 2);
      out({ released: await withTx(pool, (c) => releaseNumber(c, values.number!)) });
      break;
    }
    case 'list-awaiting':
      out(await listAwaiting(pool, values.account));
      break;
    case 'approve': {
      if (!values.job) fail('approve needs --job <job id>', 2);
      out(await approveFromCli(cfg, pool, log, values.job));
      break;
    }
    case 'reject': {
      if (!values.job) fail('reject needs --job <job id>', 2);
      const accountId = await accountOfJob(pool, values.job);
      const row = await rejectFax({ tx: (fn) => withTx(pool!, fn) }, accountId, values.job, {
        by: 'admin',
        ...(values.reason !== undefined ? { reason: values.reason } : {}),
      });
      out({ job_id: row.id, state: row.state });
      break;
    }
    case 'delete-documents':
      out(
        await deleteDocuments(pool, new PgDocumentStore(pool), {
          ...(values.job !== undefined ? { jobId: values.job } : {}),
          ...(values.account !== undefined ? { accountId: values.account } : {}),
          force: values.force === true,
        }),
      );
      break;
    case 'set-received-retention': {
      const days = values.days;
      if (!values.account || !isId(values.account)) fail('--account <id> is required (an account id)', 2);
      if (days === undefined || !(days === 'default' || /^\d+(\.\d+)?$/.test(days)))
        fail('--days must be a number of days (0: forever) or default', 2);
      const r = await pool.query(
        'UPDATE accounts SET received_retention_days = $2 WHERE id = $1 RETURNING received_retention_days',
        [values.account, days === 'default' ? null : days],
      );
      if (r.rowCount !== 1) fail(`--account: no account with id ${values.account}`);
      out({ account: values.account, received_retention_days: days === 'default' ? null : Number(days) });
      break;
    }
    case 'purge-documents': {
      // The pass the retention schedule runs (each account's own retention, zero footprint, audit
      // events past AUDIT_RETENTION_DAYS), after the sweep of abandoned receptions.
      await housekeepingPass({
        db: pool,
        retentionDays: cfg.DOCUMENT_RETENTION_DAYS,
        maxCallSeconds: cfg.INBOUND_MAX_CALL_SECONDS,
      });
      const r = await retentionPass(pool, {
        now: new Date(),
        defaultDays: cfg.DOCUMENT_RETENTION_DAYS,
        auditDays: cfg.AUDIT_RETENTION_DAYS,
      });
      out({ purged: r.faxes, received_images_purged: r.received, audit_events_purged: r.auditEvents });
      break;
    }
    case 'migrate':
      out({ migrated: true });
      break;
    default: {
      const r = await runEventsCommand(command, pool, values);
      if (r === undefined) fail(`unknown command "${command}"\n${usage}`, 2);
      out(r);
    }
  }
} catch (err) {
  if (err instanceof EventsUsageError) fail(`${command} ${err.message}`, 2);
  fail(err instanceof ApiError ? `${err.message} (${err.http})` : (err as Error).message);
} finally {
  await pool.end();
}

/** Standard input whole (bounded: a password is short). */
async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of process.stdin) {
    chunks.push(c as Buffer);
    n += (c as Buffer).length;
    if (n > 4096) fail('the password on standard input is longer than 4096 bytes', 2);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function out(v: unknown): void {
  process.stdout.write(JSON.stringify(v) + '\n');
}

function redactUrl(u: string): string {
  try {
    return editPgUrl(u, (x) => {
      if (x.password) x.password = '***';
    });
  } catch {
    return '(invalid URL)';
  }
}
