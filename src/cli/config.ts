// Where the CLI finds the service and its API key: FAXLINE_URL and FAXLINE_API_KEY, else the file
// `faxline login` wrote ($FAXLINE_CONFIG, else $XDG_CONFIG_HOME/faxline/config.json, else
// ~/.config/faxline/config.json). The file holds a secret: it is written with mode 0600.
import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

export interface CliConfig {
  url: string;
  api_key: string;
}

export function configPath(env: NodeJS.ProcessEnv): string {
  if (env.FAXLINE_CONFIG) return env.FAXLINE_CONFIG;
  const base = env.XDG_CONFIG_HOME || join(homedir(), '.config');
  return join(base, 'faxline', 'config.json');
}

export async function readConfigFile(path: string): Promise<Partial<CliConfig>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw err;
  }
  const parsed = JSON.parse(text) as Partial<CliConfig>;
  return {
    ...(typeof parsed.url === 'string' ? { url: parsed.url } : {}),
    ...(typeof parsed.api_key === 'string' ? { api_key: parsed.api_key } : {}),
  };
}

/** Writes the file readable by its owner only (0600), replacing any old one in one step. */
export async function writeConfigFile(path: string, c: CliConfig): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, JSON.stringify(c, null, 2) + '\n', { mode: 0o600 });
  await chmod(tmp, 0o600); // the umask cannot widen it, but an existing tmp file could be wider
  await rename(tmp, path);
}
