/**
 * An attempt in a few words, for people: its outcome and why the next attempt was set when it was.
 * Shared by `requests show` (src/cli/timeline.ts) and the inspector's timeline (src/ui). Pure.
 */
import { formatDuration } from '../shared/format-duration.js';

/** The attempt fields these read (the store's AttemptRecord has them; policy imports no store type). */
export interface AttemptText {
  startedAt: number;
  durationMs: number | null;
  status: number | null;
  errorClass: string | null;
  outcome: string | null;
  reason: string | null;
  nextAttemptAt: number | null;
  nextWhy: string | null;
}

/** A gap for people: `0s`, `250ms`, `3m`. */
export function ago(ms: number): string {
  return ms <= 0 ? '0s' : ms < 1000 ? `${ms}ms` : formatDuration(Math.round(ms / 1000) * 1000);
}

const UNSENT_WHY: Record<string, string> = {
  released_on_pause: 'the bucket was paused',
  released_on_lease: 'its lease could not cover the attempt',
  released_on_retry_after: "the consumer's Retry-After held the bucket",
  released_on_standby: 'the worker lost its lease',
  released_on_rate: 'the bucket was given a rate',
};

/** The outcome of an attempt in a few words: `200`, `503 → retry`, `refused → retry`, `in flight`. */
export function outcomeText(a: AttemptText): string {
  if (a.outcome === null) return 'in flight';
  const what = a.status !== null ? String(a.status) : (a.errorClass ?? 'error');
  if (a.outcome === 'delivered') return `${what} delivered`;
  if (a.outcome === 'retry') return `${what} → retry`;
  if (a.outcome === 'lease_expired') return 'lease expired (the worker stopped mid-attempt)';
  if (a.outcome === 'released') {
    // Claimed ahead of a free slot and given back unsent (drain/worker.ts), or cut off on shutdown.
    const unsent = UNSENT_WHY[a.reason ?? ''];
    if (unsent !== undefined) return `released unsent: ${unsent} (not counted)`;
    return a.errorClass === null ? 'released unsent: the worker stopped (not counted)' : 'released on shutdown (not counted)';
  }
  return `${what} ${a.outcome}`;
}

/** Why the next attempt was set when it was. */
export function nextText(a: AttemptText): string {
  if (a.nextAttemptAt === null) return '';
  const gap = a.nextAttemptAt - (a.startedAt + (a.durationMs ?? 0));
  const why =
    {
      schedule: 'the schedule',
      retry_after: "the consumer's Retry-After",
      lease_expired: 'the lease expired',
      released: a.reason === 'released_on_shutdown' ? 'released on shutdown' : 'released',
    }[a.nextWhy ?? ''] ??
    a.nextWhy ??
    '';
  return `next in ${ago(gap)} (${why})`;
}

/**
 * The gap before attempt `a`, after `prev`: `+16s` (from the previous attempt's start), or, when it
 * went out later than the previous attempt scheduled it (by a second or more), both gaps from the
 * previous attempt's end, `scheduled +16s, sent +57s`, with the delivery's last deferral reason
 * when it has one (`deferred: retry_budget`): a rate, the retry budget or a Retry-After held it.
 */
export function gapText(prev: AttemptText, a: Pick<AttemptText, 'startedAt'>, lastDeferralReason: string | null): string {
  if (prev.nextAttemptAt !== null) {
    const end = prev.startedAt + (prev.durationMs ?? 0);
    const scheduled = prev.nextAttemptAt - end;
    const sent = a.startedAt - end;
    if (sent - scheduled >= 1000) {
      const why = lastDeferralReason === null ? '' : ` (deferred: ${lastDeferralReason})`;
      return `scheduled +${ago(scheduled)}, sent +${ago(sent)}${why}`;
    }
  }
  return `+${ago(a.startedAt - prev.startedAt)}`;
}
