import { randomUUID } from 'node:crypto';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Ids in paths and bodies are opaque to customers; anything that is not one of ours is "not found". */
export function isId(s: unknown): s is string {
  return typeof s === 'string' && UUID.test(s);
}

export function newId(): string {
  return randomUUID();
}
