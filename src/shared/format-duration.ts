/**
 * Human durations as the README shows them: `30s`, `1m30s`, `2h01m30s`, `3h`, `24h02m`.
 * Units below the largest are zero-padded to two digits; trailing zero units are dropped.
 * Sub-second values print as `250ms`.
 */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  const sign = ms < 0 ? '-' : '';
  let rest = Math.abs(Math.round(ms));
  if (rest < 1000) return `${sign}${rest}ms`;
  rest = Math.round(rest / 1000);
  const h = Math.floor(rest / 3600);
  const m = Math.floor((rest % 3600) / 60);
  const s = rest % 60;
  const parts: string[] = [];
  if (h > 0) parts.push(`${h}h`);
  if (m > 0 || (h > 0 && s > 0)) parts.push(h > 0 ? `${String(m).padStart(2, '0')}m` : `${m}m`);
  if (s > 0) parts.push(h > 0 || m > 0 ? `${String(s).padStart(2, '0')}s` : `${s}s`);
  return sign + parts.join('');
}
