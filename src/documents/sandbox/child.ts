// The sandbox process: receives one PDF at a time over IPC, checks it, answers. The parent
// (check.ts) starts it with a V8 heap cap, watches its resident memory and its time, and kills it
// when either runs out; a kill fails that one document and a fresh process serves the next.
import { DocumentError } from '../errors.ts';
import { inspectPdf, type InspectLimits } from './inspect.ts';

export interface CheckRequest {
  id: number;
  bytes: Uint8Array;
  name: string;
  limits: InspectLimits;
}

export type CheckReply =
  | { id: number; ok: true; info: Awaited<ReturnType<typeof inspectPdf>> }
  | { id: number; ok: false; code: string; message: string };

process.on('message', (m: CheckRequest) => {
  inspectPdf(m.bytes, m.name, m.limits).then(
    (info) => reply({ id: m.id, ok: true, info }),
    (err: unknown) =>
      reply(
        err instanceof DocumentError
          ? { id: m.id, ok: false, code: err.code, message: err.message }
          : {
              id: m.id,
              ok: false,
              code: 'pdf_broken',
              message: `${m.name}: the PDF cannot be read (${String((err as Error)?.message ?? err).slice(0, 200)})`,
            },
      ),
  );
});

function reply(r: CheckReply): void {
  process.send?.(r);
}

// Warm up on a tiny PDF before saying ready, so that a file's time limit measures the file and not
// the first compilation of the parser.
const tiny = Buffer.from(
  '%PDF-1.7\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n' +
    '3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n',
  'latin1',
);
await inspectPdf(tiny, 'warm-up', { maxPages: 1, maxStreamBytes: 1024, maxDecodedBytes: 1024 }).catch(
  () => undefined,
);
process.send?.({ ready: true });
// The parent going away (crash, kill) must not leave this process behind.
process.on('disconnect', () => process.exit(0));
