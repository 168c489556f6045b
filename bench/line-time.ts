// Line-time benchmark (not a test): what each page of a public corpus costs on the line, rendered by
// faxline and by Ghostscript's `tiffg4` device (HylaFAX's renderer), at each quality:
// - compressed bytes (T.6 strips) and the line seconds they mean at 9,600 and 14,400 bit/s
//   (bytes x 8 / rate, the image alone: the T.30 overhead per page and per call comes on top);
// - OCR word recall of the image (tesseract) against the PDF's own text (pdftotext): the share of
//   the PDF's words, counted as a multiset, that tesseract reads back;
// - pages per CPU-second: faxline's render + binarisation + T.6 in this process (PDFium loaded
//   once), Ghostscript's child process per document (its start included: that is how it is run).
// With `before=<checkout>` (a directory holding another faxline tree, e.g. main's worktree), that
// tree's renderer is measured in the same run as a third column ("before").
// Ghostscript (AGPL) and tesseract are measuring tools only, never dependencies of the service:
// `bash scripts/line-bench-tools.sh` installs them (Debian's ghostscript, tesseract-ocr,
// tesseract-ocr-eng, poppler-utils, libtiff-tools).
//
//   npm run bench:line-time [-- before=/work/main] [qualities=low,standard,hd] [docs=a.pdf,b.pdf]
//       [ocr=0 | ocr=low,standard] [ocr_of=faxline,gs] [ocr_jobs=N]
// OCR costs about a CPU-second a page and image (tesseract); `ocr`/`ocr_of` choose the qualities and
// the renderers read (by default all), `ocr_jobs` how many tesseract processes run at once (cores).
//
// Writes bench/results/line-time-<date>.json and .md. The corpus: test/fixtures/line-corpus/.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeT6 } from '../src/documents/render/g4.ts';
import { bilevelToPng } from '../src/documents/render/png.ts';
import { X_DPI, Y_DPI, type Quality } from '../src/documents/render/raster.ts';
import { writeTiffClassF } from '../src/documents/render/tiff.ts';
import { readUncompressedTiff } from '../test/support/render-tiff.ts';

const args = Object.fromEntries(process.argv.slice(2).map((a) => a.split('=') as [string, string]));
const CORPUS = new URL('../test/fixtures/line-corpus/', import.meta.url);
const qualities = (args.qualities ?? 'low,standard,hd').split(',') as Quality[];
/** Qualities whose images are read by OCR (`ocr=0`: none), and whose images (`ocr_of`). */
const OCR_AT = args.ocr === '0' ? [] : (args.ocr?.split(',') ?? qualities);
const OCR_OF = args.ocr_of?.split(',');
const OCR_JOBS = Number(args.ocr_jobs ?? cpus().length);
const BEFORE = args.before;
const FAX_NAME: Record<Quality, string> = {
  low: 'standard 204x98 (faxline `low`)',
  standard: 'fine 204x196 (faxline `standard`)',
  hd: 'superfine 204x391 (faxline `hd`)',
};
const docNames = (args.docs?.split(',') ?? readdirSync(CORPUS).filter((f) => f.endsWith('.pdf'))).sort();
const dir = mkdtempSync(join(tmpdir(), 'faxline-line-time-'));
const round = (n: number, d = 3) => Math.round(n * 10 ** d) / 10 ** d;

function tool(cmd: string, a: string[]): string | null {
  const r = spawnSync(cmd, a, { encoding: 'utf8' });
  return r.status === 0 ? (r.stdout || r.stderr).trim().split('\n')[0]! : null;
}
const versions = {
  gs: tool('gs', ['--version']),
  tesseract: tool('tesseract', ['--version']),
  pdftotext: tool('pdftotext', ['-v']),
};
for (const [k, v] of Object.entries(versions))
  if (!v) throw new Error(`${k} is missing: run bash scripts/line-bench-tools.sh (Debian packages)`);

