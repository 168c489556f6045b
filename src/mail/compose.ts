// What an outgoing mail says, composed when it is sent from the rows it names (mail_outbox says what
// to send, not the mail): the receipt of a mail that became faxes, the result of one fax with its
// transmission report attached, a refusal's reason, a received fax (PDF, link or notice), a text.
// Returns null when the account's settings say this mail is not wanted (receipts failures/none).
import { loadSettings, type OutboxRow } from '../accounts/mail.ts';
import { loadTimeZone } from '../documents/cover.ts';
import { reportOfJob, reportPdf } from '../documents/proof.ts';
import { readRenderRange, renderSize } from '../documents/render/store.ts';
import { readTiffLayout, type StoredPage } from '../documents/render/tiff-read.ts';
import type { Queryable } from '../db/pool.ts';
import { getJob, type JobRow } from '../jobs/repo.ts';
import { getAttempts } from '../lines/repo.ts';
import { getImage } from '../receive/store.ts';

export interface Composed {
  subject: string;
  text: string;
  attachments: { filename: string; content: Buffer; contentType: string }[];
}

export interface ComposeOptions {
  /** Base URL of links to received faxes (MAIL_LINK_BASE, else the API's address). */
  linkBase: string;
  now: () => Date;
}

const reasonWords: Record<string, string> = {
  delivered: 'delivered',
  failed: 'failed',
  cancelled: 'cancelled',
  rejected: 'rejected (not approved)',
  unknown: 'of unknown outcome (the line did not say whether it arrived)',
};

export async function compose(c: Queryable, row: OutboxRow, o: ComposeOptions): Promise<Composed | null> {
  switch (row.kind) {
    case 'text':
    case 'refused':
      return { subject: row.subject ?? '', text: row.body ?? '', attachments: [] };
    case 'receipt':
      return receipt(c, row);
    case 'result':
      return result(c, row, o);
    case 'received':
      return received(c, row, o);
  }
}

async function receipt(c: Queryable, row: OutboxRow): Promise<Composed | null> {
  const jobs = await c.query<{ id: string; fax_number: string }>(
    `SELECT j.id, j.fax_number FROM mail_jobs m JOIN fax_jobs j ON j.id = m.job_id
      WHERE m.account_id = $1 AND m.message_id = $2 ORDER BY j.broadcast_position NULLS FIRST, j.created_at`,
    [row.account_id, row.message_id],
  );
  if (jobs.rows.length === 0) return null;
  const lines = jobs.rows.map((j) => `  ${j.fax_number}: fax ${j.id}`);
  return {
    subject: `Fax accepted for ${jobs.rows.map((j) => j.fax_number).join(', ')}`.slice(0, 250),
    text:
      `Your message was accepted and will be sent as ${jobs.rows.length === 1 ? 'a fax' : `${jobs.rows.length} faxes`}:\n\n` +
      `${lines.join('\n')}\n\nYou will get one more mail for each number when its fax is delivered or has failed.\n`,
    attachments: [],
  };
}

async function result(c: Queryable, row: OutboxRow, o: ComposeOptions): Promise<Composed | null> {
  if (!row.job_id || !row.account_id) return null;
  const settings = await loadSettings(c, row.account_id);
  const job = await getJob(c, row.job_id);
  if (!job) return null;
  if (settings.receipts === 'none' || (settings.receipts === 'failures' && job.state === 'delivered'))
    return null;
  const words = reasonWords[job.state] ?? job.state;
  const why =
    job.state === 'delivered' ? '' : `\nReason: ${job.failure_reason ?? job.failure_code ?? 'not given'}\n`;
  const pages = job.page_count === null ? '' : `, ${job.pages_sent} of ${job.page_count} pages sent`;
  return {
    subject: `Fax ${job.state === 'delivered' ? 'delivered' : 'not delivered'} to ${job.fax_number}`,
    text:
      `The fax ${job.id} to ${job.fax_number} was ${words}${pages}.\n${why}\n` +
      'The transmission report is attached.\n',
    attachments: [
      {
        filename: `fax-${job.id}-report.pdf`,
        content: await report(c, job, o.now()),
        contentType: 'application/pdf',
      },
    ],
  };
}

/** The transmission report of a finished fax, as GET /v1/faxes/{id}/report answers it. */
async function report(c: Queryable, job: JobRow, now: Date): Promise<Buffer> {
  const attempts = await getAttempts(c, job.id);
  const size = await renderSize(c, job.id);
  const timeZone = await loadTimeZone(c, job.account_id);
  let first: StoredPage | null = null;
  if (size !== null) {
    const read = async (offset: number, length: number) => {
      const b = await readRenderRange(c, job.id, offset, length);
      if (!b) throw new Error('the fax image was deleted while it was being read');
      return b;
    };
    const [p] = await readTiffLayout(read, size, 1);
    if (p) first = { ...p, data: await read(p.offset, p.length) };
  }
  const pdf = await reportPdf({
    ...reportOfJob(job),
    timeZone,
    attempts,
    firstPage: first,
    noImage: size === null ? 'none was kept (deleted with the documents, or never made)' : null,
    now,
  });
  return Buffer.from(pdf);
}

async function received(c: Queryable, row: OutboxRow, o: ComposeOptions): Promise<Composed | null> {
  const r = await c.query<{
    id: string;
    from_number: string | null;
    remote_csid: string | null;
    to_number: string;
    pages: number;
    status: string;
    has_pdf: boolean;
    email_attach: 'pdf' | 'link' | 'none' | null;
  }>(
    `SELECT r.id, r.from_number, r.remote_csid, r.to_number, r.pages, r.status, r.pdf IS NOT NULL AS has_pdf,
            n.email_attach
       FROM received_faxes r LEFT JOIN numbers n ON n.id = r.number_id
      WHERE r.id = $1 AND r.deleted_at IS NULL`,
    [row.received_fax_id],
  );
  const f = r.rows[0];
  if (!f) return null;
  const caller = f.from_number ?? f.remote_csid ?? 'an unknown caller';
  const pages = `${f.pages} page${f.pages === 1 ? '' : 's'}`;
  const attach = f.email_attach ?? 'none';
  // The PDF is stored sealed (docs/encryption.md): read through the received-fax store, which opens it.
  const stored = attach === 'pdf' && f.has_pdf ? await getImage(c, f.id, 'pdf') : null;
  const pdf = stored && 'image' in stored ? stored.image : null;
  const link = `${o.linkBase.replace(/\/$/, '')}/v1/received-faxes/${f.id}`;
  const lines = [
    `A fax from ${caller} to ${f.to_number} arrived: ${pages}${f.status === 'partial' ? ' (incomplete: the call ended early)' : ''}.`,
    '',
  ];
  if (pdf) lines.push('The fax is attached as a PDF.');
  else if (attach === 'link') lines.push(`Read it at ${link} (sign in required).`);
  else lines.push(`Fax id: ${f.id}.`);
  return {
    subject: `Fax from ${caller}, ${pages}`,
    text: `${lines.join('\n')}\n`,
    attachments: pdf ? [{ filename: `fax-${f.id}.pdf`, content: pdf, contentType: 'application/pdf' }] : [],
  };
}
