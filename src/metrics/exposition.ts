// A small reader of the Prometheus text exposition format, for tests, benchmarks and tooling that
// look at a live /metrics page (the service itself never parses metrics).

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  samples: Sample[];
  /** Metric family name → type, from the `# TYPE` lines. */
  types: Map<string, string>;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

function parseValue(v: string): number {
  if (v === '+Inf') return Infinity;
  if (v === '-Inf') return -Infinity;
  return Number(v);
}

export function parseExposition(text: string): Exposition {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line.startsWith('# TYPE ')) {
      const [, , name, type] = line.split(' ');
      if (name && type) types.set(name, type);
      continue;
    }
    if (line === '' || line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    if (!m) throw new Error(`not a metric sample: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(LABEL))
      labels[l[1]!] = l[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    samples.push({ name: m[1]!, labels, value: parseValue(m[3]!) });
  }
  return { samples, types };
}

/** Sum of the samples named `name` whose labels include every pair in `match`. */
export function sumOf(e: Exposition, name: string, match: Record<string, string> = {}): number {
  let total = 0;
  for (const s of e.samples) {
    if (s.name !== name) continue;
    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value;
  }
  return total;
}

/** Whether any sample named `name` (with `match`) is present. */
export function has(e: Exposition, name: string, match: Record<string, string> = {}): boolean {
  return e.samples.some((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v));
}

/**
 * Every series name a scrape can produce for its metric families: the family name, plus _bucket,
 * _sum and _count for histograms (and _sum, _count for summaries). Families without samples yet
 * (a labelled counter nobody incremented) count too: the name is exported, its series appear on use.
 */
export function exportedNames(e: Exposition): Set<string> {
  const out = new Set<string>();
  for (const [name, type] of e.types) {
    out.add(name);
    if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) out.add(name + s);
    if (type === 'summary') for (const s of ['_sum', '_count']) out.add(name + s);
  }
  for (const s of e.samples) out.add(s.name);
  return out;
}
