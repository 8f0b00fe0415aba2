import { ago, nextText, outcomeText } from '../policy/attempt-text.js';
import { headerPairs, isUtf8 } from '../json/request-json.js';
import { redactHeaders, redactJson, redactQuery, redactUrl } from '../policy/redact.js';
import type { DeliveryHistory, StoredRequest } from '../store/store.js';
import { Layout } from './layout.js';
import { age, block, bytesText, hexDump, inline, isoTime, jsonText } from './text.js';

/** Body bytes shown in the page at most (hex, base64, text); the download has all of them. */
export const BODY_SHOWN_BYTES = 64 * 1024; // 64 KiB
/** Response excerpt characters shown per attempt (the store keeps 4 KiB). */
const RESPONSE_SHOWN_CHARS = 500;

type BodyView = { kind: 'json' | 'form' | 'text'; text: string } | { kind: 'binary' } | { kind: 'empty' };

function contentType(pairs: ReadonlyArray<[string, string]>): string {
  return pairs.find(([n]) => n.toLowerCase() === 'content-type')?.[1] ?? '';
}

/** The body as people read it: JSON pretty-printed, a form or text as is, each with secrets hidden unless revealed. */
export function bodyView(body: Buffer, type: string, reveal: boolean): BodyView {
  if (body.length === 0) return { kind: 'empty' };
  if (!isUtf8(body)) return { kind: 'binary' };
  const shown = body.length > BODY_SHOWN_BYTES ? body.subarray(0, BODY_SHOWN_BYTES).toString('utf8') : body.toString('utf8');
  if (body.length <= BODY_SHOWN_BYTES) {
    try {
      const parsed: unknown = JSON.parse(shown);
      if (parsed !== null && typeof parsed === 'object')
        return { kind: 'json', text: jsonText(JSON.stringify(reveal ? parsed : redactJson(parsed), null, 2)) };
    } catch {
      // not JSON: shown as text below
    }
  }
  if (/^application\/x-www-form-urlencoded\b/i.test(type.trim()))
    return { kind: 'form', text: block(reveal ? shown : redactQuery(shown, 'form')) };
  return { kind: 'text', text: block(shown) };
}

function Timeline(props: { history: DeliveryHistory[]; destination: string | null; reveal: boolean; nowMs: number }) {
  if (props.history.length === 0) return <p>No deliveries: the bucket had no destination when this request arrived.</p>;
  return (
    <ol class="timeline">
      {props.history.map((d) => {
        const url = d.destination ?? props.destination;
        const to = url === null ? '(bucket destination, none set)' : inline(props.reveal ? url : redactUrl(url));
        const from = d.trigger === 'replay' ? `replay ${d.replayId}` : 'on arrival';
        let prev: number | undefined;
        return (
          <li class="generation" data-generation={String(d.generation)}>
            <h3>{`Generation ${d.generation}: ${d.state}, ${d.attempts} attempt(s)`}</h3>
            <p>
              {`→ ${to} (${from})`}
              {d.latest ? null : <span class="tag">{d.destination === null ? 'earlier generation' : 'replay --to'}</span>}
              {d.supersedeRequested && d.state === 'delivering' ? <span class="tag">to be superseded after this attempt</span> : null}
            </p>
            {d.deferrals > 0 ? <p>{`Held back ${d.deferrals} time(s), last by ${d.lastDeferralReason ?? 'unknown'}`}</p> : null}
            {d.state === 'pending' || d.state === 'retrying' ? (
              <p>{`Next attempt ${isoTime(d.nextAttemptAt)} (${d.nextAttemptAt > props.nowMs ? `in ${age(d.nextAttemptAt - props.nowMs)}` : 'due now'})`}</p>
            ) : null}
            {d.attemptLog.length === 0 ? null : (
              <div class="scroll">
                <table class="attempts">
                  <thead>
                    <tr>
                      <th class="num">#</th>
                      <th>Started</th>
                      <th>Outcome</th>
                      <th class="num">Duration</th>
                      <th>Error</th>
                      <th>Response</th>
                      <th>Next</th>
                    </tr>
                  </thead>
                  <tbody>
                    {d.attemptLog.map((a) => {
                      const gap = prev === undefined ? '' : ` (+${ago(a.startedAt - prev)})`;
                      prev = a.startedAt;
                      const body = a.responseBody;
                      let excerpt = '';
                      if (body && body.length > 0) {
                        const text = isUtf8(body) ? block(body.toString('utf8')) : bytesText(body);
                        excerpt = text.length > RESPONSE_SHOWN_CHARS ? `${text.slice(0, RESPONSE_SHOWN_CHARS)}…` : text;
                        if (a.responseTruncated) excerpt += ' (first 4 KiB kept)';
                      }
                      return (
                        <tr class="attempt">
                          <td class="num">{a.number}</td>
                          <td>{`${isoTime(a.startedAt)}${gap}`}</td>
                          <td class="outcome">{outcomeText(a)}</td>
                          <td class="num">{a.durationMs === null ? '' : `${a.durationMs} ms`}</td>
                          <td>{[a.errorClass ?? '', a.errorMessage ? inline(a.errorMessage) : ''].filter(Boolean).join(': ')}</td>
                          <td>
                            <pre class="excerpt">{excerpt}</pre>
                          </td>
                          <td>{nextText(a)}</td>
                        </tr>
                      );
                    })}
                  </tbody>
                </table>
              </div>
            )}
          </li>
        );
      })}
    </ol>
  );
}

