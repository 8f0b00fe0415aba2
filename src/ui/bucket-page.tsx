import { bucketJson } from '../json/bucket-json.js';
import { describeSchedule } from '../options/drain-settings.js';
import { REQUEST_STATES } from '../options/request-filter.js';
import { redactHeaders, redactQuery, redactUrl } from '../policy/redact.js';
import { paperSchedule, type PaperSchedule } from '../policy/schedule.js';
import { formatDuration } from '../shared/format-duration.js';
import type { Bucket, BucketCounts, RequestPage } from '../store/store.js';
import { Layout } from './layout.js';
import { STATE_COLUMNS } from './overview.js';
import { inline, isoTime } from './text.js';

/** The `requests list` filters as the form's fields (GET parameters, same words as the CLI flags). */
export const FILTER_FIELDS = ['state', 'since', 'until', 'method', 'path', 'header', 'search', 'status'] as const;
export type FilterField = (typeof FILTER_FIELDS)[number];
export type FilterValues = Partial<Record<FilterField, string>>;

/** Schedule rows shown at most; the rest is summarised (a 1000-attempt schedule is a long table). */
const SCHEDULE_ROWS_SHOWN = 30;

export function filterQuery(values: FilterValues, extra: Record<string, string> = {}): string {
  const p = new URLSearchParams();
  for (const f of FILTER_FIELDS) if (values[f]) p.set(f, values[f]!);
  for (const [k, v] of Object.entries(extra)) p.set(k, v);
  const s = p.toString();
  return s ? `?${s}` : '';
}

function Field(props: { name: FilterField; label: string; value: string | undefined; placeholder: string; list?: string }) {
  return (
    <label>
      <span>{props.label}</span>
      <input
        type="text"
        name={props.name}
        value={props.value ?? ''}
        placeholder={props.placeholder}
        {...(props.list ? { list: props.list } : {})}
      />
    </label>
  );
}

function settingsRows(b: Bucket): Array<[string, string]> {
  const j = bucketJson(b);
  const rows: Array<[string, string]> = [];
  for (const [k, v] of Object.entries(j)) {
    if (k === 'schedule' || k === 'name') continue;
    let text: string;
    if (k === 'destination') text = v === null ? 'none' : redactUrl(String(v));
    else if (k === 'forward_headers')
      text =
        redactHeaders(v as Array<[string, string]>)
          .map(([n, hv]) => `${n}: ${hv}`)
          .join('; ') || 'none';
    else if (v === null) text = 'none';
    else if (typeof v === 'object') text = JSON.stringify(v);
    else text = String(v);
    rows.push([k, inline(text)]);
  }
  return rows;
}

