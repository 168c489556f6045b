// The `faxline` command (docs/cli.md): sendfax, faxstat, faxrm for the customer API, built on
// faxline/client. Output: readable tables on stdout, or JSON with --json; progress and errors on
// stderr; exit codes in `exitCodes`. Run through bin/faxline.js, which picks a Node that runs
// TypeScript.
import { Command, CommanderError, Option } from 'commander';
import { createWriteStream } from 'node:fs';
import { readFile, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  FaxlineClient,
  FaxlineError,
  finalStates,
  type Download,
  type Fax,
  type FaxListQuery,
  type FaxState,
  type SendRequest,
} from '../client/index.ts';
import { configPath, readConfigFile, writeConfigFile } from './config.ts';
import { atTime, duration, parseDestination, table } from './format.ts';

/** Exit codes (docs/cli.md). */
export const exitCodes = {
  ok: 0,
  /** --wait: the fax ended without being delivered (failed, cancelled, rejected). */
  notDelivered: 1,
  /** Bad flags or arguments, a file that cannot be read. */
  usage: 2,
  /** The API refused the request (4xx other than 401): the message says why. */
  refused: 3,
  /** No API key configured, or the key or token was refused (401). */
  auth: 4,
  /** The service could not be reached or stayed unavailable (network, 5xx, 429/503 after retries). */
  unavailable: 5,
  /** --wait --timeout passed before the fax ended (it goes on). */
  timeout: 6,
  /** Interrupted (Ctrl-C) while waiting; the fax goes on. */
  interrupted: 130,
} as const;

export interface Io {
  stdout: Writable & { isTTY?: boolean };
  stderr: Writable & { isTTY?: boolean };
  env: NodeJS.ProcessEnv;
  stdin: NodeJS.ReadableStream & { isTTY?: boolean };
}

class UsageError extends Error {}
class ExitError extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

interface Common {
  json?: boolean;
  url?: string;
}

const STATES: readonly string[] = [
  'accepted',
  'awaiting_approval',
  'scheduled',
  'preparing',
  'queued',
  'blocked',
  'dialling',
  'sending',
  'retry_waiting',
  'delivered',
  'failed',
  'cancelled',
  'rejected',
  'unknown',
];

