// Command messages on RabbitMQ. Version 1. The compatibility rule: fields are only ever added,
// optional, and consumers ignore fields they do not know; a breaking change is a new `version`.
import { z } from 'zod';

const uuid = z.string().uuid();

export const jobCommand = z.object({
  version: z.literal(1),
  type: z.enum(['send', 'forward']),
  job_id: uuid,
  account_id: uuid,
  request_id: z.string().max(200).optional(),
  issued_at: z.string(),
});
export type JobCommand = z.infer<typeof jobCommand>;

export const cancelCommand = z.object({
  version: z.literal(1),
  type: z.literal('cancel'),
  job_id: uuid,
  account_id: uuid,
  request_id: z.string().max(200).optional(),
  issued_at: z.string(),
});
export type CancelCommand = z.infer<typeof cancelCommand>;

export type CommandType = 'send' | 'forward' | 'cancel';
