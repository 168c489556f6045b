// The contract every transmission backend fits: the simulated line, a SIP/T.38 gateway driving a
// T.30 engine, a HylaFAX server, or a carrier's HTTP API that reports completion later by webhook.
// One call per `transmit`; the backend never retries by itself (retries are the line caller's).

export type Quality = 'low' | 'standard' | 'hd';

export interface PreparedFax {
  jobId: string;
  /** Attempt number (1, 2, …). With jobId it is the idempotency key of the call. */
  attempt: number;
  faxNumber: string;
  callerId: string;
  /**
   * The T.30 identity (TSI) to present, when the number behind callerId has a station id of its own
   * (numbers.station_id); else the caller id is the identity.
   */
  stationId?: string;
  quality: Quality;
  /** Encoded size of each page as it goes on the line (bytes of the compressed fax image). */
  pageBytes: number[];
  /** The rendered fax image (TIFF Class F), for backends that put real fax signals on a line. */
  tiff?: Uint8Array;
  /** Pages the receiver already has from an earlier, dropped attempt (informational). */
  resumeFromPage?: number;
}

export type Progress =
  | { type: 'dialling' }
  | { type: 'training'; bitRate: number; ok: boolean }
  | { type: 'connected'; bitRate: number }
  | { type: 'page_sent'; page: number; of: number };

export type FailureType =
  | 'busy'
  | 'no_answer'
  | 'no_fax_tone'
  | 'invalid_number'
  | 'call_dropped'
  | 'protocol_error'
  | 'aborted'
  | 'backend_error';

/** Failure types where the call reached a fax machine (they count as "tries", not only "dials"). */
export const reachedFaxTypes: ReadonlySet<FailureType> = new Set(['call_dropped', 'protocol_error']);

export type Outcome =
  | {
      ok: true;
      pages: number;
      durationMs: number;
      remoteStationId: string;
      bitRate: number;
      /** What the fax engine reported, where the backend has one (e.g. T.30 result, ECM, resolution). */
      engine?: Record<string, unknown>;
    }
  | {
      ok: false;
      type: FailureType;
      code: string;
      message: string;
      pagesSent: number;
      retryable: boolean;
      durationMs: number;
      engine?: Record<string, unknown>;
    };

export interface CallControl {
  /** Aborting hangs up; the backend then resolves with an `aborted` failure. */
  signal: AbortSignal;
  /** The call must have ended by then (the caller also aborts at the deadline). */
  deadline: Date;
  /** Progress reports; the backend awaits them, so they are recorded in order. */
  onProgress: (p: Progress) => void | Promise<void>;
}

export interface TransmissionBackend {
  readonly name: string;
  transmit(fax: PreparedFax, ctl: CallControl): Promise<Outcome>;
  /**
   * Asks the backend what became of a call whose driving process died (lease lapsed). Returns the
   * outcome when the backend knows it (a carrier API or fax server keeps call records), or null
   * when it cannot tell. Backends without call records leave it out.
   */
  reconcile?(jobId: string, attempt: number): Promise<Outcome | null>;
  /** Releases what the backend holds (sockets, registrations) at shutdown, after the last call. */
  close?(): Promise<void>;
}