/** Runs the CLI with `argv` (without node and the script); resolves to the exit code. */
export async function run(argv: string[], io: Io): Promise<number> {
  const json = argv.includes('--json');
  // Commands resolve normally; an outcome that is not an error but not a success either (send
  // --wait of a fax that failed) is handed back through this.
  let result: number = exitCodes.ok;
  const out = (s: string) => void io.stdout.write(s.endsWith('\n') ? s : s + '\n');
  const err = (s: string) => void io.stderr.write(s.endsWith('\n') ? s : s + '\n');
  const printJson = (v: unknown) => out(JSON.stringify(v, null, 2));
  const colour = Boolean(io.stdout.isTTY) && !io.env.NO_COLOR && io.env.TERM !== 'dumb';
  const paint = (state: string) =>
    !colour
      ? state
      : state === 'delivered'
        ? `\x1b[32m${state}\x1b[0m`
        : ['failed', 'rejected', 'cancelled'].includes(state)
          ? `\x1b[31m${state}\x1b[0m`
          : state;

  async function client(o: Common): Promise<FaxlineClient> {
    const file = await readConfigFile(configPath(io.env)).catch((e: Error) => {
      throw new UsageError(`cannot read ${configPath(io.env)}: ${e.message}`);
    });
    const url = o.url || io.env.FAXLINE_URL || file.url;
    const apiKey = io.env.FAXLINE_API_KEY || file.api_key;
    if (!url)
      throw new ExitError(exitCodes.auth, 'no service address: set FAXLINE_URL or run `faxline login`');
    if (!apiKey)
      throw new ExitError(exitCodes.auth, 'no API key: set FAXLINE_API_KEY or run `faxline login`');
    return new FaxlineClient({
      baseUrl: url,
      apiKey,
      onRetry: (r) =>
        err(
          `faxline: ${r.method} ${r.path} answered ${r.http}; retry ${r.attempt} in ${Math.ceil(r.delayMs / 1000)} s`,
        ),
    });
  }

  const program = new Command('faxline')
    .description('Send and follow faxes through a faxline service (docs/cli.md)')
    .version('0.1.0')
    .showHelpAfterError()
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s) });

  const common = (c: Command) =>
    c
      .option('--json', 'print JSON (for scripts) instead of a table')
      .option('--url <url>', 'service address (default: FAXLINE_URL, else the login file)');

  // ---- login -----------------------------------------------------------------------------------
  common(
    program
      .command('login')
      .description(
        'check an API key against the service and keep it, with the address, in the config file (mode 0600)',
      )
      .option('--key <api key>', 'the API key (default: FAXLINE_API_KEY, else read from standard input)'),
  ).action(async (o: Common & { key?: string }) => {
    const path = configPath(io.env);
    const old = await readConfigFile(path).catch(() => ({}) as { url?: string });
    const url = o.url || io.env.FAXLINE_URL || old.url;
    if (!url) throw new UsageError('give the service address: faxline login --url http://host:8080');
    const key = o.key || io.env.FAXLINE_API_KEY || (await readSecret(io, 'API key: '));
    if (!key) throw new UsageError('no API key given');
    const c = new FaxlineClient({ baseUrl: url, apiKey: key });
    // Any authenticated call checks the key; the workspace says which account it is.
    const r = await c.api.GET('/v1/workspace');
    if (!r.response.ok || !r.data) throw errorFrom(r.response, r.error);
    await writeConfigFile(path, { url, api_key: key });
    const account = (r.data.data as { account?: { name?: string; id?: string } }).account;
    if (json) printJson({ config: path, url, account });
    else
      out(`logged in to ${url}${account?.name ? ` as ${account.name}` : ''}; saved in ${path} (mode 0600)`);
  });

  // ---- send ------------------------------------------------------------------------------------
  common(
    program
      .command('send')
      .description('send files as a fax to one number, or to several (a broadcast)')
      .argument('<files...>', 'PDF, TIFF, JPEG or PNG files, or http(s) URLs the service fetches')
      .option(
        '-d, --destination <number>',
        'E.164 number, or "name@number" for the cover page (repeatable)',
        (v: string, prev: string[]) => [...prev, v],
        [] as string[],
      )
      .option('-z, --destinations-file <file>', 'a file of destinations, one a line (# comments)')
      .option('--cover', 'send with a cover page (a Fax Default that draws one)')
      .option('-n, --no-cover', 'send without a cover page (a Fax Default that draws none)')
      .option('--template <id>', 'the Fax Default to use (its cover, caller id, quality)')
      .option('-r, --subject <text>', 'cover page subject ("regarding")')
      .option('-c, --comments <text>', 'cover page comments')
      .option('--sender-name <text>', 'cover page sender name')
      .option('-f, --from <caller id>', 'caller id (E.164) to send from')
      .option('-a, --at <time>', 'send later: ISO 8601 with offset, or +30m, +2h, +1d')
      .option('--reference <text>', 'your reference, stored on the fax (client_reference)')
      .option('-t, --tries <n>', "at most this many calls (the API's max_dials)", positiveInt)
      .option('-k, --give-up-after <duration>', 'give up this long after acceptance, e.g. 2h (at least 60s)')
      .addOption(new Option('-P, --priority <priority>', 'line priority').choices(['high', 'regular']))
      .addOption(new Option('--quality <quality>', 'resolution').choices(['low', 'standard', 'hd']))
      .option('--approval', 'hold the fax until it is approved')
      .option(
        '--idempotency-key <key>',
        'the same key and request answer the first answer again (default: random)',
      )
      .option('-w, --wait', 'wait until the fax is delivered (exit 0) or fails (exit 1), showing progress')
      .option('--timeout <duration>', 'with --wait: stop waiting after this long (exit 6)')
      .option('--interval <duration>', 'with --wait: how often to look', '1s'),
  ).action(async (files: string[], o: SendOptions) => {
    const destinations = [...o.destination];
    if (o.destinationsFile) {
      const text = await readFile(o.destinationsFile, 'utf8').catch((e: Error) => {
        throw new UsageError(`cannot read ${o.destinationsFile}: ${e.message}`);
      });
      for (const line of text.split(/\r?\n/)) {
        const t = line.replace(/#.*/, '').trim();
        if (t) destinations.push(t);
      }
    }
    if (destinations.length === 0) throw new UsageError('give at least one destination: -d +15551234567');
    const recipients = destinations.map(parseDestination);
    const fax_data = await Promise.all(
      files.map(async (f) => {
        if (/^https?:\/\//i.test(f))
          return { file_name: basename(new URL(f).pathname) || 'document', file_url: f };
        const bytes = await readFile(f).catch((e: Error) => {
          throw new UsageError(`cannot read ${f}: ${e.message}`);
        });
        return { file_name: basename(f), file_data: bytes.toString('base64') };
      }),
    );
    const c = await client(o);
    const body: SendRequest = { fax_data } as SendRequest;
    if (recipients.length === 1) {
      body.fax_number = recipients[0]!.fax_number;
      if (recipients[0]!.to_name) body.recipient_name = recipients[0]!.to_name;
    } else body.recipients = recipients;
    if (o.subject !== undefined) body.subject = o.subject;
    if (o.comments !== undefined) body.message = o.comments;
    if (o.senderName !== undefined) body.sender_name = o.senderName;
    if (o.from !== undefined) body.caller_id = o.from;
    if (o.at !== undefined) body.scheduled_date = atTime(o.at, new Date());
    if (o.reference !== undefined) body.client_reference = o.reference;
    if (o.tries !== undefined) body.max_dials = o.tries;
    if (o.giveUpAfter !== undefined) body.give_up_after = Math.round(duration(o.giveUpAfter) / 1000);
    if (o.priority !== undefined) body.fax_priority = o.priority;
    if (o.quality !== undefined) body.fax_quality = o.quality;
    if (o.approval) body.approval_required = true;
    const template = o.template ?? (await coverTemplate(c, o));
    if (template) body.template_id = template;

    const sent = await c.sendFax(body, o.idempotencyKey ? { idempotencyKey: o.idempotencyKey } : {});
    const jobIds = sent.job_ids ?? [sent.job_id];
    if (!o.wait) {
      if (json) printJson(sent);
      else if (sent.broadcast_id) {
        out(`broadcast ${sent.broadcast_id}: ${jobIds.length} faxes`);
        for (const [i, id] of jobIds.entries()) out(`job ${id} to ${recipients[i]?.fax_number ?? ''}`);
      } else out(`job ${sent.job_id}`);
      return;
    }
    if (!json)
      out(
        sent.broadcast_id ? `broadcast ${sent.broadcast_id}: jobs ${jobIds.join(' ')}` : `job ${sent.job_id}`,
      );
    const faxes = await waitFor(c, jobIds, o);
    const delivered = faxes.every((f) => f.state === 'delivered');
    if (json) printJson({ ...sent, faxes: faxes.map(summary) });
    else
      for (const f of faxes)
        out(
          f.state === 'delivered'
            ? `job ${f.job_id}: delivered to ${f.fax_number}, ${f.pages_sent} page${f.pages_sent === 1 ? '' : 's'}`
            : `job ${f.job_id}: ${paint(f.state)}${reasonOf(f) ? `: ${reasonOf(f)}` : ''}`,
        );
    if (!delivered && !json)
      for (const f of faxes.filter((x) => x.state !== 'delivered'))
        err(`faxline: job ${f.job_id} to ${f.fax_number} ${f.state}${reasonOf(f) ? `: ${reasonOf(f)}` : ''}`);
    result = delivered ? exitCodes.ok : exitCodes.notDelivered;
  });

  /** Polls the jobs until each is final; progress on stderr (one line per change off a terminal). */
  async function waitFor(c: FaxlineClient, ids: string[], o: SendOptions): Promise<Fax[]> {
    const every = duration(o.interval);
    const deadline = o.timeout !== undefined ? Date.now() + duration(o.timeout) : Infinity;
    const last = new Map<string, string>();
    const tty = Boolean(io.stderr.isTTY);
    let interrupted = false;
    const onSigint = () => {
      interrupted = true;
    };
    process.once('SIGINT', onSigint);
    try {
      for (;;) {
        const faxes = await Promise.all(ids.map((id) => c.getFax(id)));
        for (const f of faxes) {
          const line = progress(f);
          if (last.get(f.job_id) !== line) {
            last.set(f.job_id, line);
            const text = `${ids.length > 1 ? `${f.job_id} ` : ''}${line}`;
            if (tty && ids.length === 1) io.stderr.write(`\r\x1b[K${text}`);
            else err(text);
          }
        }
        if (faxes.every((f) => finalStates.includes(f.state))) {
          if (tty && ids.length === 1) io.stderr.write('\n');
          return faxes;
        }
        if (interrupted) throw new ExitError(exitCodes.interrupted, 'stopped waiting; the fax goes on');
        if (Date.now() + every > deadline)
          throw new ExitError(exitCodes.timeout, `still not finished after ${o.timeout}; the fax goes on`);
        await new Promise((r) => setTimeout(r, every));
      }
    } finally {
      process.removeListener('SIGINT', onSigint);
    }
  }

  // ---- status ----------------------------------------------------------------------------------
  common(
    program
      .command('status')
      .description('the faxes, newest first (like faxstat), or one fax with its history')
      .argument('[job id]')
      .addOption(new Option('--state <state>', 'only faxes in this state').choices(STATES))
      .option('--reference <text>', 'only faxes with this client_reference')
      .option('--limit <n>', 'at most this many faxes (default 20)', positiveInt)
      .option('--all', 'every fax (follows the pages)'),
  ).action(
    async (
      jobId: string | undefined,
      o: Common & { state?: FaxState; reference?: string; limit?: number; all?: boolean },
    ) => {
      const c = await client(o);
      if (jobId) {
        const f = await c.getFax(jobId);
        if (json) return void printJson(f);
        out(
          table([
            ['job', f.job_id],
            ['state', paint(f.state)],
            ['to', f.fax_number],
            ['from', f.caller_id],
            ['pages', pagesOf(f)],
            ['attempts', String(f.attempts)],
            ['created', f.created_at],
            ...(f.scheduled_date ? [['scheduled', f.scheduled_date]] : []),
            ...(f.completed_at ? [['completed', f.completed_at]] : []),
            ...(f.next_attempt_at ? [['next attempt', f.next_attempt_at]] : []),
            ...(f.client_reference ? [['reference', f.client_reference]] : []),
            ...(f.broadcast_id ? [['broadcast', f.broadcast_id]] : []),
            ...(reasonOf(f) ? [['reason', reasonOf(f)!]] : []),
          ]),
        );
        out('');
        out(
          table([
            ['AT', 'FROM', 'TO', 'ATTEMPT'],
            ...f.history.map((h) => [h.at, h.from ?? '', h.to, String(h.attempt)]),
          ]),
        );
        return;
      }
      const query: FaxListQuery = {};
      if (o.state) query.state = o.state;
      if (o.reference) query.client_reference = o.reference;
      const max = o.all ? Infinity : (o.limit ?? 20);
      query.limit = Math.min(max, 1000);
      const rows = [];
      for await (const f of c.faxes(query)) {
        if (rows.length >= max) break;
        rows.push(f);
      }
      if (json) return void printJson(rows);
      if (rows.length === 0) return void out('no faxes');
      out(
        table([
          ['JOB', 'STATE', 'TO', 'PAGES', 'TRIES', 'CREATED', 'REFERENCE'],
          ...rows.map((f) => [
            f.job_id,
            paint(f.state),
            f.fax_number,
            pagesOf(f),
            String(f.attempts),
            f.created_at,
            f.client_reference ?? '',
          ]),
        ]),
      );
    },
  );

  // ---- cancel ----------------------------------------------------------------------------------
  common(
    program
      .command('cancel')
      .description('cancel a fax that is not sent yet: scheduled or awaiting approval (like faxrm)')
      .argument('<job id>'),
  ).action(async (jobId: string, o: Common) => {
    const c = await client(o);
    const r = await c.cancelFax(jobId);
    if (json) printJson({ job_id: jobId, message: r.message });
    else out(`job ${jobId}: ${r.message}`);
  });

  // ---- report ----------------------------------------------------------------------------------
  common(
    program
      .command('report')
      .description('the transmission report (PDF) of a finished fax')
      .argument('<job id>')
      .requiredOption('-o, --output <file>', 'where to write it ("-" for standard output)'),
  ).action(async (jobId: string, o: Common & { output: string }) => {
    const c = await client(o);
    const bytes = await save(await c.report(jobId), o.output);
    if (o.output === '-') return;
    if (json) printJson({ job_id: jobId, file: o.output, bytes });
    else out(`wrote ${o.output} (${bytes} bytes)`);
  });

  // ---- received --------------------------------------------------------------------------------
  const received = common(
    program
      .command('received')
      .description('received faxes, newest first; `received get <id> -o fax.pdf` downloads one')
      .option('--unread', 'only those not marked read')
      .option('--limit <n>', 'at most this many (default 20)', positiveInt)
      .option('--all', 'every received fax (follows the pages)'),
  ).action(async (o: Common & { unread?: boolean; limit?: number; all?: boolean }) => {
    const c = await client(o);
    const max = o.all ? Infinity : (o.limit ?? 20);
    const rows = [];
    for await (const f of c.receivedFaxes({
      ...(o.unread ? { read: 'false' } : {}),
      limit: Math.min(max, 1000),
    })) {
      if (rows.length >= max) break;
      rows.push(f);
    }
    if (json) return void printJson(rows);
    if (rows.length === 0) return void out(o.unread ? 'no unread faxes' : 'no received faxes');
    out(
      table([
        ['ID', 'STATUS', 'FROM', 'TO', 'PAGES', 'RECEIVED', 'READ'],
        ...rows.map((f) => [
          f.id,
          f.status,
          f.from ?? f.remote_csid ?? '',
          f.to,
          String(f.pages),
          f.received_at ?? f.created_at,
          f.read ? 'yes' : 'no',
        ]),
      ]),
    );
  });
  common(
    received
      .command('get')
      .description('download a received fax')
      .argument('<id>')
      .requiredOption('-o, --output <file>', 'where to write it ("-" for standard output)')
      .addOption(new Option('--format <format>', 'file format').choices(['pdf', 'tiff']).default('pdf'))
      .option('--mark-read', 'mark it read once downloaded'),
  ).action(async (id: string, o: Common & { output: string; format: 'pdf' | 'tiff'; markRead?: boolean }) => {
    const c = await client(o);
    const bytes = await save(await c.receivedFile(id, o.format), o.output);
    if (o.markRead) await c.markReceivedFax(id, true);
    if (o.output === '-') return;
    if (json) printJson({ id, file: o.output, bytes });
    else out(`wrote ${o.output} (${bytes} bytes)`);
  });

  /** Writes a download to `path` (through a temporary file, renamed when complete) or stdout. */
  async function save(d: Download, path: string): Promise<number> {
    let bytes = 0;
    const counted = Readable.fromWeb(d.body as import('node:stream/web').ReadableStream).on(
      'data',
      (b: Buffer) => {
        bytes += b.length;
      },
    );
    if (path === '-') {
      await pipeline(counted, io.stdout, { end: false });
      return bytes;
    }
    const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.part`);
    try {
      await pipeline(counted, createWriteStream(tmp));
      await rename(tmp, path);
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    }
    return bytes;
  }

  try {
    const argvFull = ['node', 'faxline', ...argv];
    await program.parseAsync(argvFull);
    return result;
  } catch (e) {
    return fail(e);
  }

  function fail(e: unknown): number {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.exitCode === 0)
        return exitCodes.ok;
      return exitCodes.usage; // commander printed the message
    }
    let code: number;
    let message: string;
    let extra: Record<string, unknown> = {};
    if (e instanceof FaxlineError) {
      code =
        e.http === 401
          ? exitCodes.auth
          : e.http === 0 || e.http >= 500 || e.http === 429
            ? exitCodes.unavailable
            : exitCodes.refused;
      message =
        e.http === 401
          ? `${e.message} (HTTP 401: check FAXLINE_API_KEY or run \`faxline login\`)`
          : e.message;
      extra = {
        http: e.http,
        status: e.status,
        ...(e.field ? { field: e.field } : {}),
        ...(e.data !== undefined ? { data: e.data } : {}),
      };
    } else if (e instanceof ExitError) {
      code = e.code;
      message = e.message;
    } else if (e instanceof UsageError || e instanceof TypeError) {
      code = exitCodes.usage;
      message = e.message;
    } else {
      code = exitCodes.unavailable;
      message = e instanceof Error ? e.message : String(e);
    }
    if (json) err(JSON.stringify({ error: { message, exit_code: code, ...extra } }));
    else err(`faxline: ${message}`);
    return code;
  }
}

interface SendOptions extends Common {
  destination: string[];
  destinationsFile?: string;
  /** undefined: neither --cover nor --no-cover (the Fax Default decides). */
  cover?: boolean;
  template?: string;
  subject?: string;
  comments?: string;
  senderName?: string;
  from?: string;
  at?: string;
  reference?: string;
  tries?: number;
  giveUpAfter?: string;
  priority?: 'high' | 'regular';
  quality?: 'low' | 'standard' | 'hd';
  approval?: boolean;
  idempotencyKey?: string;
  wait?: boolean;
  timeout?: string;
  interval: string;
}

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1)
    throw new CommanderError(2, 'faxline.usage', `not a whole number ≥ 1: ${v}`);
  return n;
}

