/** E.164 as the customer API states it: '+', a first digit 1-9, then 1 to 14 more digits. */
export const E164_PATTERN = /^\+[1-9][0-9]{1,14}$/;

export function isE164(s: string): boolean {
  return E164_PATTERN.test(s);
}
