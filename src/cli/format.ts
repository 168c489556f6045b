// Pure helpers of the CLI: parsing its arguments' values and laying out tables.

/** "+15551234567" or "Dr. Adams@+15551234567" (HylaFAX's user@number): the recipient. */
export function parseDestination(d: string): { fax_number: string; to_name?: string } {
  const at = d.lastIndexOf('@');
  const number = (at >= 0 ? d.slice(at + 1) : d).replace(/[\s().-]/g, '');
  const name = at >= 0 ? d.slice(0, at).trim() : '';
  return name ? { fax_number: number, to_name: name } : { fax_number: number };
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "90", "90s", "30m", "2h", "1d", "500ms" → milliseconds (a bare number is seconds). */
export function duration(v: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(v.trim());
  if (!m) throw new TypeError(`not a duration: ${v} (e.g. 90s, 30m, 2h, 1d)`);
  return Math.round(Number(m[1]) * UNITS[m[2] ?? 's']!);
}

/** --at: "now", "+30m" (from `now`), or an ISO 8601 time with an offset; → ISO 8601 UTC. */
export function atTime(v: string, now: Date): string {
  if (v === 'now') return now.toISOString();
  if (v.startsWith('+')) return new Date(now.getTime() + duration(v.slice(1))).toISOString();
  if (!/(Z|[+-]\d\d:?\d\d)$/i.test(v))
    throw new TypeError(`--at needs a time zone: ${v} (e.g. 2026-12-01T09:00:00+01:00 or +2h)`);
  const t = Date.parse(v);
  if (Number.isNaN(t)) throw new TypeError(`not a time: ${v}`);
  return new Date(t).toISOString();
}

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;]*m/g;
const width = (s: string) => s.replace(ANSI, '').length;

/** Columns padded to their widest cell, two spaces apart. */
export function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, width(c))));
  return rows
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c + ' '.repeat(widths[i]! - width(c))))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}
