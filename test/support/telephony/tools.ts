// The telephony peers the SIP tests run (Debian packages installed by scripts/system-packages.sh):
// where their binaries are, and the reason a test cannot run without them. Tests pass that reason to
// skipUnless (test/support/skips.ts), so a local run counts the skip and CI (FAXLINE_NO_SKIPS=1)
// fails instead of passing without the peers.
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

export type Tool = 'kamailio' | 'rtpengine' | 'sipp' | 'tiffcmp';

const PACKAGE: Record<Tool, string> = {
  kamailio: 'kamailio',
  rtpengine: 'rtpengine-daemon',
  sipp: 'sip-tester',
  tiffcmp: 'libtiff-tools',
};

/** Absolute path of `tool` on PATH or in /usr/sbin, /usr/bin (a non-root PATH often lacks sbin). */
export function toolPath(tool: Tool): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/bin', '/sbin'];
  for (const dir of dirs) {
    if (!dir) continue;
    const file = join(dir, tool);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Why `tools` cannot all run here (naming the Debian packages), or false when they can. */
export function missingTools(...tools: Tool[]): string | false {
  const gone = tools.filter((t) => !toolPath(t));
  if (gone.length === 0) return false;
  return (
    `${gone.join(', ')} not installed (Debian packages ${gone.map((t) => PACKAGE[t]).join(', ')}; ` +
    'scripts/system-packages.sh installs them)'
  );
}

/** The path of `tool`, or an error that says which package provides it. */
export function requireTool(tool: Tool): string {
  const path = toolPath(tool);
  if (!path) throw new Error(missingTools(tool) || `${tool} not found`);
  return path;
}
