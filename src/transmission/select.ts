// Chooses the transmission backend from the configuration (BACKEND). New backends register here.
import type { Config } from '../config.ts';
import type { TransmissionBackend } from './backend.ts';
import { LoopbackLine } from './loopback.ts';
import { SimulatedLine } from './simulated.ts';

export function createBackend(
  cfg: Pick<Config, 'BACKEND' | 'SIM_SPEEDUP' | 'LOOPBACK_TRANSPORT' | 'LOOPBACK_ECM'>,
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
  }
}
