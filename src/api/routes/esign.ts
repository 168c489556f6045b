// E-signature reads and the field-rule delete. Ids that are not this account's behave exactly like
// ids that do not exist (404); row-level security makes that hold even without the WHERE clauses.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { isId } from '../../domain/ids.ts';
import { accountOf } from '../auth-hook.ts';
import { ApiError, messages, ok } from '../../domain/envelope.ts';
import { answer, envelope, operation, refusal, tokenErrors } from '../openapi.ts';
import type { RouteDeps } from '../deps.ts';

const FIELD_COLUMNS = `id, template_id, name, field_type, required, page, x, y, width, height,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`;
const RULE_COLUMNS = `id, template_id, field_id, condition, action,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`;

const contracts = {
  field: operation({
    tag: 'Templates',
    summary: 'A template field',
    auth: true,
    params: z.object({ templateId: z.string(), fieldTemplateId: z.string() }),
    responses: {
      '200': answer(
        'The field.',
        envelope(
          z.object({
            id: z.string(),
            template_id: z.string(),
            name: z.string(),
            field_type: z.string(),
            required: z.boolean(),
            page: z.number(),
            x: z.number(),
            y: z.number(),
            width: z.number(),
            height: z.number(),
            created_at: z.string(),
          }),
        ),
      ),
      '404': refusal('No such field of this template in this account.', messages.fieldNotFound),
      ...tokenErrors,
    },
  }),
  rules: operation({
    tag: 'Templates',
    summary: 'The field rules of a template',
    auth: true,
    params: z.object({ templateId: z.string() }),
    responses: {
      '200': answer(
        'The rules (possibly none).',
        envelope(
          z.array(
            z.object({
              id: z.string(),
              template_id: z.string(),
              field_id: z.string().nullable(),
              condition: z.unknown(),
              action: z.string(),
              created_at: z.string(),
            }),
          ),
        ),
      ),
      '404': refusal('No such template in this account.', messages.templateNotFound),
      ...tokenErrors,
    },
  }),
  deleteRule: operation({
    tag: 'Templates',
    summary: 'Delete a template field rule',
    auth: true,
    params: z.object({ templateId: z.string(), templateFieldRuleId: z.string() }),
    responses: {
      '200': answer('Deleted.', envelope(), { status: 1, message: messages.ruleDeleted }),
      '404': refusal(
        'No such rule of this template in this account (also the second delete).',
        messages.ruleNotFound,
      ),
      ...tokenErrors,
    },
  }),
  theme: operation({
    tag: 'Documents',
    summary: 'The theme of an e-sign document',
    auth: true,
    params: z.object({ documentId: z.string() }),
    responses: {
      '200': answer(
        'The theme.',
        envelope(
          z.object({
            document_id: z.string(),
            primary_color: z.string(),
            background_color: z.string(),
            font_family: z.string(),
            logo_url: z.string().nullable(),
            updated_at: z.string(),
          }),
        ),
      ),
      '404': refusal(
        `No such document in this account (\`${messages.documentNotFound}\`), or it has no theme (\`${messages.themeNotFound}\`).`,
        messages.documentNotFound,
      ),
      ...tokenErrors,
    },
  }),
};

export function registerEsignRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.get<{ Params: { templateId: string; fieldTemplateId: string } }>(
    '/v1/esign_templates/:templateId/fields/:fieldTemplateId',
    { schema: contracts.field, preHandler: d.auth },
    async (req) => {
      const { templateId, fieldTemplateId } = req.params;
      if (!isId(templateId) || !isId(fieldTemplateId)) throw new ApiError(404, messages.fieldNotFound);
      const r = await d.tenant.tx(accountOf(req), (c) =>
        c.query(`SELECT ${FIELD_COLUMNS} FROM esign_template_fields WHERE id = $1 AND template_id = $2`, [
          fieldTemplateId,
          templateId,
        ]),
      );
      if (!r.rows[0]) throw new ApiError(404, messages.fieldNotFound);
      return ok(messages.fieldFound, r.rows[0]);
    },
  );

  app.get<{ Params: { templateId: string } }>(
    '/v1/esign_templates/:templateId/field_rule',
    { schema: contracts.rules, preHandler: d.auth },
    async (req) => {
      const { templateId } = req.params;
      if (!isId(templateId)) throw new ApiError(404, messages.templateNotFound);
      const rules = await d.tenant.tx(accountOf(req), async (c) => {
        const t = await c.query('SELECT 1 FROM esign_templates WHERE id = $1', [templateId]);
        if (t.rowCount !== 1) return null;
        return (
          await c.query(
            `SELECT ${RULE_COLUMNS} FROM esign_field_rules WHERE template_id = $1 ORDER BY created_at, id`,
            [templateId],
          )
        ).rows;
      });
      if (!rules) throw new ApiError(404, messages.templateNotFound);
      return ok(messages.rulesListed, rules);
    },
  );

  app.delete<{ Params: { templateId: string; templateFieldRuleId: string } }>(
    '/v1/esign_templates/:templateId/field_rule/:templateFieldRuleId',
    { schema: contracts.deleteRule, preHandler: d.auth },
    async (req) => {
      const { templateId, templateFieldRuleId } = req.params;
      if (!isId(templateId) || !isId(templateFieldRuleId)) throw new ApiError(404, messages.ruleNotFound);
      const r = await d.tenant.tx(accountOf(req), (c) =>
        c.query('DELETE FROM esign_field_rules WHERE id = $1 AND template_id = $2', [
          templateFieldRuleId,
          templateId,
        ]),
      );
      if (r.rowCount !== 1) throw new ApiError(404, messages.ruleNotFound);
      return ok(messages.ruleDeleted);
    },
  );

  app.get<{ Params: { documentId: string } }>(
    '/v1/esign_documents/:documentId/theme',
    { schema: contracts.theme, preHandler: d.auth },
    async (req) => {
      const { documentId } = req.params;
      if (!isId(documentId)) throw new ApiError(404, messages.documentNotFound);
      const r = await d.tenant.tx(accountOf(req), (c) =>
        c.query<{ document_id: string; has_theme: boolean }>(
          `SELECT d.id AS document_id, t.document_id IS NOT NULL AS has_theme, t.primary_color,
                  t.background_color, t.font_family, t.logo_url,
                  to_char(t.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated_at
             FROM esign_documents d LEFT JOIN esign_document_themes t ON t.document_id = d.id
            WHERE d.id = $1`,
          [documentId],
        ),
      );
      const row = r.rows[0];
      if (!row) throw new ApiError(404, messages.documentNotFound);
      if (!row.has_theme) throw new ApiError(404, messages.themeNotFound);
      const { has_theme: _, ...theme } = row;
      return ok(messages.themeFound, theme);
    },
  );
}
