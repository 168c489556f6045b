// The contract every transmission backend fits: the simulated line, a SIP/T.38 gateway driving a
// T.30 engine, a HylaFAX server, or a carrier's HTTP API. One call per `transmit`.

export type Quality = 'low' | 'standard' | 'hd';

export interface PreparedFax {
  jobId: string;
  attempt: number;
  faxNumber: string;
  callerId: string;
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
  signal: AbortSignal;
  deadline: Date;
  onProgress: (p: Progress) => void | Promise<void>;
}

export interface TransmissionBackend {
  readonly name: string;
  transmit(fax: PreparedFax, ctl: CallControl): Promise<Outcome>;
}
