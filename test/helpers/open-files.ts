import { readdirSync, readlinkSync } from 'node:fs';

/**
 * The files a process holds open under `dir` (Linux /proc), deleted ones included: a spool file is
 * unlinked as soon as it is opened, so a leaked one shows only here, as `<path> (deleted)`.
 */
export function openFilesUnder(pid: number | 'self', dir: string): string[] {
  const fdDir = `/proc/${pid}/fd`;
  const out: string[] = [];
  for (const fd of readdirSync(fdDir)) {
    try {
      const target = readlinkSync(`${fdDir}/${fd}`);
      if (target.startsWith(`${dir}/`)) out.push(target);
    } catch {
      // closed while we looked
    }
  }
  return out;
}
