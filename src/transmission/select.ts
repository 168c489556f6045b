// Chooses the transmission backend from the configuration (BACKEND). New backends register here.
import type { Registry } from 'prom-client';
import type { Config } from '../config.ts';
import type { TransmissionBackend } from './backend.ts';
import { LoopbackLine } from './loopback.ts';
import { SimulatedLine } from './simulated.ts';
import { loadMediaEngine, type NativeMediaEngine } from './sip/media-engine.ts';
import { registerMediaMetrics } from './sip/media-metrics.ts';
import { registerSipMetrics } from './sip/sip-metrics.ts';
import { SipLine } from './sip/line.ts';

type SipKeys =
  | 'SIP_TRUNK'
  | 'SIP_USERNAME'
  | 'SIP_PASSWORD'
  | 'SIP_LISTEN'
  | 'SIP_PUBLIC_ADDRESS'
  | 'SIP_T38'
  | 'SIP_AUDIO_CONCEAL'
  | 'SIP_REGISTER'
  | 'SIP_INBOUND_USERNAME'
  | 'SIP_INBOUND_PASSWORD'
  | 'SIP_INBOUND_REALM'
  | 'SIP_INBOUND_ALGORITHMS'
  | 'SIP_RING_TIMEOUT_S'
  | 'SIP_MEDIA_TIMEOUT_S'
  | 'INBOUND_MAX_CALL_SECONDS'
  | 'INBOUND_MAX_PAGE_MM'
  | 'INBOUND_MAX_PAGES'
  | 'INBOUND_T6'
  | 'RTP_PORTS';

export function sipLineFrom(
  cfg: Pick<Config, SipKeys>,
  media: SipLine['options']['media'] = async () => loadMediaEngine({ conceal: cfg.SIP_AUDIO_CONCEAL }),
): SipLine {
  const at = cfg.SIP_LISTEN.lastIndexOf(':');
  if ((cfg.SIP_INBOUND_USERNAME === '') !== (cfg.SIP_INBOUND_PASSWORD === ''))
    throw new Error('SIP_INBOUND_USERNAME and SIP_INBOUND_PASSWORD are set together, or neither');
  return new SipLine({
    trunk: cfg.SIP_TRUNK,
    ...(cfg.SIP_USERNAME ? { username: cfg.SIP_USERNAME, password: cfg.SIP_PASSWORD } : {}),
    listen: {
      host: cfg.SIP_LISTEN.slice(0, at).replace(/^\[|\]$/g, ''),
      port: Number(cfg.SIP_LISTEN.slice(at + 1)),
    },
    ...(cfg.SIP_PUBLIC_ADDRESS ? { publicAddress: cfg.SIP_PUBLIC_ADDRESS } : {}),
    t38: cfg.SIP_T38,
    rtpPorts: cfg.RTP_PORTS,
    ringTimeoutMs: cfg.SIP_RING_TIMEOUT_S * 1000,
    mediaTimeoutMs: cfg.SIP_MEDIA_TIMEOUT_S * 1000,
    maxReceiveMs: cfg.INBOUND_MAX_CALL_SECONDS * 1000,
    maxPageMm: cfg.INBOUND_MAX_PAGE_MM,
    maxPages: cfg.INBOUND_MAX_PAGES,
    inboundT6: cfg.INBOUND_T6,
    register: cfg.SIP_REGISTER,
    ...(cfg.SIP_INBOUND_USERNAME
      ? {
          inboundAuth: {
            realm: cfg.SIP_INBOUND_REALM,
            username: cfg.SIP_INBOUND_USERNAME,
            password: cfg.SIP_INBOUND_PASSWORD,
            algorithms: cfg.SIP_INBOUND_ALGORITHMS,
          },
        }
      : {}),
    media,
  });
}

/**
 * `registry`: the process's metrics registry (absent when metrics are off); the SIP line registers
 * its media engine's metrics on it.
 */
export function createBackend(
  cfg: Pick<Config, 'BACKEND' | 'SIM_SPEEDUP' | 'LOOPBACK_TRANSPORT' | 'LOOPBACK_ECM' | SipKeys>,
  o: { registry?: Registry } = {},
): TransmissionBackend {
  switch (cfg.BACKEND) {
    case 'simulated':
      return new SimulatedLine(cfg.SIM_SPEEDUP);
    case 'loopback':
      return new LoopbackLine({
        transport: cfg.LOOPBACK_TRANSPORT,
        ecm: cfg.LOOPBACK_ECM,
        speedup: cfg.SIM_SPEEDUP,
      });
    case 'sip': {
      // The engine is loaded at the line's start; until then the media metrics show no traffic.
      let engine: NativeMediaEngine | null = null;
      const line = sipLineFrom(
        cfg,
        async () => (engine = loadMediaEngine({ conceal: cfg.SIP_AUDIO_CONCEAL })),
      );
      if (o.registry) {
        registerMediaMetrics(o.registry, () => engine);
        registerSipMetrics(o.registry, () => line.userAgent);
      }
      return line;
    }
  }
}
