// A browser-less client of the web console (issue 29): a cookie, the CSRF token read from the page,
// form posts as a browser sends them (urlencoded or multipart), redirects not followed.
import pg from 'pg';
import { createLogger } from '../../src/log.ts';
import promClient from 'prom-client';
import { createReceiveMetrics } from '../../src/receive/metrics.ts';
import { PgReceivedFaxSink } from '../../src/receive/sink.ts';
import { makeFaxTiff } from './faxtiff.ts';

export interface Page {
  status: number;
  text: string;
  headers: Headers;
  location: string | null;
}

export class ConsoleClient {
  readonly base: string;
  cookie = '';
  constructor(base: string) {
    this.base = base;
  }

  private async go(path: string, init: RequestInit = {}): Promise<Page> {
    const headers = new Headers(init.headers);
    if (this.cookie) headers.set('cookie', this.cookie);
    const r = await fetch(this.base + path, { ...init, headers, redirect: 'manual' });
    const set = r.headers.get('set-cookie');
    if (set) {
      const v = set.split(';')[0]!;
      this.cookie = v.endsWith('=') ? '' : v;
    }
    return {
      status: r.status,
      text: await r.text(),
      headers: r.headers,
      location: r.headers.get('location'),
    };
  }

  get(path: string): Promise<Page> {
    return this.go(path);
  }

  /** Posts a form; `csrf` true adds the token read from `from` (a page of the console). */
  async post(
    path: string,
    fields: Record<string, string>,
    o: {
      csrf?: string | false;
      origin?: string;
      files?: { field: string; name: string; data: Buffer }[];
    } = {},
  ): Promise<Page> {
    const all = { ...fields, ...(o.csrf ? { _csrf: o.csrf } : {}) };
    let body: FormData | URLSearchParams;
    if (o.files) {
      const fd = new FormData();
      for (const [k, v] of Object.entries(all)) fd.append(k, v);
      for (const f of o.files) fd.append(f.field, new Blob([new Uint8Array(f.data)]), f.name);
      body = fd;
    } else body = new URLSearchParams(all);
    return this.go(path, { method: 'POST', body, headers: o.origin ? { origin: o.origin } : {} });
  }

  async signIn(email: string, password: string): Promise<Page> {
    return this.post('/console/sign-in', { email, password });
  }

  /** The CSRF token of the signed-in session, read from a page's form. */
  async csrf(): Promise<string> {
    const p = await this.get('/console/outbox');
    const m = /name="_csrf" value="([^"]+)"/.exec(p.text);
    if (!m) throw new Error(`no CSRF token on the page (status ${p.status})`);
    return m[1]!;
  }
}

/** Stores a received fax for an account, as the answering side does (with `remoteIdent` as the CSID). */
export async function seedReceived(
  databaseUrl: string,
  o: { accountId: string; to: string; from?: string; remoteIdent?: string; pages?: number },
): Promise<string> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  try {
    const sink = new PgReceivedFaxSink({
      db: pool,
      log: createLogger('silent'),
      metrics: createReceiveMetrics(new promClient.Registry()),
    });
    const rec = await sink.begin({
      accountId: o.accountId,
      numberId: null,
      to: o.to,
      from: o.from ?? '+15557654321',
      stationId: o.to,
      callId: null,
    });
    await rec.complete(
      {
        ok: true,
        code: 0,
        text: 'OK',
        pages: o.pages ?? 1,
        bitRate: 14400,
        ecm: true,
        remoteIdent: o.remoteIdent ?? '+15557654321',
        transport: 'audio',
        durationMs: 20_000,
      },
      makeFaxTiff(o.pages ?? 1, 'standard'),
    );
    return rec.id;
  } finally {
    await pool.end();
  }
}
