// The sandbox process: receives one request at a time over IPC, does it, answers. The parent
// (check.ts) starts it with a V8 heap cap, watches its resident memory and its time, and kills it
// when either runs out; a kill fails that one request and a fresh process serves the next.
// Three kinds of request: `check` (the checks of inspect.ts, on every document of a send),
// `formFields` (a Smart Template upload's form read and filled once with pdf-lib) and `fillTemplate`
// (a Smart Template filled with a fax's cover values and flattened, for a send or a preview). The
// last two are in form.ts, loaded on the first such request, so a process that only checks never
// loads pdf-lib.
import { deflateSync } from 'node:zlib';
import { DocumentError, readableReason } from '../errors.ts';
import type { CoverValues, FilledTemplate } from '../cover.ts';
import type { FormField } from './form.ts';
import { inspectDocument, inspectPdf, type InspectLimits, type PdfInfo } from './inspect.ts';

/** A request without its id (the parent numbers them). */
export type SandboxTask =
  | { kind: 'check'; bytes: Uint8Array; name: string; limits: InspectLimits }
  | { kind: 'formFields'; bytes: Uint8Array; name: string }
  | { kind: 'fillTemplate'; bytes: Uint8Array; name: string; values: CoverValues; documentPages: number };
export type SandboxRequest = SandboxTask & { id: number };

/** What each kind of request answers with. */
export interface SandboxResults {
  check: PdfInfo;
  formFields: FormField[];
  fillTemplate: FilledTemplate;
}

export type SandboxReply =
  | { id: number; ok: true; value: SandboxResults[keyof SandboxResults] }
  | { id: number; ok: false; code: string; message: string };

/** The code of a failure that is not a DocumentError (pdf-lib or the checks throwing something else). */
const fallbackCode: Record<SandboxRequest['kind'], string> = {
  check: 'pdf_broken',
  formFields: 'smart_template_broken',
  fillTemplate: 'smart_template_broken',
};

function handle(m: SandboxRequest): Promise<SandboxResults[keyof SandboxResults]> {
  if (m.kind === 'formFields') return import('./form.ts').then(({ readForm }) => readForm(m.bytes, m.name));
  if (m.kind === 'fillTemplate')
    return import('./form.ts').then(({ fillTemplate }) =>
      fillTemplate(m.bytes, m.name, m.values, m.documentPages),
    );
  return inspectDocument(m.bytes, m.name, m.limits);
}

process.on('message', (m: SandboxRequest) => {
  handle(m).then(
    (value) => reply({ id: m.id, ok: true, value }),
    (err: unknown) =>
      reply(
        err instanceof DocumentError
          ? { id: m.id, ok: false, code: err.code, message: err.message }
          : {
              id: m.id,
              ok: false,
              code: fallbackCode[m.kind],
              message: `${m.name}: the ${m.kind === 'check' ? 'document' : 'PDF'} cannot be read (${readableReason(err)})`,
            },
      ),
  );
});

function reply(r: SandboxReply): void {
  process.send?.(r);
}

// Warm up on a tiny PDF before saying ready, so that a file's time limit measures the file and not
// the first compilation of the parser and of PDFium (loaded here): a page with a Flate content
// stream, checked a few times so the hot paths are compiled.
const content = deflateSync('BT /F1 12 Tf 72 700 Td (warm-up) Tj ET');
const tiny = Buffer.concat([
  Buffer.from(
    '%PDF-1.7\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n' +
      '3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R>>endobj\n' +
      `4 0 obj<</Length ${content.length}/Filter/FlateDecode>>stream\n`,
    'latin1',
  ),
  content,
  Buffer.from('\nendstream endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n', 'latin1'),
]);
// pdf-lib too (Smart Template forms, images made into PDFs), so their first request is not slowed by
// loading and compiling it.
const { PDFDocument } = await import('pdf-lib');
await PDFDocument.load(tiny, { updateMetadata: false }).catch(() => undefined);
for (let i = 0; i < 3; i++)
  await inspectPdf(tiny, 'warm-up', { maxPages: 1, maxStreamBytes: 4096, maxDecodedBytes: 4096 }).catch(
    () => undefined,
  );
process.send?.({ ready: true });
// The parent going away (crash, kill) must not leave this process behind.
process.on('disconnect', () => process.exit(0));