function errorFrom(res: Response, error: unknown): FaxlineError {
  const e = (error ?? {}) as { status?: number; message?: string; data?: unknown };
  return new FaxlineError(res.status, {
    status: e.status ?? -1,
    message: e.message ?? `HTTP ${res.status}`,
    data: e.data,
  });
}

/**
 * --cover / --no-cover: the API draws the cover its Fax Default says. The account's default is used
 * when it already does what was asked; else the oldest Fax Default that does; none → usage error.
 */
async function coverTemplate(c: FaxlineClient, o: SendOptions): Promise<string | undefined> {
  if (o.cover === undefined) return undefined;
  const want = o.cover;
  const all = [];
  for await (const d of c.paginate((cursor) =>
    c.api.GET('/v1/fax-defaults', { params: { query: { limit: 1000, ...(cursor ? { cursor } : {}) } } }),
  ))
    all.push(d as { id: string; is_default: boolean; cover_page: boolean });
  const def = all.find((d) => d.is_default);
  if (def && def.cover_page === want) return undefined;
  const match = all.find((d) => d.cover_page === want);
  if (match) return match.id;
  throw new ExitError(
    exitCodes.refused,
    `no Fax Default of this account ${want ? 'draws' : 'skips'} the cover page: create one (POST /v1/fax-defaults with cover_page ${want}) or pass --template`,
  );
}

