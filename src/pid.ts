// Whether a process id names a living process: the owner checks of files and directories named
// after the process that made them (render page directories, SIP temporary directories).

/** True while `pid` runs (EPERM: it runs as another user). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
