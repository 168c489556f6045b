// A render process: loads PDFium once, then renders the tasks the pool (pool.ts) sends, one at a
// time. The pool started it with a V8 heap cap, watches its resident memory (PDFium's WebAssembly
// heap only grows) and its time per page, and kills it when either runs out or when it has served
// enough tasks; that memory then returns to the system.
import { closeSync, openSync, writeSync } from 'node:fs';
import { Pdfium, RenderError, type OpenDocument } from './engine.ts';
import type { CoverValues } from '../cover-layout.ts';
import { readableReason } from '../errors.ts';
import { CoverPainter } from './cover-raster.ts';
import { encodeT6 } from './g4.ts';
import type { ChildReply, RenderRequest, RenderTask } from './protocol.ts';

const pdfium = await Pdfium.load();
const painter = await CoverPainter.create(pdfium);
/** Bilevel rows of the page being encoded, reused from page to page. */
let scratch: Uint8Array | undefined;

function send(m: ChildReply): void {
  process.send?.(m);
}

/** Writes all of `data` at the end of the file `fd`. */
function writeAll(fd: number, data: Uint8Array): void {
  for (let at = 0; at < data.length;) at += writeSync(fd, data, at);
}

function run(id: number, task: RenderTask, out: string | undefined): ChildReply {
  // The header line's pages are our own PDF (src/documents/header.ts), opened beside the document.
  const header = task.header ? pdfium.open(task.header) : null;
  if (task.cover) {
    try {
      return drawCover(id, task, task.cover, header);
    } finally {
      header?.close();
    }
  }
  const doc = (() => {
    try {
      return pdfium.open(task.pdf!);
    } catch (err) {
      header?.close();
      throw err;
    }
  })();
  try {
    if (task.kind === 'page-image') {
      if (task.page < 0 || task.page >= doc.pageCount)
        throw new RenderError('page_out_of_range', `the document has ${doc.pageCount} page(s)`);
      const p = doc.render(
        task.page,
        task.quality,
        undefined,
        header ? { doc: header, index: 0 } : undefined,
      );
      const result = { kind: 'page-image' as const, pageCount: doc.pageCount, rows: p.rows };
      return { id, ok: true, result: { ...result, width: p.width, height: p.height } };
    }
    if (!out) throw new Error('a fax-pages task needs an output file');
    const end = Math.min(doc.pageCount, task.first + task.count);
    const fd = openSync(out, 'w', 0o600);
    try {
      for (let i = task.first; i < end; i++) {
        const p = doc.render(
          i,
          task.quality,
          scratch,
          header ? { doc: header, index: i - task.first } : undefined,
        );
        scratch = p.rows.buffer === scratch?.buffer ? scratch : new Uint8Array(p.rows.buffer);
        const data = encodeT6(p.rows, p.width, p.height);
        writeAll(fd, data);
        send({ id, page: { size: data.length, width: p.width, height: p.height } });
      }
    } finally {
      closeSync(fd);
    }
    return { id, ok: true, result: { kind: 'fax-pages', pageCount: doc.pageCount } };
  } finally {
    doc.close();
    header?.close();
  }
}

/** The drawn cover: one page, set from its values (cover-raster.ts), as a fax page or an image. */
function drawCover(
  id: number,
  task: RenderTask,
  values: CoverValues,
  header: OpenDocument | null,
): ChildReply {
  const first = task.kind === 'page-image' ? task.page : task.first;
  if (first !== 0) throw new RenderError('page_out_of_range', 'the document has 1 page(s)');
  const p = painter.paint(values, task.quality, header ? { doc: header, index: 0 } : undefined, scratch);
  if (task.kind === 'page-image') {
    // Its own copy: the scratch rows are the next page's.
    const result = { kind: 'page-image' as const, pageCount: 1, rows: p.rows.slice() };
    return { id, ok: true, result: { ...result, width: p.width, height: p.height } };
  }
  scratch = p.rows.buffer === scratch?.buffer ? scratch : new Uint8Array(p.rows.buffer);
  // A few KB of our own: sent with its size, no file written (PageMeta.data).
  const data = encodeT6(p.rows, p.width, p.height);
  send({ id, page: { size: data.length, width: p.width, height: p.height, data } });
  return { id, ok: true, result: { kind: 'fax-pages', pageCount: 1 } };
}

process.on('message', (m: RenderRequest) => {
  let reply: ChildReply;
  try {
    reply = run(m.id, m.task, m.out);
  } catch (err) {
    const message = String((err as Error)?.message ?? err);
    // The output file could not be opened or written (a full disk): not the document's fault.
    if (typeof (err as NodeJS.ErrnoException)?.syscall === 'string') {
      send({ id: m.id, ok: false, code: null, io: true, message });
      return;
    }
    // PDFium's WebAssembly memory cannot grow further: the same limit as the pool's watchdog.
    const code =
      err instanceof RenderError
        ? err.code
        : /enlarge memory|out of memory/i.test(message)
          ? 'render_memory_exceeded'
          : null;
    // A RenderError's message is ours; anything else (a WebAssembly trap) is told by what it means,
    // never by the exception's own text.
    reply = {
      id: m.id,
      ok: false,
      code,
      message: err instanceof RenderError ? message : readableReason(err),
    };
  }
  send(reply);
});

// Warm up on a tiny page before saying ready, so that a page's time limit measures the page and not
// the first compilation of the renderer.
const tiny = Buffer.from(
  '%PDF-1.7\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n' +
    '3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 72 72]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n',
  'latin1',
);
try {
  const d = pdfium.open(tiny);
  d.render(0, 'low');
  d.close();
} catch {
  // a warm-up failure changes nothing: real tasks report their own errors
}
process.send?.({ ready: true });
// The parent going away (crash, kill) must not leave this process behind.
process.on('disconnect', () => process.exit(0));
