// E-signature reads and the field-rule delete. Ids that are not this account's behave exactly like
// ids that do not exist (404); row-level security makes that hold even without the WHERE clauses.
import type { FastifyInstance } from 'fastify';
import { isId } from '../../domain/ids.ts';
import { accountOf } from '../auth-hook.ts';
import { ApiError, messages, ok } from '../envelope.ts';
import type { RouteDeps } from '../server.ts';

const FIELD_COLUMNS = `id, template_id, name, field_type, required, page, x, y, width, height,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`;
const RULE_COLUMNS = `id, template_id, field_id, condition, action,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`;

export function registerEsignRoutes(app: FastifyInstance, d: RouteDeps): void {
  app.get<{ Params: { templateId: string; fieldTemplateId: string } }>(
    '/v1/esign_templates/:templateId/fields/:fieldTemplateId',
    { preHandler: d.auth },
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
    { preHandler: d.auth },
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
    { preHandler: d.auth },
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
    { preHandler: d.auth },
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
