// DELETE /v1/faxes/{job_id}/content: deletes one final fax's content now (documents, rendered image);
// its record, history and attempts stay (docs/audit-retention.md). Under the account's row-level
// security: another account's fax answers as a missing one.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { deleteFaxContent } from '../../accounts/retention.ts';
import { ApiError, messages, ok } from '../../domain/envelope.ts';
import { accountOf } from '../auth-hook.ts';
import type { RouteDeps } from '../deps.ts';
import { answer, envelope, operation, refusal, tokenErrors } from '../openapi.ts';

const deleted = z.object({
  documents: z.number().int().describe('Documents whose content was deleted now (0: already deleted).'),
  images: z
    .number()
    .int()
    .describe('Rendered fax images deleted now (of this fax and the faxes sharing its documents).'),
});

const contract = operation({
  tag: 'Manage Faxes',
  summary: "Delete a finished fax's content now (its record and history stay)",
  description:
    'Deletes the documents (content, file_url, file name) and the rendered image of a fax that is final ' +
    '(delivered, failed, cancelled, rejected or unknown). A forward shares the documents of the fax it forwards: ' +
    'deleting either deletes them for both, and needs both final. Afterwards the image answers 410 Gone; the ' +
    'record, its history and the transmission report (without its page image) remain. Recorded in the audit trail.',
  auth: true,
  params: z.object({ job_id: z.string().describe('The job_id of a send or forward.') }),
  responses: {
    '200': answer('Deleted (or nothing left to delete).', envelope(deleted), {
      status: 1,
      message: 'Fax content deleted',
      data: { documents: 1, images: 1 },
    }),
    '404': refusal('No such fax in this account (also: another account’s).', messages.faxNotFound),
    '409': refusal(
      'The fax (or a fax sharing its documents) is not final yet; the message gives its state.',
      'Fax not final: its content can be deleted once it is delivered, failed, cancelled, rejected or unknown (current state: sending)',
    ),
    ...tokenErrors,
  },
});

export function registerFaxContentRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.delete<{ Params: { job_id: string } }>(
    '/v1/faxes/:job_id/content',
    { schema: contract, preHandler: d.auth },
    async (req) => {
      const r = await d.tenant.tx(accountOf(req), (c) => deleteFaxContent(c, req.params.job_id));
      if (!r.ok && r.why === 'not_found') throw new ApiError(404, messages.faxNotFound);
      if (!r.ok)
        throw new ApiError(
          409,
          `Fax not final: its content can be deleted once it is delivered, failed, cancelled, rejected or unknown (current state: ${r.state})`,
        );
      return ok('Fax content deleted', { documents: r.documents, images: r.images });
    },
  );
}
