// Prometheus metrics of the SIP signalling (faxline_ prefix, bounded labels): what the user agent
// refused or answered without keeping state, and the server transactions it holds. They read the
// user agent's own totals when Prometheus scrapes; docs/observability.md lists them.
import client from 'prom-client';

/** What the metrics read: UserAgent.counters(). */
export interface SipCountersSource {
  counters(): {
    inDialogRefused: Record<string, number>;
    statelessResponses: number;
    serverTransactions: number;
  };
}

const methods = ['INVITE', 'ACK', 'BYE', 'CANCEL', 'UPDATE', 'INFO', 'OPTIONS', 'PRACK', 'other'] as const;

/** Registers the SIP metrics; `source` is the started user agent, undefined before it started. */
export function registerSipMetrics(
  registry: client.Registry,
  source: () => SipCountersSource | undefined,
): void {
  const registers = [registry];
  const seen = new Map<string, number>();
  const follow = (c: client.Counter<string>, key: string, labels: Record<string, string>, total: number) => {
    const d = total - (seen.get(key) ?? 0);
    c.inc(labels, d > 0 ? d : 0); // the series exists from the first scrape on
    seen.set(key, Math.max(total, seen.get(key) ?? 0));
  };
  new client.Counter({
    name: 'faxline_sip_in_dialog_refused_total',
    help: "Requests in a call (re-INVITE, BYE, ACK, CANCEL, ...) from an address that is neither the call's far end nor on SIP_INBOUND_ALLOW: refused 403 (an ACK dropped), not applied. By method.",
    labelNames: ['method'] as const,
    registers,
    collect() {
      const c = source()?.counters().inDialogRefused ?? {};
      for (const m of methods) follow(this, `refused:${m}`, { method: m }, c[m] ?? 0);
    },
  });
  new client.Counter({
    name: 'faxline_sip_stateless_responses_total',
    help: 'SIP requests answered without a transaction (no 100 Trying, no retransmission): refused INVITEs (403, 401), requests for no dialog (481), OPTIONS.',
    registers,
    collect() {
      follow(this, 'stateless', {}, source()?.counters().statelessResponses ?? 0);
    },
  });
  new client.Gauge({
    name: 'faxline_sip_server_transactions',
    help: 'SIP server transactions held now (each keeps its request, over UDP up to 32 s).',
    registers,
    collect() {
      this.set(source()?.counters().serverTransactions ?? 0);
    },
  });
}
