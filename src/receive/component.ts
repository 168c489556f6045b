// What the answering side of a process is given: the router (with SIP_INBOUND_ALLOW resolved), the
// sink, and their metrics on the process's registry. The SIP user agent's answering engine takes
// these two; nothing else of src/receive/ needs to be known by it.
import type client from 'prom-client';
import type { Config } from '../config.ts';
import type { Pool } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import { createReceiveMetrics, type ReceiveMetrics } from './metrics.ts';
import { InboundRouter, resolveAllowList } from './routing.ts';
import { PgReceivedFaxSink, type ReceivedFaxSink } from './sink.ts';
import { findReceivingNumber } from './store.ts';

export interface Receiving {
  router: InboundRouter;
  sink: ReceivedFaxSink;
  metrics: ReceiveMetrics;
}

export async function createReceiving(d: {
  db: Pool;
  log: Logger;
  registry: client.Registry;
  cfg: Pick<Config, 'SIP_INBOUND_ALLOW' | 'SIP_INBOUND_COUNTRY_CODE' | 'INBOUND_LINES'>;
  /** SIP_TRUNK (a SIP URI), whose host's addresses are the default allow-list; '' for none. */
  trunk: string;
  resolve?: (host: string) => Promise<string[]>;
}): Promise<Receiving> {
  const log = d.log.child({ component: 'receiving' });
  const allow = await resolveAllowList(d.cfg.SIP_INBOUND_ALLOW, d.trunk, d.resolve);
  if (allow.cidrs.length === 0)
    log.warn(
      'SIP_INBOUND_ALLOW is empty and there is no SIP_TRUNK: every inbound call will be refused (403)',
    );
  else log.info({ allow: allow.cidrs.map((c) => c.text) }, 'inbound calls accepted from these addresses');
  const metrics = createReceiveMetrics(d.registry);
  const router = new InboundRouter({
    allow,
    countryCode: d.cfg.SIP_INBOUND_COUNTRY_CODE,
    lines: d.cfg.INBOUND_LINES,
    findNumber: (n) => findReceivingNumber(d.db, n),
    onRefused: (cause) => metrics.refused.inc({ cause }),
  });
  return { router, sink: new PgReceivedFaxSink({ db: d.db, log, metrics }), metrics };
}
