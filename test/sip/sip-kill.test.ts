// SIGKILL of a send worker in the middle of a real SIP fax call: the worker (workers/send.ts, as its
// own OS process with BACKEND=sip) dials through Kamailio to a faxline answering line and is killed
// once the call is connected and the pages are about to go. A new worker finds the lapsed lease and
// ends the job as the unknown-outcome policy says (docs/guarantees-and-faults.md): `unknown`, failure
// code `OUTCOME_UNKNOWN`, never dialled again. The trunk's own log shows one authorized INVITE for the
// number, so the fax was never sent twice.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { DemoSeed } from '../../src/admin/seed.ts';
import { loadFaxmedia, mediaUnavailableMessage } from '../../src/transmission/sip/media-engine.ts';
import type { ReceivedFax } from '../../src/transmission/sip/line.ts';
import { call, seedAccount, tokenFor } from '../support/client.ts';
import {
  AMQP_URL,
  createDatabase,
  deleteTopology,
  eventually,
  queuePrefix,
  type TestService,
} from '../support/harness.ts';
import { startProcess, type Proc } from '../support/process.ts';
import { skipUnless } from '../support/skips.ts';
import { fixturePdf } from '../support/telephony/fax-files.ts';
import { startKamailio, type Kamailio } from '../support/telephony/kamailio.ts';
import { portBlock, sipPort } from '../support/telephony/ports.ts';
import { missingTools } from '../support/telephony/tools.ts';

// A block of the RTP range claimed for this file (32 ports), never the whole range: a session here
// took ports that another file had claimed for a process not yet bound to them, and that process
// then had "no media port free (RTP_PORTS)" (CI of 2026-12-07, r9; likely r5 too).
const rtpBase = await portBlock('rtp', 32, { align: 8 });

const needs = skipUnless(missingTools('kamailio') || (!loadFaxmedia() && mediaUnavailableMessage), 'spandsp');
const CRED = { username: 'faxline-out', password: 'Trunk-Secret-18' };
const NUMBER = '+15550301';