/** The render engine of a faxline tree (ours, or the `before` tree's). */
interface Engine {
  open(bytes: Uint8Array): {
    pageCount: number;
    render(i: number, q: Quality): { rows: Uint8Array; width: number; height: number };
    close(): void;
  };
}
async function loadEngine(root: string): Promise<Engine> {
  const m = (await import(join(root, 'src/documents/render/engine.ts'))) as {
    Pdfium: { load(): Promise<Engine> };
  };
  return m.Pdfium.load();
}

interface Rendered {
  /** Compressed bytes of each page. */
  pageBytes: number[];
  cpuSeconds: number;
  /** The image as a multi-page TIFF Class F (for OCR). */
  tiff: string;
}

function renderFaxline(engine: Engine, label: string, name: string, pdf: Uint8Array, q: Quality): Rendered {
  const cpu0 = process.cpuUsage();
  const doc = engine.open(pdf);
  const pages: { data: Uint8Array; width: number; height: number }[] = [];
  try {
    for (let i = 0; i < doc.pageCount; i++) {
      const p = doc.render(i, q);
      pages.push({ data: encodeT6(p.rows, p.width, p.height), width: p.width, height: p.height });
    }
  } finally {
    doc.close();
  }
  const cpu = process.cpuUsage(cpu0);
  const tiff = join(dir, `${label}-${q}-${name}.tif`);
  writeFileSync(tiff, writeTiffClassF(pages.map((p) => ({ ...p, xDpi: X_DPI, yDpi: Y_DPI[q] }))));
  return { pageBytes: pages.map((p) => p.data.length), cpuSeconds: (cpu.user + cpu.system) / 1e6, tiff };
}

/** Sizes of the strips of each page of a TIFF (tags 273/279), whatever the strip layout. */
function stripBytes(buf: Buffer): number[] {
  const le = buf.toString('latin1', 0, 2) === 'II';
  const u16 = (o: number) => (le ? buf.readUInt16LE(o) : buf.readUInt16BE(o));
  const u32 = (o: number) => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));
  const pages: number[] = [];
  for (let ifd = u32(4), n = 0; ifd !== 0 && n < 10_000; n++) {
    const count = u16(ifd);
    let total = 0;
    for (let i = 0; i < count; i++) {
      const e = ifd + 2 + i * 12;
      if (u16(e) !== 279) continue;
      const type = u16(e + 2);
      const c = u32(e + 4);
      const size = type === 3 ? 2 : 4;
      const at = c * size <= 4 ? e + 8 : u32(e + 8);
      for (let k = 0; k < c; k++) total += type === 3 ? u16(at + k * 2) : u32(at + k * 4);
    }
    pages.push(total);
    ifd = u32(ifd + 2 + count * 12);
  }
  return pages;
}

function renderGhostscript(name: string, file: string, q: Quality): Rendered {
  const tiff = join(dir, `gs-${q}-${name}.tif`);
  const a = [
    '-q',
    '-dSAFER',
    '-dBATCH',
    '-dNOPAUSE',
    '-dNumRenderingThreads=1',
    '-sDEVICE=tiffg4',
    `-r204x${Y_DPI[q]}`,
    // 1728 pixels wide at 204 dpi, A4 long, pages fitted: the same job as ours (bench/render.ts).
    '-dDEVICEWIDTHPOINTS=610',
    '-dDEVICEHEIGHTPOINTS=842',
    '-dFIXEDMEDIA',
    '-dPDFFitPage',
    `-sOutputFile=${tiff}`,
    file,
  ];
  // bash's `time` reports the child's CPU seconds (user and system) on stderr.
  const r = spawnSync('bash', ['-c', 'TIMEFORMAT="CPU %3U %3S"; time "$@"', 'bash', 'gs', ...a], {
    encoding: 'utf8',
    timeout: 600_000,
  });
  const cpu = /CPU ([\d.]+) ([\d.]+)\s*$/.exec(r.stderr);
  if (r.status !== 0 || !cpu) throw new Error(`gs failed on ${name}: ${r.stderr}`);
  return { pageBytes: stripBytes(readFileSync(tiff)), cpuSeconds: Number(cpu[1]) + Number(cpu[2]), tiff };
}