export function RequestPage(props: {
  request: StoredRequest;
  history: DeliveryHistory[];
  destination: string | null;
  reveal: boolean;
  nowMs: number;
  auth: boolean;
}) {
  const r = props.request;
  const pairs = headerPairs(r.rawHeaders);
  const shownHeaders = props.reveal ? pairs : redactHeaders(pairs);
  const type = contentType(pairs);
  const view = bodyView(r.body, type, props.reveal);
  const shownBytes = r.body.subarray(0, BODY_SHOWN_BYTES);
  const cut = r.body.length > BODY_SHOWN_BYTES ? ` (the first ${BODY_SHOWN_BYTES} of ${r.body.length} bytes; download for all)` : '';
  // Hex and base64 show the bytes as stored, secrets included: for a text body only when revealed.
  const rawViews = view.kind === 'binary' || props.reveal;
  const trailers = r.rawTrailers && r.rawTrailers.length > 0 ? headerPairs(r.rawTrailers) : [];
  const self = `/requests/${r.id}`;
  return (
    <Layout title={`Request ${r.id}`} auth={props.auth}>
      <h1>
        {inline(r.method)}{' '}
        <span class="path">{inline(r.path + (r.query === null ? '' : `?${props.reveal ? r.query : redactQuery(r.query)}`))}</span>
      </h1>
      <p>
        <a href={`/buckets/${encodeURIComponent(r.bucket)}`}>{`← bucket ${r.bucket}`}</a>
      </p>
      <table class="meta">
        <tbody>
          <tr>
            <th>Id</th>
            <td>{r.id}</td>
          </tr>
          <tr>
            <th>Received</th>
            <td>{`${isoTime(r.receivedAt)} (${age(props.nowMs - r.receivedAt)} ago)`}</td>
          </tr>
          <tr>
            <th>State</th>
            <td class="state">{r.state}</td>
          </tr>
          <tr>
            <th>Peer</th>
            <td>{r.peer === null ? '' : inline(r.peer)}</td>
          </tr>
          <tr>
            <th>Size</th>
            <td>{`${r.size} bytes, sha256 ${r.sha256}`}</td>
          </tr>
        </tbody>
      </table>
      <p class="reveal">
        {props.reveal ? (
          <>
            <strong>Credentials shown.</strong> <a href={self}>Hide them</a>
          </>
        ) : (
          <>
            Credentials are redacted.{' '}
            <a href={`${self}?reveal=1`} class="js-reveal">
              Reveal
            </a>
          </>
        )}
      </p>

      <h2>Headers</h2>
      <p class="muted">In the order received, names as sent.</p>
      <table class="headers">
        <tbody>
          <HeaderRows pairs={shownHeaders} />
        </tbody>
      </table>

      <h2>Body</h2>
      <p>
        <a href={`/api/requests/${r.id}/body`} download="">
          Download the raw body
        </a>{' '}
        <span class="muted">{`(${r.body.length} bytes, the exact bytes stored)`}</span>
      </p>
      {view.kind === 'empty' ? <p class="muted">Empty.</p> : null}
      {view.kind === 'json' || view.kind === 'text' || view.kind === 'form' ? (
        <>
          <p class="muted">{`${view.kind === 'json' ? 'JSON, pretty-printed' : view.kind === 'form' ? 'Form' : 'Text'}; control characters shown as escapes${cut}`}</p>
          <pre class="body" data-kind={view.kind}>
            {view.text}
          </pre>
        </>
      ) : null}
      {view.kind === 'binary' ? <p class="muted">{`Binary (not UTF-8)${cut}.`}</p> : null}
      {view.kind !== 'empty' && rawViews ? (
        <>
          <details open={view.kind === 'binary'}>
            <summary>Hex</summary>
            <pre class="hex">{hexDump(shownBytes)}</pre>
          </details>
          <details>
            <summary>Base64</summary>
            <pre class="base64">{shownBytes.toString('base64')}</pre>
          </details>
        </>
      ) : null}
      {view.kind !== 'empty' && !rawViews ? (
        <p class="muted">Hex and base64 views show the bytes as stored: reveal credentials to see them.</p>
      ) : null}

      {trailers.length > 0 ? (
        <>
          <h2>Trailers</h2>
          <table class="headers">
            <tbody>
              <HeaderRows pairs={props.reveal ? trailers : redactHeaders(trailers)} />
            </tbody>
          </table>
        </>
      ) : null}

      <h2>Deliveries</h2>
      <Timeline history={props.history} destination={props.destination} reveal={props.reveal} nowMs={props.nowMs} />
    </Layout>
  );
}

/** Header (or trailer) rows in the order given, names and values as escaped inline text. */
function HeaderRows(props: { pairs: ReadonlyArray<readonly [string, string]> }) {
  return (
    <>
      {props.pairs.map(([n, v]) => (
        <tr>
          <th>{inline(n)}</th>
          <td>{inline(v)}</td>
        </tr>
      ))}
    </>
  );
}
