// RabbitMQ users for tests of the AMQP intake: created with rabbitmqctl (user and vhost permissions
// only, the broker itself is never touched) and deleted afterwards.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

const run = promisify(execFile);
const ctl = (...args: string[]) => run('rabbitmqctl', ['-q', ...args], { timeout: 30_000 });

/** Who the broker's log names as having made the change (rabbitmqctl's own calls say "cli_user"). */
const ACTING = '<<"faxline-test">>';

/**
 * `text` as an Erlang binary literal for `rabbitmqctl eval`. A backslash goes in as its code (92):
 * eval's text loses one level of backslashes before Erlang reads it. Nothing else here needs
 * quoting (names are hex, patterns hold no double quote).
 */
function erl(text: string): string {
  if (text.includes('"')) throw new Error(`no double quote expected in ${text}`);
  return `<<${text
    .split('\\')
    .map((part) => `"${part}"`)
    .join(', 92, ')}>>`;
}

export interface BrokerUser {
  user: string;
  password: string;
  url: string;
  remove(): Promise<void>;
}

/**
 * A sender's user with the permissions docs/amqp-intake.md recommends: publish only to <prefix>.intake,
 * its own server-named queues (replies, events), and events and answers of its own account only.
 */
export async function createSenderUser(prefix: string, accountId: string): Promise<BrokerUser> {
  const user = `faxline_t_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  const p = prefix.replace(/[.-]/g, (c) => `\\${c}`);
  // One rabbitmqctl for the user and its three permissions (each rabbitmqctl starts an Erlang VM:
  // about 0.75 CPU-s; four of them per user were 3 s, issue 28), through the same functions of the
  // broker's internal user database that add_user, set_permissions and set_topic_permissions call.
  await ctl(
    'eval',
    [
      `ok = rabbit_auth_backend_internal:add_user(${erl(user)}, ${erl(password)}, ${ACTING})`,
      `ok = rabbit_auth_backend_internal:set_permissions(${erl(user)}, ${erl('/')}, ${erl('^amq\\.gen-.*$')}, ` +
        `${erl(`^(${p}\\.intake|amq\\.gen-.*)$`)}, ${erl(`^(${p}\\.events|${p}\\.replies|amq\\.gen-.*)$`)}, ${ACTING})`,
      ...['events', 'replies'].map(
        (x) =>
          `ok = rabbit_auth_backend_internal:set_topic_permissions(${erl(user)}, ${erl('/')}, ` +
          `${erl(`${prefix}.${x}`)}, ${erl('^$')}, ${erl(`^${accountId}\\.`)}, ${ACTING})`,
      ),
    ].join(', ') + '.',
  );
  return {
    user,
    password,
    url: `amqp://${user}:${password}@127.0.0.1:5672`,
    remove: async () => {
      await ctl('delete_user', user).catch(() => undefined);
    },
  };
}
