// The console's one way to write HTML: a tagged template that escapes every interpolated value.
// Raw markup passes only as an Html value (made by this tag, or by `trusted` for a constant); a
// string, number or anything else a customer may have typed (names, subjects, file names, the CSID
// a far end sent) is escaped, so it shows as text and never becomes markup.
const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

const brand = Symbol('html');

export interface Html {
  readonly [brand]: true;
  readonly text: string;
}

function make(text: string): Html {
  return { [brand]: true, text };
}

function isHtml(v: unknown): v is Html {
  return typeof v === 'object' && v !== null && brand in v;
}

type Value = Html | string | number | boolean | null | undefined | readonly Value[];

function render(v: Value): string {
  if (v === null || v === undefined || v === false) return '';
  if (Array.isArray(v)) return v.map((x: Value) => render(x)).join('');
  if (isHtml(v)) return v.text;
  return escapeHtml(String(v));
}

export function html(strings: TemplateStringsArray, ...values: Value[]): Html {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1]!;
  return make(out);
}

/** Markup written in this code base (a constant), never anything a user sent. */
export function trusted(markup: string): Html {
  return make(markup);
}
