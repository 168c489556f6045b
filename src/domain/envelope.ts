// The customer contract's envelope, errors and messages, shared by every way in: the HTTP API, the
// AMQP intake (its answers use the same envelope) and the admin CLI.
/** Every response body: { status, message, data? }. status 1 = success, 0 = not accepted. */
export interface Envelope {
  status: number;
  message: string;
  data?: unknown;
}

/** An error answered in the envelope with its HTTP status. */
export class ApiError extends Error {
  readonly http: number;
  readonly status: number;
  readonly data: unknown;
  readonly headers: Record<string, string>;
  constructor(
    http: number,
    message: string,
    o: { status?: number; data?: unknown; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.http = http;
    this.status = o.status ?? 0;
    this.data = o.data;
    this.headers = o.headers ?? {};
  }
  toEnvelope(): Envelope {
    return this.data === undefined
      ? { status: this.status, message: this.message }
      : { status: this.status, message: this.message, data: this.data };
  }
}

export const ok = (message: string, data?: unknown): Envelope =>
  data === undefined ? { status: 1, message } : { status: 1, message, data };

export const messages = {
  processed: 'Fax processed for sending',
  cancelled: 'Scheduled fax cancelled successfully',
  tokenGenerated: 'Token Generate Successfully',
  keyInvalid: 'API Secret Key is invalid.',
  unauthorized: 'UNAUTHORIZED',
  faxNotFoundForward: 'Fax Not Found',
  faxNotFound: 'Fax not found',
  contactDeleted: 'Contact has been deleted successfully.',
  contactIdRequired: 'The id field is required.',
  contactNotFound: 'Contact not found',
  // Beyond the spec (its wording is "not shown"): chosen once, in the spec's style.
  faxFound: 'Fax found',
  faxesListed: 'Faxes retrieved successfully',
  faxApproved: 'Fax approved for sending',
  faxRejected: 'Fax rejected; it will not be sent',
  broadcastFound: 'Broadcast found',
  broadcastNotFound: 'Broadcast not found',
  broadcastCancelled: 'Broadcast cancelled',
  numbersListed: 'Numbers retrieved successfully',
  fieldFound: 'Template field retrieved successfully',
  fieldNotFound: 'Template field not found',
  rulesListed: 'Template field rules retrieved successfully',
  templateNotFound: 'Template not found',
  ruleDeleted: 'Template field rule has been deleted successfully.',
  ruleNotFound: 'Template field rule not found',
  themeFound: 'Document theme retrieved successfully',
  documentNotFound: 'Document not found',
  themeNotFound: 'Document theme not found',
  brokerDown:
    'Service temporarily unavailable: the message broker cannot be reached. Nothing was accepted; retry later.',
  dbDown:
    'Service temporarily unavailable: the database cannot be reached. Nothing was accepted; retry later.',
} as const;
