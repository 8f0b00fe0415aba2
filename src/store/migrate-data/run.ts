import { createHash } from 'node:crypto';
import { resolve } from 'node:path';
import { redactDbUrl } from '../../policy/redact.js';
import { AppError } from '../../shared/errors.js';
import { dialectOf, openDataEnd, type Dialect } from '../open-store.js';
import { migrateData, type MigrateDataOptions, type MigrateDataResult } from './engine.js';

export interface RunMigrateDataOptions extends Omit<MigrateDataOptions, 'from' | 'to' | 'sourceId'> {
  /** --from and --to as --db reads them: a SQLite path or a postgres:// URL. */
  from: string;
  to: string;
}

export interface RunMigrateDataResult extends MigrateDataResult {
  from: { dialect: Dialect; location: string };
  to: { dialect: Dialect; location: string };
}

/**
 * What names one database, whatever the spelling: an absolute path, or the URL without its
 * password (so a rotated password still finds the run marker) and with one scheme spelling.
 */
export function databaseIdentity(db: string): string {
  if (dialectOf(db) === 'sqlite') return `sqlite:${resolve(db)}`;
  return redactDbUrl(db.replace(/^postgresql:\/\//i, 'postgres://'));
}

/** Opens both ends (the source read-only), runs the migration, and closes them. */
export async function runMigrateData(o: RunMigrateDataOptions): Promise<RunMigrateDataResult> {
  const fromId = databaseIdentity(o.from);
  if (fromId === databaseIdentity(o.to)) throw new AppError('usage', '--from and --to name the same database');
  // 16 hex digits of its sha256: the marker's key names the source without showing its location.
  const sourceId = createHash('sha256').update(fromId).digest('hex').slice(0, 16);
  const from = await openDataEnd(o.from, 'source');
  try {
    const to = await openDataEnd(o.to, 'target');
    try {
      const result = await migrateData({ ...o, from, to, sourceId });
      return { ...result, from: { dialect: from.dialect, location: from.location }, to: { dialect: to.dialect, location: to.location } };
    } finally {
      await to.close();
    }
  } finally {
    await from.close();
  }
}
