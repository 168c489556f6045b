// A private Postfix (Debian's) as the MX in front of the mail gateway: its own configuration and queue
// directories in a temporary directory, listening on a loopback port, relaying the fax domain to the
// gateway with XFORWARD (the original client's address and HELO), on nothing but loopback.
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface Postfix {
  port: number;
  dir: string;
  /** Postfix's log so far (for failure messages). */
  log(): string;
  stop(): Promise<void>;
}

/** Daemons of the master.cf: what a relay-only Postfix needs, none chrooted. */
const services = [
  'pickup    unix  n - n 60 1 pickup',
  'cleanup   unix  n - n - 0 cleanup',
  'qmgr      unix  n - n 300 1 qmgr',
  'rewrite   unix  - - n - - trivial-rewrite',
  'bounce    unix  - - n - 0 bounce',
  'defer     unix  - - n - 0 bounce',
  'trace     unix  - - n - 0 bounce',
  'verify    unix  - - n - 1 verify',
  'flush     unix  n - n 1000? 0 flush',
  'proxymap  unix  - - n - - proxymap',
  'smtp      unix  - - n - - smtp',
  'relay     unix  - - n - - smtp',
  'showq     unix  n - n - - showq',
  'error     unix  - - n - - error',
  'retry     unix  - - n - - error',
  'discard   unix  - - n - - discard',
  'local     unix  - n n - - local',
  'anvil     unix  - - n - 1 anvil',
  'scache    unix  - - n - 1 scache',
  'postlog   unix-dgram n - n - 1 postlogd',
];

export async function startPostfix(o: { port: number; domain: string; gateway: number }): Promise<Postfix> {
  const dir = mkdtempSync(join(tmpdir(), 'faxline-postfix-'));
  chmodSync(dir, 0o755); // the postfix user reaches its directories through it
  const conf = join(dir, 'etc');
  mkdirSync(conf);
  // The queue directory is root's (postfix makes its subdirectories), the data directory postfix's.
  mkdirSync(join(dir, 'queue'));
  mkdirSync(join(dir, 'data'));
  const ids = await run('id', ['-u', 'postfix']);
  const gid = await run('id', ['-g', 'postfix']);
  chownSync(join(dir, 'data'), Number(ids.stdout.trim()), Number(gid.stdout.trim()));
  const main = [
    'compatibility_level = 3.6',
    `queue_directory = ${join(dir, 'queue')}`,
    `data_directory = ${join(dir, 'data')}`,
    'mail_owner = postfix',
    'setgid_group = postdrop',
    'inet_protocols = ipv4',
    'inet_interfaces = 127.0.0.1',
    `myhostname = mx.${o.domain}`,
    'mydestination =',
    'local_recipient_maps =',
    'alias_maps =',
    'alias_database =',
    `relay_domains = ${o.domain}`,
    `transport_maps = inline:{ ${o.domain}=smtp:[127.0.0.1]:${o.gateway} }`,
    'smtp_send_xforward_command = yes',
    'mynetworks = 127.0.0.1/32',
    'smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination',
    'smtp_dns_support_level = disabled',
    'smtp_host_lookup = native',
    'disable_dns_lookups = yes',
    'smtpd_peername_lookup = no',
    'biff = no',
    // Its log in the (postfix-owned) data directory; maillog_file_prefixes must admit the path.
    `maillog_file = ${join(dir, 'data', 'maillog')}`,
    `maillog_file_prefixes = ${dir}`,
    'smtp_tls_security_level = none',
    'smtpd_tls_security_level = none',
    'queue_run_delay = 1s',
    'minimal_backoff_time = 1s',
    'maximal_backoff_time = 2s',
    'message_size_limit = 30000000',
    // Several instances on one machine (test files run at once): no shared lock or pid names.
    `process_id_directory = pid`,
  ].join('\n');
  writeFileSync(join(conf, 'main.cf'), `${main}\n`);
  writeFileSync(
    join(conf, 'master.cf'),
    `127.0.0.1:${o.port} inet n - n - - smtpd\n${services.join('\n')}\n`,
  );
  await run('postfix', ['-c', conf, 'start'], { timeout: 60_000 });
  let stopped: Promise<void> | undefined;
  return {
    port: o.port,
    dir,
    log: () => {
      try {
        return readFileSync(join(dir, 'data', 'maillog'), 'utf8');
      } catch {
        return '';
      }
    },
    stop: () =>
      (stopped ??= (async () => {
        await run('postfix', ['-c', conf, 'stop'], { timeout: 60_000 }).catch(() => undefined);
        rmSync(dir, { recursive: true, force: true });
      })()),
  };
}
