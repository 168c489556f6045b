// Chooses the transmission backend from the configuration (BACKEND). New backends register here.
import type { Config } from '../config.ts';
import type { TransmissionBackend } from './backend.ts';
import { SimulatedLine } from './simulated.ts';

export function createBackend(cfg: Pick<Config, 'BACKEND' | 'SIM_SPEEDUP'>): TransmissionBackend {
  switch (cfg.BACKEND) {
    case 'simulated':
      return new SimulatedLine(cfg.SIM_SPEEDUP);
  }
}
