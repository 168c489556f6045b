// A receiving process for the kill -9 test: receives genuine faxes (SpanDSP loopback) one after the
// other into the sink until it is killed. Logs (pino JSON on stdout) "inbound fax call answered" at
// begin() and "received fax stored" after complete(). Env: DATABASE_URL, ACCOUNT_ID, NUMBER.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createLogger } from '../../src/log.ts';
import { PgReceivedFaxSink } from '../../src/receive/sink.ts';
import { loadFaxloop } from '../../src/transmission/spandsp/addon.ts';
import { makeFaxTiff } from './faxtiff.ts';

const addon = loadFaxloop();
if (!addon) throw new Error('the SpanDSP addon is not built');
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
const sink = new PgReceivedFaxSink({ db: pool, log: createLogger('info') });
const tx = makeFaxTiff(3, 'standard');
const dir = mkdtempSync(join(tmpdir(), 'faxline-rxchild-'));
const to = process.env.NUMBER!;

for (let i = 0; i < 10_000; i++) {
  const rec = await sink.begin({
    accountId: process.env.ACCOUNT_ID!,
    numberId: null,
    to,
    from: '+15550001111',
    stationId: to,
    callId: `kill-${process.pid}-${i}`,
  });
  const rx = join(dir, `rx-${i}.tif`);
  const r = await addon.run({ txFile: tx, rxFile: rx, t38: true, ecm: true, txIdent: '+15550001111' });
  await rec.complete(
    {
      ok: r.receiverCode === 0,
      code: r.receiverCode,
      text: r.receiverText,
      pages: r.pagesReceived,
      bitRate: r.bitRate,
      ecm: r.ecm,
      remoteIdent: '+15550001111',
      transport: 't38',
      durationMs: r.lineTimeMs,
    },
    rx,
  );
}
await pool.end();
