/** A document problem that no retry can fix; `code` is shown on the job as failure_code. */
export class DocumentError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = 'DocumentError';
    this.code = code;
  }
}
