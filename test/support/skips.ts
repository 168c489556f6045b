// Tests that need something this machine may lack (the SpanDSP addon, a system tool) are skipped
// with the reason, so a local run counts them in its summary ("skipped N") instead of passing
// without them. Where a skip must not happen (CI sets FAXLINE_NO_SKIPS=1; FAXLINE_REQUIRE_SPANDSP=1
// asks for the SpanDSP tests alone), the would-be skip is an error at registration: the file fails
// with the reason.

/** Environment variables that turn a skip into a failure: any skip, or only skips on `topic`. */
const forbidders = (topic: string | undefined): string[] => [
  'FAXLINE_NO_SKIPS',
  ...(topic === 'spandsp' ? ['FAXLINE_REQUIRE_SPANDSP'] : []),
];

/**
 * Options for `describe`/`it`: none when `missing` is falsy (the test runs); `{ skip: missing }`
 * otherwise; throws with the reason when this run forbids the skip.
 */
export function skipUnless(missing: string | false | null | undefined, topic?: 'spandsp'): { skip?: string } {
  if (!missing) return {};
  const forbidden = forbidders(topic).filter((name) => process.env[name] === '1');
  if (forbidden.length > 0) throw new Error(`${forbidden.join(' and ')}=1 forbids this skip: ${missing}`);
  return { skip: missing };
}
