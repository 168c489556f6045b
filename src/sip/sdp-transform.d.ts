// The part of sdp-transform 3 (MIT, plain JavaScript without types) that src/sip/sdp.ts uses.
declare module 'sdp-transform' {
  export interface MediaDescription {
    type: string;
    port: number;
    protocol: string;
    payloads?: string | number;
    connection?: { version: number; ip: string };
    rtp: { payload: number; codec: string; rate?: number }[];
    fmtp: { payload: number; config: string }[];
    ptime?: number;
    direction?: 'sendrecv' | 'recvonly' | 'sendonly' | 'inactive';
    /** Attributes the grammar does not know (T38Fax*), as `name:value` strings. */
    invalid?: { value: string }[];
  }
  export interface SessionDescription {
    version?: number;
    origin?: {
      username: string;
      sessionId: string | number;
      sessionVersion: number;
      netType: string;
      ipVer: number;
      address: string;
    };
    name?: string;
    connection?: { version: number; ip: string };
    timing?: { start: number; stop: number };
    media: MediaDescription[];
  }
  export function parse(sdp: string): SessionDescription;
  export function write(session: SessionDescription): string;
}
