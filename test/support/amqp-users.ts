// RabbitMQ users for tests of the AMQP intake: created with rabbitmqctl (user and vhost permissions
// only, the broker itself is never touched) and deleted afterwards.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

const run = promisify(execFile);
const ctl = (...args: string[]) => run('rabbitmqctl', ['-q', ...args], { timeout: 30_000 });

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
  await ctl('add_user', user, password);
  await ctl(
    'set_permissions',
    '-p',
    '/',
    user,
    '^amq\\.gen-.*$',
    `^(${p}\\.intake|amq\\.gen-.*)$`,
    `^(${p}\\.events|${p}\\.replies|amq\\.gen-.*)$`,
  );
  await ctl('set_topic_permissions', '-p', '/', user, `${prefix}.events`, '^$', `^${accountId}\\.`);
  await ctl('set_topic_permissions', '-p', '/', user, `${prefix}.replies`, '^$', `^${accountId}\\.`);
  return {
    user,
    password,
    url: `amqp://${user}:${password}@127.0.0.1:5672`,
    remove: async () => {
      await ctl('delete_user', user).catch(() => undefined);
    },
  };
}
