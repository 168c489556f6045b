// Multi-host PostgreSQL URLs, as libpq writes them: postgres://user@h1:5432,h2:5432/db?
// target_session_attrs=read-write. node-postgres 8 takes one host only, so the pools (ours and
// pg-boss's) get a Client class that picks the host: it connects to the host that last worked and
// checks it accepts writes (SHOW transaction_read_only); when that fails it looks through the list for
// the read-write one, remembers it for the next connection, and fails this one. So after a failover
// existing connections break, one new connection per pool fails, and the next ones reach the new
// primary, without a restart. The first connection of a pool (or a lone client) has no host that
// worked yet: it looks through the list before connecting, so a process started while the first
// host is down or a standby still starts. A single-host URL without target_session_attrs is left to
// pg as it is.
import pg from 'pg';

export interface PgHost {
  host: string;
  port: number;
}

export interface ParsedPgUrl {
  hosts: PgHost[];
  /** Only servers that accept read-write transactions are used (target_session_attrs=read-write). */
  readWrite: boolean;
  /** The URL with host number `i` alone and without target_session_attrs (what pg understands). */
  single(i: number): string;
}

const SHAPE = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)(.*)$/;

/** Parses a one- or multi-host PostgreSQL URL; throws on what libpq would not accept either. */
export function parsePgUrl(url: string): ParsedPgUrl {
  const m = SHAPE.exec(url);
  if (!m) throw new Error('expected a URL starting with postgres: or postgresql:');
  const [, scheme, userinfo = '', hostList = '', rest = ''] = m;
  const parts = hostList.split(',');
  const hosts = parts.map((p) => {
    const hp = /^(\[[^\]]+\]|[^:]*)(?::(\d+))?$/.exec(p);
    // No host at all (postgres:///db?host=/run/postgresql) is libpq's and pg's default, one host.
    if (!hp || (hp[1] === '' && (parts.length > 1 || hp[2] !== undefined)))
      throw new Error(`bad host "${p}" in the host list`);
    return { host: hp[1]!.replace(/^\[(.*)\]$/, '$1'), port: Number(hp[2] ?? 5432) };
  });
  const qAt = rest.indexOf('?');
  const path = qAt < 0 ? rest : rest.slice(0, qAt);
  const query = new URLSearchParams(qAt < 0 ? '' : rest.slice(qAt + 1));
  const attrs = query.get('target_session_attrs') ?? 'any';
  if (attrs !== 'any' && attrs !== 'read-write')
    throw new Error(`target_session_attrs=${attrs} is not supported (any or read-write)`);
  query.delete('target_session_attrs');
  const q = query.toString();
  const single = (i: number) => {
    const p = parts[i];
    if (p === undefined) throw new Error(`no host number ${i}`);
    const out = `${scheme}${userinfo}${p}${path}${q ? `?${q}` : ''}`;
    new URL(out); // each single-host form must be a valid URL
    return out;
  };
  for (let i = 0; i < parts.length; i++) single(i);
  return { hosts, readWrite: attrs === 'read-write', single };
}

/** Applies `edit` (user, password, database, query) to every host's form of a one- or multi-host URL. */
export function editPgUrl(url: string, edit: (u: URL) => void): string {
  const m = SHAPE.exec(url);
  if (!m || !m[3]?.includes(',')) {
    const u = new URL(url);
    edit(u);
    return u.toString();
  }
  // Edit the form with a placeholder host, then put the host list back.
  const u = new URL(`${m[1]}${m[2] ?? ''}placeholder.invalid${m[4] ?? ''}`);
  edit(u);
  return u.toString().replace('placeholder.invalid', m[3]);
}

interface Chooser {
  parsed: ParsedPgUrl;
  /** The search under way, shared by the connections that fail at once (a failover breaks them all). */
  searching?: Promise<number | undefined> | undefined;
  /** Index of the host that last accepted a connection of the kind asked for. */
  current: number;
  /** Whether `current` has accepted such a connection yet (until then, a connection searches first). */
  found: boolean;
  onSwitch?: ((from: PgHost, to: PgHost) => void) | undefined;
}

async function acceptsWrites(c: pg.Client): Promise<boolean> {
  const r = await c.query<{ transaction_read_only: string }>('SHOW transaction_read_only');
  return r.rows[0]?.transaction_read_only === 'off';
}

