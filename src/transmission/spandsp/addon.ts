// Loader for the optional SpanDSP addon (native/spandsp). faxline runs without it; the loopback
// line is offered only where it loads.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';

export interface FaxloopOptions {
  txFile: string;
  rxFile: string;
  t38?: boolean;
  ecm?: boolean;
  txIdent?: string;
  rxIdent?: string;
  txModems?: number;
  rxModems?: number;
  rxResolutions?: number;
  rxEncoding?: number;
  dropAfterPages?: number;
  answer?: boolean;
  maxLineMs?: number;
}

export interface FaxloopEvent {
  tMs: number;
  side: 't' | 'r';
  phase: 'b' | 'd' | 'e';
  code: number;
  pages: number;
  bitRate: number;
}

export interface FaxloopResult {
  ok: boolean;
  completionCode: number;
  completionText: string;
  receiverCode: number;
  receiverText: string;
  lineTimeMs: number;
  pagesSent: number;
  pagesReceived: number;
  bitRate: number;
  ecm: boolean;
  xResolution: number;
  yResolution: number;
  encoding: number;
  remoteIdent: string;
  events: FaxloopEvent[];
}

type ConstantName =
  | 'V27TER'
  | 'V29'
  | 'V17'
  | 'STANDARD'
  | 'FINE'
  | 'SUPERFINE'
  | 'R8'
  | 'R16'
  | 'T4_1D'
  | 'T4_2D'
  | 'T6'
  | 'ERR_OK'
  | 'ERR_T0_EXPIRED'
  | 'ERR_T1_EXPIRED'
  | 'ERR_CANNOT_TRAIN'
  | 'ERR_INCOMPATIBLE'
  | 'ERR_NORESSUPPORT'
  | 'ERR_NOSIZESUPPORT';

export interface Faxloop {
  run(o: FaxloopOptions): Promise<FaxloopResult>;
  constants: Record<ConstantName, number>;
}

const addonPath = new URL('../../../native/spandsp/build/Release/faxloop.node', import.meta.url).pathname;

export const unavailableMessage =
  'the SpanDSP loopback line is not available: install libspandsp-dev and libtiff-dev, then run `npm run build:native`';

let cached: Faxloop | null | undefined;

/** The addon, or null when it is not built here. */
export function loadFaxloop(): Faxloop | null {
  if (cached !== undefined) return cached;
  if (!existsSync(addonPath)) return (cached = null);
  try {
    cached = createRequire(import.meta.url)(addonPath) as Faxloop;
  } catch {
    cached = null; // built against a library that is no longer installed
  }
  return cached;
}