function ScheduleTable(props: { bucket: Bucket }) {
  const s = props.bucket.drain.schedule;
  let paper: PaperSchedule;
  try {
    paper = paperSchedule(s);
  } catch (e) {
    return <p class="error">{`schedule: ${(e as Error).message}`}</p>;
  }
  const shown = paper.rows.slice(0, SCHEDULE_ROWS_SHOWN);
  const last = paper.rows[paper.rows.length - 1]!;
  return (
    <>
      <p>{`schedule: ${describeSchedule(s)}`}</p>
      <table class="schedule">
        <thead>
          <tr>
            <th class="num">Attempt</th>
            <th>Gap before</th>
            <th>Elapsed</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((r) => (
            <tr>
              <td class="num">{r.attempt}</td>
              <td>{r.gapMs === null ? '' : formatDuration(r.gapMs)}</td>
              <td>{r.elapsedMs === 0 ? '0s' : formatDuration(r.elapsedMs)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {paper.rows.length > shown.length ? (
        <p class="muted">{`… ${paper.rows.length - shown.length} more attempts, the last (#${last.attempt}) at ${formatDuration(last.elapsedMs)}`}</p>
      ) : null}
      <p>
        {`Gives up on paper ${paper.giveUpMs === 0 ? '0s' : formatDuration(paper.giveUpMs)} after the first attempt (before jitter ${s.jitter}); time paused is not counted; a Retry-After can stretch a gap up to the cap.`}
      </p>
    </>
  );
}

export interface BucketPageProps {
  bucket: Bucket;
  counts: BucketCounts;
  values: FilterValues;
  page: RequestPage | null;
  /** Why the filter was refused (the form is shown again with it). */
  filterError: string | null;
  before: string | null;
  auth: boolean;
}

export function BucketPage(props: BucketPageProps) {
  const { bucket: b, counts, values } = props;
  const name = b.name;
  const filtered = FILTER_FIELDS.some((f) => values[f]);
  return (
    <Layout title={name} auth={props.auth}>
      <h1>
        Bucket <span class="name">{name}</span> {b.paused ? <span class="tag paused">paused</span> : null}
        {b.deletingAt !== null ? <span class="tag">deleting</span> : null}
      </h1>
      <section class="controls" data-bucket={name}>
        <p>
          Destination: <span class="url">{b.destination === null ? 'none' : inline(redactUrl(b.destination))}</span>
        </p>
        <p>
          {STATE_COLUMNS.filter((s) => (counts.states[s] ?? 0) > 0).map((s) => (
            <span class="count">{`${s} ${counts.states[s]}`}</span>
          ))}
          <span class="count">{`${counts.requests} request(s)`}</span>
        </p>
        <p class="needs-js">
          <button type="button" class="js-pause" data-action="pause" disabled={b.paused}>
            Pause
          </button>{' '}
          <button type="button" class="js-pause" data-action="resume" disabled={!b.paused}>
            Resume
          </button>{' '}
          <span class="js-pause-status" role="status"></span>
        </p>
        <noscript>
          <p class="muted">{`Pause and resume need JavaScript here; from a shell: hookbucket bucket pause ${name}`}</p>
        </noscript>
      </section>

      <section>
        <h2>Requests</h2>
        <form method="get" action={`/buckets/${encodeURIComponent(name)}`} class="filters" id="filters">
          <Field name="state" label="State" value={values.state} placeholder="failed,exhausted" list="states" />
          <datalist id="states">
            {REQUEST_STATES.map((s) => (
              <option value={s} />
            ))}
          </datalist>
          <Field name="since" label="Since" value={values.since} placeholder="30m or 2026-12-01T10:00:00Z" />
          <Field name="until" label="Until" value={values.until} placeholder="5m or an ISO time" />
          <Field name="method" label="Method" value={values.method} placeholder="POST" />
          <Field name="path" label="Path glob" value={values.path} placeholder="/orders/**" />
          <Field name="header" label="Header" value={values.header} placeholder="X-GitHub-Event=push" />
          <Field name="search" label="Body contains" value={values.search} placeholder="cus_123 (scans bodies)" />
          <Field name="status" label="Last status" value={values.status} placeholder="503 or 5xx" />
          <p class="actions">
            <button type="submit">Filter</button> {filtered ? <a href={`/buckets/${encodeURIComponent(name)}`}>Clear</a> : null}
          </p>
        </form>
        {props.filterError !== null ? <p class="error">{props.filterError}</p> : null}

        <div class="live needs-js" data-bucket={name} hidden>
          <h3>
            Live: new requests <span class="js-live-status muted"></span>
          </h3>
          <p class="muted">Every request stored in this bucket from now on, whatever the filter.</p>
          <ul class="js-live-list"></ul>
        </div>

        {props.page === null ? null : props.page.requests.length === 0 ? (
          <p>No requests match.</p>
        ) : (
          <div class="scroll">
            <table class="requests">
              <thead>
                <tr>
                  <th>Received</th>
                  <th>Method</th>
                  <th>Path</th>
                  <th class="num">Size</th>
                  <th>State</th>
                  <th class="num">Attempts</th>
                  <th class="num">Last status</th>
                </tr>
              </thead>
              <tbody>
                {props.page.requests.map((r) => (
                  <tr>
                    <td>
                      <a href={`/requests/${r.id}`}>{isoTime(r.receivedAt)}</a>
                    </td>
                    <td>{inline(r.method)}</td>
                    <td class="path">{inline(r.path + (r.query === null ? '' : `?${redactQuery(r.query)}`))}</td>
                    <td class="num">{r.size}</td>
                    <td>{r.state}</td>
                    <td class="num">{r.attempts}</td>
                    <td class="num">{r.lastStatus ?? ''}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
        <p class="pager">
          {props.before !== null ? <a href={`/buckets/${encodeURIComponent(name)}${filterQuery(values)}`}>Newest</a> : null}
          {props.page?.nextCursor ? (
            <a href={`/buckets/${encodeURIComponent(name)}${filterQuery(values, { before: props.page.nextCursor })}`}>Older</a>
          ) : null}
        </p>
      </section>

      <section class="replay needs-js" data-bucket={name} data-selection={JSON.stringify(values)}>
        <h2>Replay</h2>
        <p>
          Sends the requests the filter above selects again, as a new generation.{' '}
          {filtered ? 'The selection is the filter as applied.' : 'No filter is applied: the selection is every request of the bucket.'}
        </p>
        <form class="replay-form" id="replay-form">
          <label>
            <span>To (--to, optional)</span>
            <input type="url" name="to" placeholder="https://staging.example.com/hooks" />
          </label>
          <label>
            <span>Rate (--rate, optional)</span>
            <input type="text" name="rate" placeholder="10/s" />
          </label>
          <p class="actions">
            <button type="button" class="js-replay-count">
              Count (dry run)
            </button>{' '}
            <button type="button" class="js-replay-confirm" hidden>
              Replay
            </button>
          </p>
          <p class="js-replay-status wide" role="status"></p>
          <p class="wide">
            <progress class="js-replay-progress" max="1" value="0" hidden></progress> <span class="js-replay-progress-text"></span>
          </p>
        </form>
        <noscript>
          <p class="muted">{`Replay from the page needs JavaScript; from a shell: hookbucket replay ${name} --dry-run`}</p>
        </noscript>
      </section>

      <section>
        <h2>Settings</h2>
        <table class="settings">
          <tbody>
            {settingsRows(b).map(([k, v]) => (
              <tr>
                <th>{k}</th>
                <td>{v}</td>
              </tr>
            ))}
          </tbody>
        </table>
        <h3>Retry schedule</h3>
        <ScheduleTable bucket={b} />
      </section>
    </Layout>
  );
}
