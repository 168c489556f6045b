// Render worker thread: loads PDFium once, then renders tasks from the pool one at a time.
import { parentPort } from 'node:worker_threads';
import { Pdfium, RenderError } from './engine.ts';
import { encodeT6 } from './g4.ts';
import type { EncodedPage, RenderResult, RenderTask, WorkerReply } from './protocol.ts';

if (!parentPort) throw new Error('render worker must run in a worker thread');
const port = parentPort;
const pdfium = await Pdfium.load();
/** Bilevel rows of the page being encoded, reused from page to page. */
let scratch: Uint8Array | undefined;

function run(task: RenderTask): { result: RenderResult; transfer: ArrayBuffer[] } {
  const doc = pdfium.open(task.pdf);
  try {
    if (task.kind === 'page-image') {
      if (task.page < 0 || task.page >= doc.pageCount)
        throw new RenderError('page_out_of_range', `the document has ${doc.pageCount} page(s)`);
      const p = doc.render(task.page, task.quality);
      return {
        result: {
          kind: 'page-image',
          pageCount: doc.pageCount,
          rows: p.rows,
          width: p.width,
          height: p.height,
        },
        transfer: [p.rows.buffer as ArrayBuffer],
      };
    }
    const end = Math.min(doc.pageCount, task.first + task.count);
    const pages: EncodedPage[] = [];
    for (let i = task.first; i < end; i++) {
      const p = doc.render(i, task.quality, scratch);
      scratch = p.rows.buffer === scratch?.buffer ? scratch : new Uint8Array(p.rows.buffer);
      pages.push({ data: encodeT6(p.rows, p.width, p.height), width: p.width, height: p.height });
    }
    return {
      result: { kind: 'fax-pages', pageCount: doc.pageCount, pages },
      transfer: pages.map((p) => p.data.buffer as ArrayBuffer),
    };
  } finally {
    doc.close();
  }
}

port.on('message', (msg: { id: number; task: RenderTask }) => {
  let reply: WorkerReply;
  let transfer: ArrayBuffer[] = [];
  try {
    const r = run(msg.task);
    reply = { id: msg.id, ok: true, result: r.result };
    transfer = r.transfer;
  } catch (err) {
    const e = err as Error;
    reply = {
      id: msg.id,
      ok: false,
      code: err instanceof RenderError ? err.code : null,
      message: e.message ?? String(err),
    };
  }
  port.postMessage(reply, transfer);
});
port.postMessage({ ready: true });
