// Fetching file_url documents: http(s) only, a size cap enforced while streaming, a total time cap.
import { DocumentError } from './errors.ts';
import type { Fetcher } from './prepare.ts';

export function httpFetcher(maxBytes: number, timeoutMs: number): Fetcher {
  return async (url, signal) => {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new DocumentError('url_invalid', `file_url is not a valid URL`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:')
      throw new DocumentError('url_scheme', `file_url must use http or https`);
    const res = await fetch(u, { signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]) }).catch(
      (err: unknown) => {
        throw new DocumentError(
          'download_failed',
          `file_url could not be fetched: ${(err as Error).message}`,
        );
      },
    );
    if (!res.ok || !res.body)
      throw new DocumentError('download_failed', `file_url answered HTTP ${res.status}`);
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      size += (chunk as Uint8Array).length;
      if (size > maxBytes)
        throw new DocumentError('file_too_large', `file_url is larger than ${maxBytes} bytes`);
      chunks.push(Buffer.from(chunk as Uint8Array));
    }
    return Buffer.concat(chunks);
  };
}
