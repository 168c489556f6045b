// The header line (HylaFAX's "tagline"): a template printed at the top of every fax page, e.g.
// "{sender_name} {sender_number}  {date} {time}  page {page} of {pages}". Pure functions: checking a
// template and filling it in for one page. Drawing it is src/documents/header.ts.
import { zonedFormat } from './date-format.ts';

/** The placeholders a template may use, with what each becomes (the order documented). */
export const headerPlaceholders = {
  sender_name: "the send's sender_name, else the Fax Default's sender_name (empty when neither)",
  sender_number: "the fax's caller id (the sender's fax number)",
  to_name: "the send's recipient_name (empty when none)",
  to_number: 'the destination fax number',
  date: "the date the fax was prepared, YYYY-MM-DD in the account's time zone",
  time: "the time the fax was prepared, HH:MM (24 hours) in the account's time zone, then the zone's short name or GMT offset (e.g. 14:05 EST, 20:05 GMT+1)",
  page: 'the number of this page, from 1 (the cover page is page 1)',
  pages: 'the number of pages of the whole fax, cover included',
} as const;

export type HeaderPlaceholder = keyof typeof headerPlaceholders;

/** Longest template accepted (characters). */
export const HEADER_LINE_MAX = 120;

const NAME = /^[a-z_]+$/;

/**
 * Why a template is refused, or null when it is good: unknown placeholders are named, braces must
 * pair, control characters and over-long templates are refused.
 */
export function headerLineProblem(t: string): string | null {
  if (t.length > HEADER_LINE_MAX) return `is longer than ${HEADER_LINE_MAX} characters`;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(t)) return 'must be one line of text, without control characters';
  const unknown: string[] = [];
  let i = 0;
  while (i < t.length) {
    const open = t.indexOf('{', i);
    const close = t.indexOf('}', i);
    if (open === -1) {
      if (close !== -1) return `has a } at position ${close + 1} without its {`;
      break;
    }
    if (close !== -1 && close < open) return `has a } at position ${close + 1} without its {`;
    const next = t.indexOf('{', open + 1);
    if (close === -1 || (next !== -1 && next < close)) return `has a { at position ${open + 1} without its }`;
    const name = t.slice(open + 1, close);
    // Own keys only: `in` would accept names inherited from Object.prototype ({constructor}).
    if (!NAME.test(name) || !Object.hasOwn(headerPlaceholders, name)) unknown.push(`{${name}}`);
    i = close + 1;
  }
  if (unknown.length > 0)
    return `unknown placeholder${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')}; the placeholders are ${Object.keys(
      headerPlaceholders,
    )
      .map((k) => `{${k}}`)
      .join(' ')}`;
  return null;
}

/** The values of a fax's header line that do not change from page to page. */
export type HeaderValues = Omit<Record<HeaderPlaceholder, string>, 'page' | 'pages'>;

/** `date` and `time` of `now` in `timeZone` (an unknown zone prints UTC, as the cover does). */
export function headerDateTime(now: Date, timeZone: string): { date: string; time: string } {
  const { format: f, zone } = zonedFormat('en-CA', { hourCycle: 'h23', dateStyle: 'short' }, timeZone);
  const parts = zonedFormat(
    'en-US',
    { hour: '2-digit', minute: '2-digit', hourCycle: 'h23', timeZoneName: 'short' },
    zone,
  ).format.formatToParts(now);
  const get = (type: string) => parts.find((p) => p.type === type)?.value ?? '';
  // en-CA's short date is YYYY-MM-DD.
  return { date: f.format(now), time: `${get('hour')}:${get('minute')} ${get('timeZoneName')}`.trim() };
}

/** The template with every placeholder replaced, for page `page` of `pages`; spaces collapsed. */
export function fillHeaderLine(template: string, v: HeaderValues, page: number, pages: number): string {
  const all: Record<string, string> = { ...v, page: String(page), pages: String(pages) };
  return template
    .replace(/\{([a-z_]+)\}/g, (m, name: string) => (Object.hasOwn(all, name) ? all[name]! : m))
    .replace(/\s+/g, ' ')
    .trim();
}
