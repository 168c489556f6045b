// The shape of a JSON text, measured on its bytes before it is parsed: its nesting depth and how many
// values it holds. One pass, no recursion, nothing built; string contents (a Base64 document is almost
// all of a send body) are skipped with indexOf. The scanner takes the text in pieces as it arrives, so
// a body can be refused while it is still being received: a text of millions of tiny values then costs
// its sender the upload and this scan up to the limit, never the JSON.parse, the walks, the validation
// and the memory the whole text would cost the event loop every account shares (SECURITY.md
// "Request bodies"). Bytes, not characters: `"`, `\`, `,` and brackets are ASCII and UTF-8 never uses
// those bytes inside a multi-byte character.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;

export interface JsonLimits {
  /** Deepest nesting of arrays and objects. */
  maxDepth: number;
  /** Most values, counted as JsonShapeScanner says. */
  maxValues: number;
}

export type JsonShapeProblem = 'depth' | 'values';

/**
 * Scans a JSON text fed in pieces; `feed` answers the first limit passed (and keeps answering it).
 * Values are counted as 1 (the text's own value), plus 1 per array or object, plus 1 per comma
 * outside strings: every array element and object member but the first of its container follows a
 * comma and the first is paid for by its container, so the count is never below the number of
 * values of a valid text and never above twice it. Invalid JSON is the parser's business.
 */
export class JsonShapeScanner {
  private depth = 0;
  private values = 1;
  private inString = false;
  /** Inside a string, the piece before ended with an odd run of backslashes: this one's first byte is escaped. */
  private escaped = false;
  private problem: JsonShapeProblem | null = null;
  private readonly limits: JsonLimits;

  constructor(limits: JsonLimits) {
    this.limits = limits;
  }

  feed(b: Uint8Array): JsonShapeProblem | null {
    if (this.problem !== null) return this.problem;
    const buf = Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
    const n = buf.length;
    let i = 0;
    while (i < n) {
      if (this.inString) {
        let from = i;
        if (this.escaped) {
          this.escaped = false;
          from = i + 1;
          if (from >= n) return null;
        }
        // The closing quote: one not preceded by an odd run of backslashes (counted back to `from`:
        // what came before it is the opening quote, an escaped byte or an even run, all settled).
        for (;;) {
          const q = buf.indexOf(QUOTE, from);
          if (q < 0) {
            let k = n - 1;
            while (k >= from && buf[k] === BACKSLASH) k--;
            this.escaped = (n - 1 - k) % 2 === 1;
            return null;
          }
          let k = q - 1;
          while (k >= from && buf[k] === BACKSLASH) k--;
          if ((q - 1 - k) % 2 === 0) {
            i = q + 1;
            this.inString = false;
            break;
          }
          from = q + 1;
        }
        continue;
      }
      const c = buf[i++];
      if (c === QUOTE) {
        this.inString = true;
      } else if (c === COMMA) {
        if (++this.values > this.limits.maxValues) return (this.problem = 'values');
      } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
        if (++this.depth > this.limits.maxDepth) return (this.problem = 'depth');
        if (++this.values > this.limits.maxValues) return (this.problem = 'values');
      } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
        this.depth--;
      }
    }
    return null;
  }
}

/** The first limit a whole JSON text passes, or null. */
export function jsonShapeProblem(text: Uint8Array, limits: JsonLimits): JsonShapeProblem | null {
  return new JsonShapeScanner(limits).feed(text);
}

/** The messages of the two refusals (HTTP 400 and 413; the AMQP intake answers the same). */
export const jsonShapeMessages = {
  depth: (max: number) => `Request body nests arrays and objects more than ${max} levels deep`,
  values: (max: number) =>
    `Request body holds more than ${max} JSON values (array elements and object members); ` +
    'no request of this API needs that many',
} as const;
