// One command's own data that PostgreSQL refused, told apart from trouble that affects everyone.
// SQLSTATE class 22 (data exception: text or JSON it cannot store, a value out of range) and class 23
// (integrity constraint: a reference to a row deleted meanwhile, a check) come from the statement's
// values, so they fail only the command that carried them, permanently: retrying it unchanged fails
// again. Anything else (connection lost, server shutting down, a bug) is not the command's fault.
import { ApiError } from '../domain/envelope.ts';

export const dataErrorMessages = {
  data: (code: string) =>
    `Request refused: it holds a value the database cannot store (SQLSTATE ${code}); nothing was accepted. Correct the request before sending it again.`,
  integrity: (code: string) =>
    `Request refused: it conflicts with your account's stored data, e.g. it refers to something deleted meanwhile (SQLSTATE ${code}); nothing was accepted. Check the ids it refers to and send it again.`,
} as const;

function sqlState(err: unknown): string | null {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
}

/** True for PostgreSQL errors caused by the statement's own values (SQLSTATE class 22 or 23). */
export function isDataError(err: unknown): boolean {
  const code = sqlState(err);
  return code !== null && (code.startsWith('22') || code.startsWith('23'));
}

/**
 * The refusal a client or sender gets for a data error: 422 for class 22, 409 for class 23. Other
 * errors are returned unchanged (a database that cannot be reached stays a 503, the rest a 500).
 */
export function refusalFor(err: unknown): unknown {
  if (!isDataError(err)) return err;
  const code = sqlState(err)!;
  return code.startsWith('22')
    ? new ApiError(422, dataErrorMessages.data(code))
    : new ApiError(409, dataErrorMessages.integrity(code));
}
