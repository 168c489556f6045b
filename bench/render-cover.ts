import type { CoverContext } from '../src/documents/cover.ts';

/** A typical cover: Fax Default sender details plus a request's recipient, subject and message. */
export const benchCover: CoverContext = {
  timeZone: 'Europe/Paris',
  faxDefault: {
    id: '00000000-0000-4000-8000-000000000001',
    name: 'Front desk',
    fax_as: '+15550100001',
    fax_quality: 'standard',
    cover_page: true,
    sender_name: 'Front Desk',
    sender_company: 'Demo Clinic',
    sender_phone: '+1 555 010 0000',
    sender_email: 'frontdesk@example.org',
    cover_footer: 'CONFIDENTIAL: meant for the named recipient only.',
  },
  smartTemplate: null,
  faxNumber: '+15551234567',
  callerId: '+15550100001',
  options: {
    recipient_name: 'Dr. Ada Moreau',
    subject: 'Referral',
    message: 'Please find the referral and lab results attached.',
  },
};
