// The values of a Fax Default that a fax uses: its sender identity, quality and cover page. A job
// keeps a copy of them from the moment it is accepted (fax_jobs.fax_default, migration 014), so a
// later update or deletion of the Fax Default never changes a fax already accepted.

export const faxQualities = ['low', 'standard', 'hd'] as const;
export type FaxQuality = (typeof faxQualities)[number];

export interface FaxDefaultValues {
  id: string;
  name: string;
  fax_as: string;
  fax_quality: FaxQuality;
  cover_page: boolean;
  sender_name: string | null;
  sender_company: string | null;
  sender_phone: string | null;
  sender_email: string | null;
  cover_footer: string | null;
  /** The header line's template (migration 019); absent in values frozen before it. */
  header_line?: string | null;
}

/** The columns of fax_defaults that make up FaxDefaultValues. */
export const FAX_DEFAULT_VALUE_COLUMNS =
  'id, name, fax_as, fax_quality, cover_page, sender_name, sender_company, sender_phone, sender_email, cover_footer, header_line';
