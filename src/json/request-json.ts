/**
 * The `--json` shapes of stored requests, their delivery history and tail events (README "JSON
 * fields"), which the CLI prints and the admin API answers. They keep the stored bytes: no
 * redaction (that is for people), bodies as UTF-8 text or base64.
 */
import { isUtf8 } from 'node:buffer';
import type { AttemptRecord, DeliveryHistory, RequestPage, StoredRequest, StoredVerdict, TailEvent } from '../store/store.js';

/** A stored sender verdict as JSON: `{scheme, result, reason}`, or null when the bucket did not verify. */
export function verificationJson(v: StoredVerdict | null) {
  return v === null ? null : { scheme: v.scheme, result: v.result, reason: v.reason };
}
import { iso } from './iso.js';

/** Flat [name, value, …] as [name, value] pairs, in order, unredacted. */
export function headerPairs(rawHeaders: readonly string[]): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  for (let i = 0; i < rawHeaders.length; i += 2) pairs.push([rawHeaders[i]!, rawHeaders[i + 1]!]);
  return pairs;
}

// Node's own check: it rejects invalid sequences (Buffer.toString would replace them).
export { isUtf8 };

/** Stable JSON shape of a stored request (README "JSON fields"). Keeps the stored bytes exactly. */
export function requestJson(r: StoredRequest) {
  const utf8 = isUtf8(r.body);
  return {
    id: r.id,
    bucket: r.bucket,
    received_at: iso(r.receivedAt),
    method: r.method,
    path: r.path,
    query: r.query,
    headers: headerPairs(r.rawHeaders),
    body: utf8 ? r.body.toString('utf8') : r.body.toString('base64'),
    body_encoding: (utf8 ? 'utf8' : 'base64') as 'utf8' | 'base64',
    // Chunked trailers as received (same form as headers); stored as evidence, never forwarded.
    trailers: headerPairs(r.rawTrailers ?? []),
    size: r.size,
    sha256: r.sha256,
    peer: r.peer,
    state: r.state,
    // What ingest made of it (accepted, quarantined, duplicate, handshake), the sender verdict kept as
    // evidence, the dedup key it carried and, for a duplicate, the request it repeats.
    disposition: r.disposition,
    verification: verificationJson(r.verdict),
    dedup_key: r.dedupKey,
    duplicate_of: r.duplicateOf,
  };
}

/** One page of `requests list --json`: `{ requests, next_cursor }`. */
export function requestPageJson(page: RequestPage) {
  return {
    requests: page.requests.map((r) => ({
      id: r.id,
      received_at: iso(r.receivedAt),
      method: r.method,
      path: r.path,
      query: r.query,
      size: r.size,
      state: r.state,
      attempts: r.attempts,
      last_status: r.lastStatus,
      generation: r.generation,
      disposition: r.disposition,
      verification: verificationJson(r.verdict),
    })),
    next_cursor: page.nextCursor,
  };
}

export function tailEventJson(e: TailEvent) {
  if (e.kind === 'request') {
    const r = e.request;
    return {
      event: 'request',
      at: iso(e.at),
      id: r.id,
      method: r.method,
      path: r.path,
      query: r.query,
      size: r.size,
      state: r.state,
      disposition: r.disposition,
      verification: verificationJson(r.verdict),
    };
  }
  const a = e.attempt;
  return {
    event: 'attempt',
    at: iso(e.at),
    request_id: e.requestId,
    delivery_id: e.deliveryId,
    generation: e.generation,
    attempt: a.number,
    url: a.url,
    status: a.status,
    error_class: a.errorClass,
    outcome: a.outcome,
    reason: a.reason,
    duration_ms: a.durationMs,
    next_attempt_at: a.nextAttemptAt === null ? null : iso(a.nextAttemptAt),
    next_why: a.nextWhy,
    worker: a.workerId,
  };
}

function attemptJson(a: AttemptRecord, prevStartedAt: number | undefined) {
  const body = a.responseBody;
  const utf8 = body === null ? true : isUtf8(body);
  return {
    id: a.id,
    number: a.number,
    url: a.url,
    started_at: new Date(a.startedAt).toISOString(),
    gap_ms: prevStartedAt === undefined ? null : a.startedAt - prevStartedAt,
    duration_ms: a.durationMs,
    status: a.status,
    error_class: a.errorClass,
    error_message: a.errorMessage,
    outcome: a.outcome,
    reason: a.reason,
    next_attempt_at: a.nextAttemptAt === null ? null : new Date(a.nextAttemptAt).toISOString(),
    next_why: a.nextWhy,
    worker: a.workerId,
    response_headers: a.responseHeaders === null ? null : headerPairs(a.responseHeaders),
    response_body: body === null ? null : utf8 ? body.toString('utf8') : body.toString('base64'),
    response_body_encoding: body === null ? null : ((utf8 ? 'utf8' : 'base64') as 'utf8' | 'base64'),
    response_truncated: a.responseTruncated,
  };
}

/** Stable JSON of a request's deliveries (README "JSON fields"). */
export function historyJson(history: readonly DeliveryHistory[]) {
  return history.map((d) => {
    let prev: number | undefined;
    return {
      id: d.id,
      generation: d.generation,
      destination: d.destination,
      state: d.state,
      trigger: d.trigger,
      replay_id: d.replayId,
      latest: d.latest,
      attempts: d.attempts,
      deferrals: d.deferrals,
      last_deferral_reason: d.lastDeferralReason,
      next_attempt_at: d.state === 'pending' || d.state === 'retrying' ? new Date(d.nextAttemptAt).toISOString() : null,
      created_at: new Date(d.createdAt).toISOString(),
      settled_at: d.settledAt === null ? null : new Date(d.settledAt).toISOString(),
      supersede_requested: d.supersedeRequested,
      attempt_log: d.attemptLog.map((a) => {
        const j = attemptJson(a, prev);
        prev = a.startedAt;
        return j;
      }),
    };
  });
}