/** Words as OCR is scored: lower case, letters and digits, two characters or more. */
function wordsOf(text: string): Map<string, number> {
  const m = new Map<string, number>();
  for (const w of text.toLowerCase().split(/[^\p{L}\p{N}]+/u))
    if (w.length >= 2 && /\p{L}/u.test(w)) m.set(w, (m.get(w) ?? 0) + 1);
  return m;
}

function recall(ref: Map<string, number>, got: Map<string, number>): { found: number; total: number } {
  let found = 0;
  let total = 0;
  for (const [w, n] of ref) {
    total += n;
    found += Math.min(n, got.get(w) ?? 0);
  }
  return { found, total };
}

function run(cmd: string, a: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    // One thread per tesseract: its OpenMP threads on a shared machine cost far more than they gain.
    const c = spawn(cmd, a, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, OMP_THREAD_LIMIT: '1' },
    });
    let out = '';
    let err = '';
    const timer = setTimeout(() => c.kill('SIGKILL'), 300_000);
    c.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    c.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    c.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${cmd} ${a.join(' ')}: ${code} ${err}`));
    });
  });
}

/**
 * What tesseract reads of a fax TIFF: each page decoded by libtiff, its rows repeated to square
 * pixels (as a fax machine prints them), one PNG per page.
 */
async function ocr(tiff: string): Promise<string> {
  const raw = `${tiff}.raw.tif`;
  await run('tiffcp', ['-c', 'none', '-f', 'msb2lsb', tiff, raw]);
  const pages = readUncompressedTiff(readFileSync(raw));
  rmSync(raw);
  let text = '';
  for (const [i, p] of pages.entries()) {
    const png = `${tiff}.${i}.png`;
    const yDpi = p.tags.get(283)?.[0] ?? 196;
    // gs writes min-is-white as well (Photometric 0): 1 = black in both.
    writeFileSync(png, bilevelToPng(p.rows, p.width, p.height, X_DPI, yDpi));
    text += await run('tesseract', [png, '-', '-l', 'eng', '--dpi', String(X_DPI)]);
    rmSync(png);
  }
  return text;
}

/** Runs `jobs` with at most `n` at a time. */
async function limit<T>(n: number, jobs: (() => Promise<T>)[]): Promise<T[]> {
  const out: T[] = new Array(jobs.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, jobs.length) }, async () => {
      while (next < jobs.length) {
        const i = next++;
        out[i] = await jobs[i]!();
      }
    }),
  );
  return out;
}

const engines: [string, Engine][] = [['faxline', await loadEngine(new URL('..', import.meta.url).pathname)]];
if (BEFORE) engines.push(['before', await loadEngine(BEFORE)]);
const labels = [...engines.map(([l]) => l), 'gs'];

// Reference text of each document: the PDF's text layer (scans: the text of the pages scanned).
const refs = new Map<string, Map<string, number>>();
for (const name of docNames) {
  const side = new URL(`${name}.txt`, CORPUS);
  let text: string;
  try {
    text = readFileSync(side, 'utf8');
  } catch {
    text = spawnSync('pdftotext', [new URL(name, CORPUS).pathname, '-'], { encoding: 'utf8' }).stdout;
  }
  refs.set(name, wordsOf(text));
}

// Warm-up: PDFium's first pages compile its code; not part of any document's time.
for (const [, e] of engines) {
  const d = e.open(readFileSync(new URL(docNames[0]!, CORPUS)));
  d.render(0, 'low');
  d.close();
}

interface DocResult {
  doc: string;
  pages: number;
  bytes: Record<string, number>;
  cpuSeconds: Record<string, number>;
  recall: Record<string, number | null>;
  recallCounts: Record<string, { found: number; total: number }>;
}
const results: { quality: Quality; fax: string; docs: DocResult[] }[] = [];

for (const q of qualities) {
  const docs: DocResult[] = [];
  const ocrJobs: (() => Promise<void>)[] = [];
  for (const name of docNames) {
    const file = new URL(name, CORPUS).pathname;
    const pdf = readFileSync(file);
    const runs: Record<string, Rendered> = {};
    for (const [label, e] of engines) runs[label] = renderFaxline(e, label, name, pdf, q);
    runs.gs = renderGhostscript(name, file, q);
    const d: DocResult = {
      doc: name,
      pages: runs.faxline!.pageBytes.length,
      bytes: {},
      cpuSeconds: {},
      recall: {},
      recallCounts: {},
    };
    for (const l of labels) {
      d.bytes[l] = runs[l]!.pageBytes.reduce((a, b) => a + b, 0);
      d.cpuSeconds[l] = round(runs[l]!.cpuSeconds);
      d.recall[l] = null;
      if (OCR_AT.includes(q) && (!OCR_OF || OCR_OF.includes(l)))
        ocrJobs.push(async () => {
          const c = recall(refs.get(name)!, wordsOf(await ocr(runs[l]!.tiff)));
          d.recallCounts[l] = c;
          d.recall[l] = c.total ? round(c.found / c.total) : null;
        });
    }
    docs.push(d);
    console.log(
      `${q} ${name}: ${labels.map((l) => `${l} ${d.bytes[l]} B ${d.cpuSeconds[l]} CPU-s`).join(', ')}`,
    );
  }
  if (ocrJobs.length) {
    const t0 = performance.now();
    await limit(Math.max(1, OCR_JOBS), ocrJobs);
    console.log(`${q}: OCR of ${ocrJobs.length} images in ${round((performance.now() - t0) / 1000, 1)} s`);
  }
  results.push({ quality: q, fax: FAX_NAME[q], docs });
}
rmSync(dir, { recursive: true, force: true });

// Summaries and the targets of issue 33.
const lineSeconds = (bytes: number, bps: number) => round((bytes * 8) / bps, 1);
const summary = results.map((r) => {
  const pages = r.docs.reduce((n, d) => n + d.pages, 0);
  const per = Object.fromEntries(
    labels.map((l) => {
      const bytes = r.docs.reduce((n, d) => n + d.bytes[l]!, 0);
      const cpu = r.docs.reduce((n, d) => n + d.cpuSeconds[l]!, 0);
      const counted = r.docs.filter((d) => d.recallCounts[l]);
      const found = counted.reduce((n, d) => n + d.recallCounts[l]!.found, 0);
      const total = counted.reduce((n, d) => n + d.recallCounts[l]!.total, 0);
      return [
        l,
        {
          bytes,
          line9600s: lineSeconds(bytes, 9600),
          line14400s: lineSeconds(bytes, 14400),
          cpuSeconds: round(cpu),
          pagesPerCpuSecond: round(pages / cpu, 1),
          recall: total ? round(found / total) : null,
        },
      ];
    }),
  );
  const f = per.faxline!;
  const g = per.gs!;
  const worst = r.docs
    .filter((d) => d.recall.faxline !== null && d.recall.gs !== null)
    .map((d) => ({ doc: d.doc, points: round((d.recall.faxline! - d.recall.gs!) * 100, 1) }))
    .sort((a, b) => a.points - b.points)[0];
  return {
    quality: r.quality,
    fax: r.fax,
    pages,
    totals: per,
    targets: {
      bytesAtMostGhostscript: f.bytes <= g.bytes,
      recallAtLeastGhostscript: f.recall !== null && g.recall !== null ? f.recall >= g.recall : null,
      worstDocumentRecallPoints: worst ?? null,
      noDocumentMoreThan3PointsBelow: worst ? worst.points >= -3 : null,
      pagesPerCpuSecondAtLeastGhostscript: f.pagesPerCpuSecond >= g.pagesPerCpuSecond,
    },
  };
});

const stamp = new Date().toISOString();
const file = `line-time-${stamp.replace(/[:.]/g, '').slice(0, 15)}Z`;
const machine = `${cpus().length} × ${cpus()[0]?.model.split(' ').slice(0, 2).join(' ') ?? 'CPU'}, Node ${process.version}`;
const out = {
  date: stamp,
  machine,
  versions,
  command: `npm run bench:line-time -- ${process.argv.slice(2).join(' ')}`,
  before: BEFORE ?? null,
  ocr: { qualities: OCR_AT, of: OCR_OF ?? labels },
  summary,
  results,
};
writeFileSync(new URL(`results/${file}.json`, import.meta.url), JSON.stringify(out, null, 2) + '\n');

const pct = (n: number | null | undefined) => (n === null || n === undefined ? '-' : (n * 100).toFixed(1));
const md: string[] = [
  '# Line-time benchmark',
  '',
  `${stamp}, ${machine}; ${versions.gs ? `Ghostscript ${versions.gs}` : ''}, ${versions.tesseract}; corpus test/fixtures/line-corpus (${docNames.length} documents, ${summary[0]?.pages ?? 0} pages)${BEFORE ? `; "before" = the renderer of ${BEFORE}` : ''}.`,
  '',
  'Bytes: T.6 strips of all pages. Line seconds: bytes x 8 / bit rate (image only). Recall: share of',
  "the PDF's words that tesseract reads back. Pages/CPU-s: faxline in-process render + binarise + T.6;",
  "Ghostscript's child CPU time, one process per document.",
  '',
  '## Totals',
  '',
  `| quality | ${labels.map((l) => `${l} bytes | ${l} s @14.4k | ${l} s @9.6k | ${l} recall % | ${l} pages/CPU-s`).join(' | ')} |`,
  `|---|${labels.map(() => '---|---|---|---|---').join('|')}|`,
  ...summary.map(
    (s) =>
      `| ${s.fax} | ${labels
        .map((l) => {
          const t = s.totals[l]!;
          return `${t.bytes} | ${t.line14400s} | ${t.line9600s} | ${pct(t.recall)} | ${t.pagesPerCpuSecond}`;
        })
        .join(' | ')} |`,
  ),
  '',
  '## Targets (faxline against Ghostscript)',
  '',
  '| quality | bytes ≤ gs | recall ≥ gs | worst document (points vs gs) | pages/CPU-s ≥ gs |',
  '|---|---|---|---|---|',
  ...summary.map(
    (s) =>
      `| ${s.quality} | ${s.targets.bytesAtMostGhostscript ? 'met' : 'NOT met'} | ${s.targets.recallAtLeastGhostscript === null ? '-' : s.targets.recallAtLeastGhostscript ? 'met' : 'NOT met'} | ${s.targets.worstDocumentRecallPoints ? `${s.targets.worstDocumentRecallPoints.doc} ${s.targets.worstDocumentRecallPoints.points} (${s.targets.noDocumentMoreThan3PointsBelow ? 'met' : 'NOT met'})` : '-'} | ${s.targets.pagesPerCpuSecondAtLeastGhostscript ? 'met' : 'NOT met'} |`,
  ),
  '',
  '## Per document',
  '',
  `| quality | document | pages | ${labels.map((l) => `${l} bytes | ${l} recall %`).join(' | ')} |`,
  `|---|---|---|${labels.map(() => '---|---').join('|')}|`,
  ...results.flatMap((r) =>
    r.docs.map(
      (d) =>
        `| ${r.quality} | ${d.doc} | ${d.pages} | ${labels.map((l) => `${d.bytes[l]} | ${pct(d.recall[l])}`).join(' | ')} |`,
    ),
  ),
  '',
];
writeFileSync(new URL(`results/${file}.md`, import.meta.url), md.join('\n'));
console.log(md.join('\n'));
console.log(`written bench/results/${file}.json and .md`);
