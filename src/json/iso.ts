/** An epoch-ms time as ISO 8601 UTC, the form every JSON time takes; null stays null. */
export function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}