describe('SIGKILL of a send worker during a SIP fax call', needs, () => {
  let db: Awaited<ReturnType<typeof createDatabase>>;
  let pgc: pg.Client;
  let trunk: Kamailio;
  let rx: Proc;
  let dir: string;
  const received = (): ReceivedFax[] =>
    rx.lines.flatMap((l) =>
      l.startsWith('{"received"') ? [(JSON.parse(l) as { received: ReceivedFax }).received] : [],
    );
  const prefix = queuePrefix('sk');
  const procs = new Set<Proc>();
  let seed: DemoSeed;

  const env = async (extra: Record<string, string> = {}) => ({
    DATABASE_URL: db.url,
    AMQP_URL,
    QUEUE_PREFIX: prefix,
    HOST: '127.0.0.1',
    PORT: '0',
    METRICS_PORT: '0',
    LOG_LEVEL: 'info',
    OUTBOX_SWEEP_SECONDS: '1',
    DB_POOL_SIZE: '4',
    // The killed worker's call is found by its lapsed lease: short, so the case settles fast.
    LINE_LEASE_SECONDS: '2',
    UNKNOWN_OUTCOME_POLICY: 'reconcile',
    BACKEND: 'sip',
    SIP_TRUNK: `sip:127.0.0.1:${trunk.port};transport=udp`,
    SIP_USERNAME: CRED.username,
    SIP_PASSWORD: CRED.password,
    SIP_LISTEN: `127.0.0.1:${await sipPort()}`,
    SIP_T38: 'accept',
    RTP_PORTS: `${rtpBase}-${rtpBase + 31}`,
    LINES: '2',
    ...extra,
  });

  async function start(entry: string): Promise<Proc> {
    const p = startProcess(entry, await env());
    procs.add(p);
    void p.exited.then(() => procs.delete(p));
    await p.waitFor(/"msg":"faxline started"/);
    return p;
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'faxline-sipkill-'));
    const rxPort = await sipPort();
    // The answering line in a process of its own: whatever state its call is left in by the
    // sender's death, the test can end it.
    rx = startProcess(
      fileURLToPath(new URL('../support/telephony/answer-child.ts', import.meta.url)),
      {},
      [],
      [String(rxPort), dir, 'prefer', '1'],
    );
    procs.add(rx);
    await rx.waitFor(/"listening"/);
    trunk = await startKamailio({ ...CRED, targets: { default: `127.0.0.1:${rxPort}` } });
    db = await createDatabase();
    pgc = new pg.Client({ connectionString: db.url });
    await pgc.connect();
  });

  after(async () => {
    await Promise.all(
      [...procs].map(async (p) => {
        p.child.kill('SIGKILL');
        await p.exited;
      }),
    );
    await pgc?.end();
    await deleteTopology(prefix).catch(() => undefined);
    await db?.drop();
    await trunk?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function diagnosis(jobId: string, worker: Proc): Promise<string> {
    const rows = async (sql: string) =>
      (await pgc.query(sql, [jobId])).rows.map((r) => JSON.stringify(r)).join('\n');
    return [
      '-- transitions',
      await rows(
        'SELECT from_state, to_state, attempt, at, detail FROM fax_job_transitions WHERE job_id = $1 ORDER BY id',
      ),
      '-- attempts',
      await rows(
        'SELECT attempt, outcome, failure_code, failure_message, engine FROM fax_attempts WHERE job_id = $1',
      ),
      '-- trunk',
      ...trunk.events(),
      '-- sending worker (last 30 lines)',
      ...worker.lines.slice(-30),
      '-- answering line',
      ...rx.lines.slice(-30),
    ].join('\n');
  }

  it('ends the job unknown (OUTCOME_UNKNOWN), never dialled again, one INVITE at the trunk', async () => {
    const api = await start('src/api-main.ts');
    const apiUrl = (
      JSON.parse(api.lines.find((l) => l.includes('"msg":"faxline started"'))!) as { address: string }
    ).address;
    const worker = await start('workers/send.ts');
    seed = await seedAccount({ cfg: { DATABASE_URL: db.url } } as TestService);
    const token = await tokenFor(apiUrl, seed.api_key);
    const r = await call(apiUrl, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: NUMBER,
        fax_quality: 'standard',
        fax_data: [
          { file_name: 'a4-text-5p.pdf', file_data: fixturePdf('a4-text-5p.pdf').toString('base64') },
        ],
      },
    });
    assert.equal(r.http, 200, JSON.stringify(r.body));
    const jobId = r.body.data.job_id as string;
    const state = async () =>
      (
        await pgc.query<{ state: string; attempts: number }>(
          'SELECT state, attempts FROM fax_jobs WHERE id = $1',
          [jobId],
        )
      ).rows[0]!;
    // Killed once the call is connected (T.30 trained, pages about to move): mid-call.
    await eventually(
      async () =>
        (
          await pgc.query("SELECT 1 FROM fax_job_transitions WHERE job_id = $1 AND to_state = 'sending'", [
            jobId,
          ])
        ).rowCount! > 0,
      150_000,
      200,
    ).catch(async (err: unknown) => {
      // What the job, the trunk and both lines did: the cause of a call that never got this far.
      throw new Error(`${(err as Error).message}\n${await diagnosis(jobId, worker)}`);
    });
    worker.child.kill('SIGKILL');
    await worker.exited;
    console.log(`sip kill: worker killed while ${JSON.stringify(await state())}`);
    await start('workers/send.ts'); // the new worker (in procs, killed in after)
    const end = await eventually(
      async () => {
        const s = await state();
        return ['delivered', 'failed', 'unknown', 'retry_waiting'].includes(s.state) ? s : null;
      },
      60_000,
      200,
    );
    const att = await pgc.query<{ attempt: number; outcome: string; failure_code: string | null }>(
      'SELECT attempt, outcome, failure_code FROM fax_attempts WHERE job_id = $1 ORDER BY attempt',
      [jobId],
    );
    console.log(`sip kill: job ${end.state}, attempts ${JSON.stringify(att.rows)}`);
    assert.equal(end.state, 'unknown', 'a call cut off by the kill is not known to have been received');
    assert.equal(end.attempts, 1, 'never dialled again');
    assert.deepEqual(
      att.rows.map((a) => [a.attempt, a.outcome, a.failure_code]),
      [[1, 'unknown', 'OUTCOME_UNKNOWN']],
    );
    const invites = trunk.events().filter((e) => e === `authorized INVITE ${CRED.username} to ${NUMBER}`);
    assert.equal(invites.length, 1, 'one call reached the trunk');
    assert.ok(
      received().every((x) => !x.ok),
      'the receiver did not get the whole fax',
    );
  });

  it('the answering side ends the orphaned call by itself (no media, then its T.30 timeout)', async () => {
    // Its far end died without a BYE: a receiver must give up on its own, not hold the line forever.
    await eventually(async () => received().length >= 1, 60_000, 200).catch(() => {
      throw new Error('the answering line still holds the call 60 s after its far end died');
    });
    assert.equal(received().length, 1, 'one call reached the answering line');
    assert.equal(received()[0]!.ok, false, received()[0]!.reason);
  });
});