function progress(f: Fax): string {
  switch (f.state) {
    case 'sending':
      return `sending page ${Math.min(f.pages_sent + 1, f.page_count ?? f.pages_sent + 1)} of ${f.page_count ?? '?'}`;
    case 'retry_waiting':
      return `waiting to retry (attempt ${f.attempts} ${reasonOf(f) ?? ''})${f.next_attempt_at ? `, next at ${f.next_attempt_at}` : ''}`.replace(
        ' )',
        ')',
      );
    case 'delivered':
      return `delivered, ${f.pages_sent} of ${f.page_count ?? f.pages_sent} pages`;
    case 'scheduled':
      return `scheduled for ${f.scheduled_date ?? '?'}`;
    default:
      return reasonOf(f) && finalStates.includes(f.state) ? `${f.state}: ${reasonOf(f)}` : f.state;
  }
}

function reasonOf(f: Pick<Fax, 'failure'>): string | undefined {
  if (!f.failure) return undefined;
  return f.failure.reason ? `${f.failure.reason} (${f.failure.code})` : f.failure.code;
}

function pagesOf(f: { pages_sent: number; page_count: number | null }): string {
  return f.page_count === null
    ? f.pages_sent
      ? String(f.pages_sent)
      : ''
    : `${f.pages_sent}/${f.page_count}`;
}

function summary(f: Fax) {
  return {
    job_id: f.job_id,
    state: f.state,
    fax_number: f.fax_number,
    pages_sent: f.pages_sent,
    page_count: f.page_count,
    attempts: f.attempts,
    failure: f.failure,
    completed_at: f.completed_at,
  };
}

/** A line from standard input; on a terminal, prompted and not echoed. */
async function readSecret(io: Io, prompt: string): Promise<string> {
  const tty = Boolean(io.stdin.isTTY);
  const rl = createInterface({ input: io.stdin, output: tty ? io.stderr : undefined, terminal: tty });
  if (tty) {
    io.stderr.write(prompt);
    (rl as unknown as { _writeToOutput: (s: string) => void })._writeToOutput = () => undefined;
  }
  try {
    for await (const line of rl) return line.trim();
    return '';
  } finally {
    rl.close();
    if (tty) io.stderr.write('\n');
  }
}
