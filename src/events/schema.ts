// The event message, version 1, as zod: it validates what the relay publishes in tests and generates
// the AsyncAPI document. Compatibility rule: fields are only added; a breaking change is version 2.
import { z } from 'zod';
import { jobStates } from '../domain/states.ts';
import { eventTypes } from './types.ts';

export const faxEvent = z
  .object({
    version: z.literal(1),
    id: z
      .string()
      .uuid()
      .describe('Event id: the same id when an event is published again; deduplicate on it.'),
    type: z.enum(eventTypes),
    job_id: z.string().uuid(),
    account_id: z.string().uuid(),
    occurred_at: z.string().describe('When the state change was committed (ISO 8601, UTC).'),
    sequence: z
      .number()
      .int()
      .describe('Increases with every event of the same job: order a job’s events by it.'),
    attempt: z
      .number()
      .int()
      .describe('Transmission attempt the event belongs to (0 before the first call).'),
    state: z.enum(jobStates).describe('State of the job after the change.'),
    previous_state: z.enum(jobStates).nullable(),
    client_reference: z
      .string()
      .nullable()
      .describe('The client_reference given when the fax was sent, or null.'),
    broadcast_id: z
      .string()
      .uuid()
      .nullable()
      .describe('The broadcast the fax is one recipient of, or null.'),
    details: z
      .record(z.string(), z.unknown())
      .describe(
        'What the worker recorded with the change (e.g. {page, of} for fax.page_sent), plus failure_code, failure_reason, page_count and pages_sent on terminal events.',
      ),
  })
  .describe('A state change of a fax job.');
export type FaxEvent = z.infer<typeof faxEvent>;
