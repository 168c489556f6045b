// Prometheus metrics of the SIP media engine, registered on the process's registry (faxline_
// prefix, base units, bounded labels: protocol, transport, reason). The engine counts on its own
// threads; these read its process-wide totals when Prometheus scrapes. docs/observability.md lists them.
import client from 'prom-client';

/** Process-wide packet counts of one protocol, since the process started (they never go back). */
export interface PacketCounts {
  sent: number;
  received: number;
  /** Packets the far end's sequence numbers say never arrived. */
  lost: number;
  /** UDPTL packets rebuilt from redundancy. */
  recovered: number;
  /** Audio frames played without their packet (repeated or silence). */
  concealed: number;
  late: number;
  duplicates: number;
  malformed: number;
  /** Datagrams from anyone but the far end's signalled media address and port. */
  droppedSource: number;
}

export interface EngineCounters {
  rtp: PacketCounts;
  udptl: PacketCounts;
  /** Sessions whose fax exchange is running, by the transport they are on now. */
  sessions: { audio: number; t38: number };
}

/** What the metrics read: the native engine (NativeMediaEngine) implements it. */
export interface MediaMetricsSource {
  counters(): EngineCounters;
  /** p99 of the send-time deviation since the previous call, which starts a new window. */
  takeJitterWindow(): { samples: number; p99Us: number };
  /** Media-thread stalls since the process started: clock resets (over 200 ms late), work over 20 ms. */
  stalls(): { lateResets: number; slowWork: number };
}

const protocols = ['rtp', 'udptl'] as const;
const dropReasons = {
  source: 'droppedSource',
  malformed: 'malformed',
  late: 'late',
  duplicate: 'duplicates',
} as const;

/**
 * Registers the media metrics on `registry`. `source` returns the engine once the SIP line has
 * loaded it, null before (or where the addon is not built): the metrics then show no traffic.
 */
export function registerMediaMetrics(
  registry: client.Registry,
  source: () => MediaMetricsSource | null,
): void {
  const registers = [registry];
  // Counters follow the engine's totals: each scrape adds what changed since the previous one.
  const seen = new Map<string, number>();
  const follow = (c: client.Counter<string>, key: string, labels: Record<string, string>, total: number) => {
    const d = total - (seen.get(key) ?? 0);
    if (d > 0) c.inc(labels, d);
    else c.inc(labels, 0); // the series exists from the first scrape on
    seen.set(key, Math.max(total, seen.get(key) ?? 0));
  };
  const perProtocol = (
    name: string,
    help: string,
    pick: keyof PacketCounts,
    only: readonly (typeof protocols)[number][] = protocols,
  ) =>
    new client.Counter({
      name,
      help,
      labelNames: ['protocol'] as const,
      registers,
      collect() {
        const c = source()?.counters();
        for (const p of only) follow(this, `${name}:${p}`, { protocol: p }, c ? c[p][pick] : 0);
      },
    });
  perProtocol('faxline_media_packets_sent_total', 'Media packets sent, by protocol (rtp, udptl).', 'sent');
  perProtocol(
    'faxline_media_packets_received_total',
    'Media packets received from the far end, by protocol.',
    'received',
  );
  perProtocol(
    'faxline_media_packets_lost_total',
    "Media packets the far end's sequence numbers say never arrived, by protocol (before any recovery).",
    'lost',
  );
  perProtocol(
    'faxline_media_packets_recovered_total',
    'Lost UDPTL packets rebuilt from the redundancy of later packets.',
    'recovered',
    ['udptl'],
  );
  perProtocol(
    'faxline_media_frames_concealed_total',
    'Audio frames played without their RTP packet (the last frame repeated, or silence).',
    'concealed',
    ['rtp'],
  );
  new client.Counter({
    name: 'faxline_media_packets_dropped_total',
    help: 'Media datagrams dropped unused, by protocol and reason: source (not from the signalled far end), malformed, late, duplicate.',
    labelNames: ['protocol', 'reason'] as const,
    registers,
    collect() {
      const c = source()?.counters();
      for (const p of protocols)
        for (const [reason, pick] of Object.entries(dropReasons))
          follow(this, `dropped:${p}:${reason}`, { protocol: p, reason }, c ? c[p][pick] : 0);
    },
  });
  new client.Gauge({
    name: 'faxline_media_sessions',
    help: 'Fax media sessions running in this process, by transport (audio, t38).',
    labelNames: ['transport'] as const,
    registers,
    collect() {
      const s = source()?.counters().sessions;
      this.set({ transport: 'audio' }, s?.audio ?? 0);
      this.set({ transport: 't38' }, s?.t38 ?? 0);
    },
  });
  // A media thread that falls behind breaks the modem signal of every call on it: how often it did,
  // and whether its own work was slow (a long piece of work) or it was not run at all (only resets).
  new client.Counter({
    name: 'faxline_media_clock_resets_total',
    help: "Times a media session's packet clock was set forward because its media thread ran over 200 ms late.",
    registers,
    collect() {
      follow(this, 'stalls:resets', {}, source()?.stalls().lateResets ?? 0);
    },
  });
  new client.Counter({
    name: 'faxline_media_slow_work_total',
    help: 'Pieces of media-thread work (a tick of every due packet and its modem work, a command, a received datagram) that took over 20 ms.',
    registers,
    collect() {
      follow(this, 'stalls:slow', {}, source()?.stalls().slowWork ?? 0);
    },
  });
  new client.Gauge({
    name: 'faxline_media_send_jitter_p99_seconds',
    help: 'The p99 of how late media packets left against their schedule, over the packets due since the previous scrape (0 when none).',
    registers,
    collect() {
      const w = source()?.takeJitterWindow();
      this.set(w && w.samples > 0 ? w.p99Us / 1e6 : 0);
    },
  });
}
