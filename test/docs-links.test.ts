// The documentation's relative links point at files that exist and at headings those files have,
// so moving text between README.md, SECURITY.md and docs/ cannot leave a dead link behind.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, it } from 'node:test';

const root = new URL('..', import.meta.url).pathname;
const documents = [
  'README.md',
  'SECURITY.md',
  'deploy/prometheus/RUNBOOK.md',
  ...readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** Markdown outside fenced code blocks. */
function prose(text: string): string {
  let fenced = false;
  return text
    .split('\n')
    .filter((line) => {
      if (line.startsWith('```')) fenced = !fenced;
      return !fenced && !line.startsWith('```');
    })
    .join('\n');
}

/** The anchors GitHub gives a file's headings: lower case, punctuation dropped, spaces to hyphens. */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of prose(text).matchAll(/^#{1,6} (.+)$/gm)) {
    const slug = m[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

describe('documentation links', () => {
  it('README.md links to every file in docs/', () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    for (const f of documents.filter((d) => d.startsWith('docs/')))
      assert.ok(readme.includes(`](${f})`), `README.md links to ${f}`);
  });

  it('every relative link reaches an existing file and heading', () => {
    let checked = 0;
    for (const doc of documents) {
      const text = readFileSync(join(root, doc), 'utf8');
      for (const m of prose(text).matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/.test(target)) continue; // http:, https:, mailto:
        const [path, anchor] = target.split('#') as [string, string | undefined];
        const file = path === '' ? doc : normalize(join(dirname(doc), path));
        assert.ok(existsSync(join(root, file)), `${doc}: ${target} (no file ${file})`);
        if (anchor !== undefined)
          assert.ok(
            anchors(readFileSync(join(root, file), 'utf8')).has(anchor),
            `${doc}: ${target} (no heading #${anchor} in ${file})`,
          );
        checked++;
      }
    }
    assert.ok(checked > 40, `checked ${checked} links`);
  });
});
