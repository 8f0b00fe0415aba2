/** `--db` names a PostgreSQL server when it is a URL with one of these schemes; anything else is a SQLite file path. */
export const DATABASE_URL_SCHEMES = ['postgres://', 'postgresql://'] as const;

export function isDatabaseUrl(db: string): boolean {
  const lower = db.slice(0, 'postgresql://'.length).toLowerCase();
  return DATABASE_URL_SCHEMES.some((s) => lower.startsWith(s));
}
