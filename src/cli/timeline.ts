/**
 * A request's delivery history for people (`requests show`) and machines (`--json`): every
 * generation with its attempts as a timeline. Pure: history in, lines or JSON out.
 */
import type { AttemptRecord, DeliveryHistory } from '../store/store.js';
import { redactUrl } from '../policy/redact.js';
import { gapText, nextText, outcomeText } from '../policy/attempt-text.js';
import { escapeBytes, escapeJsonText, escapeTerminal } from '../policy/terminal-text.js';
import { isUtf8 } from './render.js';

/** Human lines; destinations redacted unless `reveal`, consumer text (errors, responses) escaped. */
export function timelineLines(history: readonly DeliveryHistory[], bucketDestination: string | null, reveal = false): string[] {
  if (history.length === 0) return ['deliveries: none (the bucket had no destination when this request arrived)'];
  const lines: string[] = ['deliveries:'];
  for (const d of history) {
    const url = d.destination ?? bucketDestination;
    const to = url === null ? '(bucket destination, none set)' : escapeTerminal(reveal ? url : redactUrl(url));
    const from = d.trigger === 'replay' ? `replay ${d.replayId}` : 'on arrival';
    const flags = [
      d.supersedeRequested && d.state === 'delivering' ? 'to be superseded after this attempt' : '',
      d.latest ? '' : d.destination === null ? 'earlier generation' : 'replay --to',
    ].filter(Boolean);
    lines.push(
      `  generation ${d.generation} → ${to} (${from}): ${d.state}, ${d.attempts} attempt(s)${flags.length ? `; ${flags.join('; ')}` : ''}`,
    );
    if (d.deferrals > 0) lines.push(`    held back ${d.deferrals} time(s), last by ${d.lastDeferralReason}`);
    if (d.state === 'pending' || d.state === 'retrying') lines.push(`    next attempt ${new Date(d.nextAttemptAt).toISOString()}`);
    let prev: AttemptRecord | undefined;
    for (const a of d.attemptLog) {
      const gap = prev === undefined ? '' : ` (${gapText(prev, a, d.lastDeferralReason)})`;
      prev = a;
      const latency = a.durationMs === null ? '' : `, ${a.durationMs} ms`;
      const err = a.errorClass !== null && a.status === null ? `, ${a.errorClass}` : '';
      const next = nextText(a);
      lines.push(
        `    #${a.number} ${new Date(a.startedAt).toISOString()}${gap}  ${outcomeText(a)}${err}${latency}${next ? `; ${next}` : ''}`,
      );
      if (a.errorMessage) lines.push(`       ${escapeTerminal(a.errorMessage)}`);
      if (a.responseBody && a.responseBody.length > 0 && a.outcome !== 'delivered') {
        const kept = a.responseTruncated ? ' (first 4 KiB kept)' : '';
        if (isUtf8(a.responseBody)) {
          const text = a.responseBody.toString('utf8');
          lines.push(`       response: ${escapeJsonText(JSON.stringify(text.length > 200 ? `${text.slice(0, 200)}…` : text))}${kept}`);
        } else {
          // A latin1 error page still reads as text; the bytes that are not UTF-8 show as \xNN.
          const more = a.responseBody.length > 200 ? '…' : '';
          lines.push(
            `       response (${a.responseBody.length} bytes, not UTF-8): ${escapeBytes(a.responseBody.subarray(0, 200))}${more}${kept}`,
          );
        }
      }
    }
  }
  return lines;
}

export { historyJson } from '../json/request-json.js';
