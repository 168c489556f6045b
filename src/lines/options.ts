// Line caller settings from the configuration.
import type { Config } from '../config.ts';
import type { LineOptions } from './caller.ts';

export function lineOptions(cfg: Config): LineOptions {
  return {
    lines: cfg.LINES,
    maxCallsPerProcess: cfg.WORKER_MAX_CALLS,
    perDestination: cfg.DESTINATION_MAX_CALLS,
    agingSeconds: cfg.PRIORITY_AGING_SECONDS,
    leaseSeconds: cfg.LINE_LEASE_SECONDS,
    pollMs: cfg.LINE_POLL_MS,
    callTimeoutMs: cfg.CALL_TIMEOUT_SECONDS * 1000,
    unknownPolicy: cfg.UNKNOWN_OUTCOME_POLICY,
    retry: {
      busySeconds: cfg.RETRY_BUSY_SECONDS,
      noAnswerSeconds: cfg.RETRY_NO_ANSWER_SECONDS,
      protocolSeconds: cfg.RETRY_PROTOCOL_SECONDS,
      otherSeconds: cfg.RETRY_OTHER_SECONDS,
      maxDials: cfg.MAX_DIALS,
      maxTries: cfg.MAX_TRIES,
      killTimeSeconds: cfg.KILL_TIME_SECONDS,
    },
  };
}
