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

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'faxline' },
      redact: { paths: redactPaths, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}
