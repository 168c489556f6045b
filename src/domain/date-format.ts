// Intl.DateTimeFormat objects kept per locale, options and time zone. Making one costs about 40 µs
// (ICU looks up the zone and the pattern), formatting with it about 1 µs; every fax's cover page
// and header line format the time of sending in the account's zone, so the formats are kept rather
// than made for every fax. Bounded: past MAX entries (accounts in many zones) the map starts again.
const MAX = 1_000;
const formats = new Map<string, Intl.DateTimeFormat>();

/**
 * The format of `locale` and `options` in `timeZone`, or in UTC with `zone: 'UTC'` when the zone is
 * unknown to ICU (an account's zone is checked when it is set, but an old value may have gone).
 */
export function zonedFormat(
  locale: string,
  options: Omit<Intl.DateTimeFormatOptions, 'timeZone'>,
  timeZone: string,
): { format: Intl.DateTimeFormat; zone: string } {
  const key = `${locale}\u0000${JSON.stringify(options)}\u0000${timeZone}`;
  const kept = formats.get(key);
  if (kept) return { format: kept, zone: timeZone };
  let format: Intl.DateTimeFormat;
  try {
    format = new Intl.DateTimeFormat(locale, { ...options, timeZone });
  } catch {
    return { format: zonedFormat(locale, options, 'UTC').format, zone: 'UTC' };
  }
  if (formats.size >= MAX) formats.clear();
  formats.set(key, format);
  return { format, zone: timeZone };
}
