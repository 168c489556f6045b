import type { FastifyInstance } from 'fastify';
import { accountOf } from '../auth-hook.ts';
import { ApiError, messages, ok } from '../../domain/envelope.ts';
import { answer, bodyErrors, envelope, operation, refusal, tokenErrors } from '../openapi.ts';
import { contactDeleteBody } from '../../domain/schemas.ts';
import type { RouteDeps } from '../deps.ts';

const contract = operation({
  tag: 'Contacts',
  summary: 'Delete a contact permanently',
  auth: true,
  body: contactDeleteBody,
  responses: {
    '200': answer('Deleted.', envelope(), { status: 1, message: messages.contactDeleted }),
    '422': refusal(
      'id missing (`The id field is required.`), or no such contact in this account.',
      messages.contactNotFound,
    ),
    '400': bodyErrors['400'],
    '413': bodyErrors['413'],
    '415': bodyErrors['415'],
    ...tokenErrors,
  },
});

/**
 * POST /v1/contacts/delete — permanent; the spec answers a missing or unknown id with 422. `id` is the
 * encrypted contact id (src/auth/contact-id.ts).
 */
export function registerContactRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.post('/v1/contacts/delete', { schema: contract, preHandler: d.auth }, async (req) => {
    const body = req.body;
    if (body === null || typeof body !== 'object' || Array.isArray(body))
      throw new ApiError(400, 'Request body must be a JSON object');
    const id = (body as { id?: unknown }).id;
    if (id === undefined || id === null || id === '') throw new ApiError(422, messages.contactIdRequired);
    if (typeof id !== 'string') throw new ApiError(422, 'The id field must be a string.');
    // An id this installation did not issue (altered, made up, a raw UUID) is simply not found.
    const contactId = d.contactIds.decode(id);
    if (contactId === null) throw new ApiError(422, messages.contactNotFound);
    const r = await d.tenant.tx(accountOf(req), (c) =>
      c.query('DELETE FROM contacts WHERE id = $1', [contactId]),
    );
    if (r.rowCount !== 1) throw new ApiError(422, messages.contactNotFound);
    return ok(messages.contactDeleted);
  });
}
