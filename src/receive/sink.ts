// Where the answering side puts a received fax. The SIP user agent (or any other way in) routes a
// call with InboundRouter, calls begin() when it answers (the row and fax.receiving are stored at
// once), and complete() when the exchange ended, with the TIFF file the fax engine wrote. complete()
// stores the TIFF as received, a PDF wrapping its strips, the metadata and the event in one statement.
import { readFile, stat } from 'node:fs/promises';
import type { Pool } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import type { ReceiveMetrics } from './metrics.ts';
import { faxPdf } from './pdf.ts';
import { completeReception, insertReception, type NewReception, type ReceptionRecord } from './store.ts';
import { callerText } from './routing.ts';
import { dropLastPage, readFaxTiff, resolutionName } from './tiff.ts';

/** What the fax engine reported at the end (the media contract's MediaResult, or the loopback's). */
export interface ReceptionResult {
  ok: boolean;
  /** SpanDSP T.30 completion code, 0 when ok. */
  code: number;
  text: string;
  /** Pages the engine says it received. */
  pages: number;
  bitRate: number;
  ecm: boolean;
  remoteIdent: string;
  transport: 'audio' | 't38';
  durationMs: number;
  /** The file's last page went past INBOUND_MAX_PAGE_MM: it is dropped, the pages before it kept. */
  lastPageRejected?: boolean;
}

export interface Reception {
  readonly id: string;
  /**
   * Stores the end of the reception. `tiffFile`: the file the engine wrote (absent or empty when no
   * page arrived). Resolves once stored and announced; rejects if the database refused (the caller
   * logs it: the row stays 'receiving' and the sweep fails it).
   */
  complete(result: ReceptionResult, tiffFile: string | null): Promise<StoredReception>;
}

export interface StoredReception {
  id: string;
  status: ReceptionRecord['status'];
  pages: number;
  /** false when the row had been failed already by the sweep (nothing stored now). */
  stored: boolean;
}

export interface ReceivedFaxSink {
  begin(call: NewReception): Promise<Reception>;
}

export interface SinkDeps {
  db: Pool;
  log: Logger;
  metrics?: ReceiveMetrics;
  /** Largest TIFF stored (bytes, default 64 MiB: 500 hd pages are about 13 MiB); a bigger one is kept only as far as its metadata. */
  maxTiffBytes?: number;
}

export class PgReceivedFaxSink implements ReceivedFaxSink {
  private readonly d: SinkDeps;
  constructor(d: SinkDeps) {
    this.d = d;
  }

  async begin(call: NewReception): Promise<Reception> {
    const { id } = await insertReception(this.d.db, call);
    this.d.metrics?.answered.inc();
    const log = this.d.log.child({ receivedFaxId: id, accountId: call.accountId });
    // The called number is PHI-adjacent: censored unless LOG_PHI (src/log.ts).
    log.info({ calledNumber: call.to, callId: call.callId }, 'inbound fax call answered');
    let done: Promise<StoredReception> | null = null;
    return {
      id,
      complete: (result, tiffFile) => (done ??= this.complete(id, log, result, tiffFile)),
    };
  }

  private async complete(
    id: string,
    log: Logger,
    result: ReceptionResult,
    tiffFile: string | null,
  ): Promise<StoredReception> {
    const rec = await buildRecord(result, tiffFile, this.d.maxTiffBytes ?? 64 * 1024 * 1024);
    const stored = await completeReception(this.d.db, id, rec);
    if (stored) {
      this.d.metrics?.stored.inc({ status: rec.status });
      this.d.metrics?.pages.inc(rec.pages);
      this.d.metrics?.duration.observe({ status: rec.status }, rec.durationMs / 1000);
    }
    log.info(
      { status: rec.status, pages: rec.pages, code: rec.resultCode, durationMs: rec.durationMs, stored },
      stored ? 'received fax stored' : 'received fax not stored: the sweep had failed it already',
    );
    return { id, status: rec.status, pages: rec.pages, stored };
  }
}

/**
 * The row of a finished reception: pages are what the TIFF holds (the pages that arrived, whatever
 * the engine counted), status received (ok, pages), partial (not ok, some pages: kept), failed.
 */
export async function buildRecord(
  result: ReceptionResult,
  tiffFile: string | null,
  maxTiffBytes: number,
): Promise<ReceptionRecord> {
  let tiff: Buffer | null = null;
  let note = '';
  if (tiffFile !== null) {
    // The size first: an over-long reception is never read into memory.
    const size = await stat(tiffFile).then(
      (st) => st.size,
      () => 0,
    );
    if (size > maxTiffBytes)
      note = `; the TIFF (${size} bytes) is larger than the ${maxTiffBytes} bytes kept`;
    else if (size > 0) tiff = await readFile(tiffFile).catch(() => null);
    if (tiff && result.lastPageRejected) {
      try {
        const kept = dropLastPage(tiff);
        tiff = kept ? Buffer.from(kept.buffer, kept.byteOffset, kept.byteLength) : null;
      } catch (err) {
        tiff = null;
        note = `; the over-long last page could not be dropped (${(err as Error).message}): no image kept`;
      }
    }
  }
  let pdf: Uint8Array | null = null;
  let pages = 0;
  let xDpi: number | null = null;
  let yDpi: number | null = null;
  let encoding: string | null = null;
  if (tiff) {
    try {
      const parsed = readFaxTiff(tiff);
      pages = parsed.length;
      const first = parsed[0];
      if (first) {
        xDpi = first.xDpi;
        yDpi = first.yDpi;
        encoding = first.compression === 4 ? 'T.6' : first.twoD ? 'T.4 2-D' : 'T.4 1-D';
        pdf = await faxPdf(parsed, {
          title: `Fax from ${result.remoteIdent || 'unknown'}`,
          received: new Date(),
        });
      }
    } catch (err) {
      note = `; the TIFF could not be wrapped as PDF (${(err as Error).message})`;
      pages = result.pages;
    }
    if (pages === 0) tiff = null;
  }
  const status = pages === 0 ? 'failed' : result.ok ? 'received' : 'partial';
  const partial = status === 'partial' ? `; ${pages} page${pages === 1 ? '' : 's'} kept` : '';
  return {
    status,
    // The far end's TSI: printable and bounded like a caller id (it goes into the row and its events).
    remoteCsid: callerText(result.remoteIdent),
    pages,
    resolution: yDpi === null ? null : resolutionName(yDpi),
    xDpi,
    yDpi,
    encoding,
    bitRate: result.bitRate > 0 ? result.bitRate : null,
    ecm: result.bitRate > 0 ? result.ecm : null,
    transport: result.transport,
    durationMs: Math.max(0, Math.round(result.durationMs)),
    resultCode: result.code,
    resultText: `${result.text}${partial}${note}`,
    tiff,
    pdf,
  };
}
