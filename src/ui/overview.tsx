import { redactUrl } from '../policy/redact.js';
import type { Bucket, BucketCounts, RequestState } from '../store/store.js';
import { Layout } from './layout.js';
import { Sparkline, type SparkSeries } from './sparkline.js';
import { age, inline } from './text.js';

/** The states shown as columns, in the order a request moves through them. */
export const STATE_COLUMNS: readonly RequestState[] = [
  'pending',
  'retrying',
  'delivering',
  'held',
  'delivered',
  'failed',
  'exhausted',
  'none',
];

export interface OverviewRow {
  bucket: Bucket;
  counts: BucketCounts;
  /** received_at of the oldest request still waiting; null when none. */
  oldestWaitingAt: number | null;
  series: SparkSeries;
}

export function OverviewPage(props: {
  rows: OverviewRow[];
  total: number;
  nowMs: number;
  next: string | null;
  first: boolean;
  auth: boolean;
}) {
  return (
    <Layout title="Buckets" auth={props.auth}>
      <h1>Buckets</h1>
      <p class="muted">
        {props.total} bucket(s). Sparkline: requests stored (blue) against deliveries (green, dashed) over the last hour, in 5-minute steps.
      </p>
      {props.rows.length === 0 ? (
        <p>
          No buckets here. Create one with <code>hookbucket bucket create NAME --destination URL</code>.
        </p>
      ) : (
        <div class="scroll">
          <table class="buckets">
            <thead>
              <tr>
                <th>Bucket</th>
                <th>Destination</th>
                <th>Paused</th>
                {STATE_COLUMNS.map((s) => (
                  <th class="num">{s}</th>
                ))}
                <th>Oldest waiting</th>
                <th>Last hour</th>
              </tr>
            </thead>
            <tbody>
              {props.rows.map((r) => (
                <tr>
                  <td>
                    <a href={`/buckets/${encodeURIComponent(r.bucket.name)}`}>{r.bucket.name}</a>
                    {r.bucket.deletingAt !== null ? <span class="tag">deleting</span> : null}
                  </td>
                  <td class="url">
                    {r.bucket.destination === null ? <span class="muted">none</span> : inline(redactUrl(r.bucket.destination))}
                  </td>
                  <td>{r.bucket.paused ? <span class="tag paused">paused</span> : 'no'}</td>
                  {STATE_COLUMNS.map((s) => (
                    <td class="num">{r.counts.states[s] ?? 0}</td>
                  ))}
                  <td>{r.oldestWaitingAt === null ? <span class="muted">none</span> : age(props.nowMs - r.oldestWaitingAt)}</td>
                  <td>
                    <Sparkline series={r.series} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <p class="pager">
        {props.first ? null : <a href="/">First page</a>}
        {props.next === null ? null : <a href={`/?after=${encodeURIComponent(props.next)}`}>Next page</a>}
      </p>
    </Layout>
  );
}
