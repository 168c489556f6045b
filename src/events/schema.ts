// The event message, version 1, as zod: it validates what the relay publishes in tests and generates
// the AsyncAPI document. Compatibility rule: fields are only added; a breaking change is version 2.
import { z } from 'zod';
import { jobStates } from '../domain/states.ts';
import { jobEventTypes, receiveEventTypes } from './types.ts';

export const faxEvent = z
  .object({
    version: z.literal(1),
    id: z
      .string()
      .uuid()
      .describe('Event id: the same id when an event is published again; deduplicate on it.'),
    type: z.enum(jobEventTypes),
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

/** An event of a received fax (fax.receiving, fax.received, fax.receive_failed), version 1. */
export const receivedFaxEvent = z
  .object({
    version: z.literal(1),
    id: z
      .string()
      .uuid()
      .describe('Event id: the same id when an event is published again; deduplicate on it.'),
    type: z.enum(receiveEventTypes),
    received_fax_id: z.string().uuid().describe('GET /v1/received-faxes/{id} reads it.'),
    account_id: z.string().uuid(),
    occurred_at: z.string().describe('When the change was committed (ISO 8601, UTC).'),
    sequence: z
      .number()
      .int()
      .describe('Increases with every event of the same received fax: order its events by it.'),
    details: z
      .object({
        status: z.enum(['receiving', 'received', 'partial', 'failed']),
        to: z.string().describe('The number called (E.164).'),
        from: z.string().nullable().describe('Caller id of the call.'),
        station_id: z.string().nullable().describe('Our CSI sent to the caller.'),
        call_id: z.string().nullable().describe('SIP Call-ID.'),
        remote_csid: z.string().nullable().optional().describe("The sender's station id (TSI)."),
        pages: z.number().int().optional().describe('Pages stored (a partial reception keeps what arrived).'),
        resolution: z.string().nullable().optional(),
        x_dpi: z.number().int().nullable().optional(),
        y_dpi: z.number().int().nullable().optional(),
        encoding: z.string().nullable().optional(),
        bit_rate: z.number().int().nullable().optional(),
        ecm: z.boolean().nullable().optional(),
        transport: z.enum(['audio', 't38']).nullable().optional(),
        duration_ms: z.number().int().nullable().optional(),
        result_code: z.number().int().nullable().optional().describe('SpanDSP T.30 completion code; 0 ok.'),
        result_text: z.string().nullable().optional(),
      })
      .describe('The received fax as it was when the event was written (fax.receiving: the call only).'),
  })
  .describe('A received fax: the call was answered, or its reception ended (stored, partial or failed).');
export type ReceivedFaxEvent = z.infer<typeof receivedFaxEvent>;

/** Anything the relay publishes to <prefix>.events. */
export type AnyEvent = FaxEvent | ReceivedFaxEvent;