/** Looks for a host that takes a connection of the kind asked for, in list order after `from`. */
async function findHost(ch: Chooser, from: number, timeoutMs: number): Promise<number | undefined> {
  const n = ch.parsed.hosts.length;
  for (let k = 1; k <= n; k++) {
    const i = (from + k) % n;
    const probe = new pg.Client({
      connectionString: ch.parsed.single(i),
      connectionTimeoutMillis: timeoutMs,
      query_timeout: timeoutMs,
    });
    probe.on('error', () => undefined);
    try {
      await probe.connect();
      if (!ch.parsed.readWrite || (await acceptsWrites(probe))) return i;
    } catch {
      // down or unreachable: the next one
    } finally {
      await probe.end().catch(() => undefined);
    }
  }
  return undefined;
}

class NotWritableError extends Error {
  /** SQLSTATE 08001 (cannot establish an acceptable connection): an outage to callers (errors.ts). */
  readonly code = '08001';
  constructor(h: PgHost) {
    super(`PostgreSQL at ${h.host}:${h.port} is read-only (a standby): looking for the primary`);
    this.name = 'NotWritableError';
  }
}

/** A pg.Client class for pools: connects to the chooser's current host and checks it (see top). */
function chooserClient(ch: Chooser): typeof pg.Client {
  return class HostChoosingClient extends pg.Client {
    private tried: number;
    private readonly timeoutMs: number;
    constructor(config?: string | pg.ClientConfig) {
      const i = ch.current;
      const base = typeof config === 'string' ? {} : (config ?? {});
      super({ ...base, connectionString: ch.parsed.single(i) });
      this.tried = i;
      this.timeoutMs = base.connectionTimeoutMillis ?? 5000;
    }

    override connect(): Promise<pg.Client>;
    override connect(callback: (err: Error | null, c?: pg.Client) => void): void;
    override connect(callback?: (err: Error | null, c?: pg.Client) => void): Promise<pg.Client> | void {
      const done = this.connectChecked().then(() => this as pg.Client);
      if (!callback) return done;
      done.then(
        (c) => callback(null, c),
        (err: Error) => callback(err),
      );
    }

    /** Points this (not yet connected) client at host `i` of the list. */
    private aim(i: number): void {
      const h = ch.parsed.hosts[i]!;
      const self = this as unknown as { host: string; port: number; connectionParameters: PgHost };
      self.host = self.connectionParameters.host = h.host;
      self.port = self.connectionParameters.port = h.port;
      this.tried = i;
    }

    private async connectChecked(): Promise<void> {
      if (!ch.found) {
        // No host has worked yet: find one before connecting, from the first host of the list on.
        ch.searching ??= findHost(ch, ch.parsed.hosts.length - 1, this.timeoutMs).finally(
          () => (ch.searching = undefined),
        );
        const i = await ch.searching;
        if (i !== undefined && !ch.found && i !== ch.current) {
          ch.onSwitch?.(ch.parsed.hosts[ch.current]!, ch.parsed.hosts[i]!);
          ch.current = i;
        }
        if (ch.current !== this.tried) this.aim(ch.current);
      }
      let connected = false;
      try {
        await super.connect();
        connected = true;
        if (ch.parsed.readWrite && !(await acceptsWrites(this as pg.Client)))
          throw new NotWritableError(ch.parsed.hosts[this.tried]!);
        if (ch.current === this.tried) ch.found = true;
      } catch (err) {
        if (connected) await this.end().catch(() => undefined);
        if (ch.current === this.tried) {
          ch.searching ??= findHost(ch, this.tried, this.timeoutMs).finally(() => (ch.searching = undefined));
          const next = await ch.searching;
          if (next !== undefined && ch.current === this.tried && next !== this.tried) {
            ch.onSwitch?.(ch.parsed.hosts[this.tried]!, ch.parsed.hosts[next]!);
            ch.current = next;
          }
        }
        throw err;
      }
    }
  };
}

/**
 * The connection part of a pg Pool or Client configuration (pg-boss passes its options to pg.Pool
 * too): `{ connectionString }` for a plain URL, plus a host-choosing `Client` for a multi-host or
 * read-write URL. Each call has its own memory of the current host (one per pool).
 */
export function pgConnection(
  url: string,
  onSwitch?: (from: PgHost, to: PgHost) => void,
): { connectionString: string; Client?: typeof pg.Client } {
  const parsed = parsePgUrl(url);
  if (parsed.hosts.length === 1 && !parsed.readWrite) return { connectionString: url };
  return {
    connectionString: parsed.single(0),
    Client: chooserClient({ parsed, current: 0, found: false, onSwitch }),
  };
}

/** One client for a one- or multi-host URL (the same host choice as a pool's, for one connection). */
export function newPgClient(url: string, config: Omit<pg.ClientConfig, 'connectionString'> = {}): pg.Client {
  const { Client = pg.Client, connectionString } = pgConnection(url);
  return new Client({ ...config, connectionString });
}
