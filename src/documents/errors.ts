/** A document problem that no retry can fix; `code` is shown on the job as failure_code. */
export class DocumentError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = 'DocumentError';
    this.code = code;
  }
}

/**
 * A human-readable reason for an exception thrown while reading a customer's document: JavaScript's
 * own messages ("Maximum call stack size exceeded", "memory access out of bounds", a parser's
 * internal state) never reach the customer, only what they mean for the file.
 */
export function readableReason(err: unknown): string {
  if (err instanceof DocumentError) return err.message;
  const message = String((err as Error | undefined)?.message ?? err);
  if (err instanceof RangeError && /call stack/i.test(message))
    return 'its structure nests too deeply or refers to itself in a loop';
  if (/out of memory|enlarge memory|allocation failed|array buffer allocation/i.test(message))
    return 'reading it needs more memory than is allowed';
  if ((err as Error | undefined)?.name === 'RuntimeError')
    return 'the renderer stopped on an internal error while reading it (the file is damaged or pathological)';
  return 'its data is damaged and cannot be decoded';
}
