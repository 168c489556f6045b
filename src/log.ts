import { pino, type Logger, type DestinationStream } from 'pino';

export type { Logger };

/** Secrets never reach a log line: these paths are censored by pino before serialisation. */
export const redactPaths = [
  'req.headers.authorization',
  'headers.authorization',
  'authorization',
  'api_key',
  'api_secret_key',
  'access_token',
  'token',
  'file_data',
  '*.api_key',
  '*.api_secret_key',
  '*.access_token',
  '*.token',
  '*.file_data',
  '*.authorization',
  'body.fax_data[*].file_data',
  'fax_data[*].file_data',
];

/**
 * Keys that hold a fax number, a caller id or station id, a person's name, a subject or a file name
 * (protected health information in a clinic's faxes). With LOG_PHI=false (the default) they are
 * censored at every level; see docs/observability.md#what-the-log-may-contain.
 */
const phiKeys = [
  'faxNumber',
  'fax_number',
  'callerId',
  'caller_id',
  'calledNumber',
  'callingNumber',
  'csid',
  'remoteStationId',
  'remote_station_id',
  'stationId',
  'station_id',
  'number',
  'numbers',
  'subject',
  'fileName',
  'file_name',
  'senderName',
  'sender_name',
  'recipientName',
  'recipient_name',
  'to_name',
  'sipUri',
];
export const phiPaths = phiKeys.flatMap((k) => [k, `*.${k}`]);

/**
 * The second net for PHI in free text (error messages, reasons): E.164-shaped numbers and the user
 * part of SIP and tel URIs are censored in every line written, whatever key holds them.
 */
export function scrubLine(line: string): string {
  return line
    .replace(/\+[1-9]\d{6,14}/g, '[number]')
    .replace(/\b(sips?|tel):[^@;>"\s\\]+(@|(?=[;>"\s\\]))/gi, '$1:[redacted]$2');
}

export interface LoggerOptions {
  /** LOG_PHI: fax numbers and names may be written (default false: censored). */
  phi?: boolean;
}

export function createLogger(level: string, destination?: DestinationStream, o: LoggerOptions = {}): Logger {
  return pino(
    {
      level,
      base: { service: 'faxline' },
      redact: { paths: o.phi ? redactPaths : [...redactPaths, ...phiPaths], censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
      ...(o.phi ? {} : { hooks: { streamWrite: scrubLine } }),
    },
    destination,
  );
}
