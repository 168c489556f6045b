// Admin CLI commands of the events/webhooks/AMQP-intake part. Returns undefined for other commands.
import type { Pool } from '../db/pool.ts';
import { isId } from '../domain/ids.ts';
import { listSenders, registerSender, removeSender } from '../auth/senders.ts';
import { eventTypes } from '../events/types.ts';
import { createEndpoint, deleteEndpoint, listEndpoints } from '../webhooks/repo.ts';

export const eventsUsage = `  register-sender --user <rabbitmq user> --account <id>   the user may publish commands for the account
  remove-sender --user <rabbitmq user>                  the user may no longer publish commands
  list-senders                                          registered RabbitMQ users and their accounts
  add-webhook --account <id> --url <url> [--types t,…]  new webhook endpoint; prints its signing secret
  list-webhooks --account <id>                          webhook endpoints of an account
  remove-webhook --account <id> --id <webhook id>       delete a webhook endpoint`;

export const eventsOptions = {
  user: { type: 'string' },
  // --account is shared with delete-documents and declared in cli.ts
  url: { type: 'string' },
  types: { type: 'string' },
  id: { type: 'string' },
} as const;

type Values = { user?: string; account?: string; url?: string; types?: string; id?: string };

class UsageError extends Error {}
export { UsageError as EventsUsageError };

function need(v: string | undefined, what: string): string {
  if (!v) throw new UsageError(`needs ${what}`);
  return v;
}

function account(v: Values): string {
  const a = need(v.account, '--account <account id>');
  if (!isId(a)) throw new UsageError('--account must be an account id (uuid)');
  return a;
}

export async function runEventsCommand(command: string, pool: Pool, v: Values): Promise<unknown> {
  switch (command) {
    case 'register-sender': {
      const user = need(v.user, '--user <rabbitmq user>');
      const acc = account(v);
      const exists = await pool.query('SELECT 1 FROM accounts WHERE id = $1', [acc]);
      if (exists.rowCount === 0) throw new Error(`no account ${acc}`);
      await registerSender(pool, user, acc);
      return { broker_user: user, account_id: acc };
    }
    case 'remove-sender': {
      const user = need(v.user, '--user <rabbitmq user>');
      if (!(await removeSender(pool, user))) throw new Error(`no sender ${user}`);
      return { removed: user };
    }
    case 'list-senders':
      return await listSenders(pool);
    case 'add-webhook': {
      const acc = account(v);
      const url = need(v.url, '--url <url>');
      try {
        const u = new URL(url);
        if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('scheme');
      } catch {
        throw new UsageError('--url must be an http or https URL');
      }
      const types = v.types ? v.types.split(',').map((t) => t.trim()) : null;
      for (const t of types ?? [])
        if (!(eventTypes as readonly string[]).includes(t)) throw new UsageError(`unknown event type ${t}`);
      const e = await createEndpoint(pool, acc, url, types);
      return { webhook_id: e.id, url: e.url, event_types: e.event_types, secret: e.secret };
    }
    case 'list-webhooks':
      return (await listEndpoints(pool, account(v))).map((e) => ({
        webhook_id: e.id,
        url: e.url,
        event_types: e.event_types,
      }));
    case 'remove-webhook': {
      const id = need(v.id, '--id <webhook id>');
      if (!isId(id) || !(await deleteEndpoint(pool, id, account(v)))) throw new Error(`no webhook ${id}`);
      return { removed: id };
    }
    default:
      return undefined;
  }
}
