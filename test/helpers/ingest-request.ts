import { type RawResponse, rawRequest } from './raw-http.js';

/** One HTTP/1.1 request with exact bytes: the raw headers as given, Content-Length framing, Connection: close. */
export function requestBytes(method: string, target: string, headers: readonly string[], body: Buffer | string = ''): Buffer {
  const b = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const lines = [`${method} ${target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close'];
  for (let i = 0; i + 1 < headers.length; i += 2) lines.push(`${headers[i]}: ${headers[i + 1]}`);
  if (b.length > 0 || method === 'POST' || method === 'PUT') lines.push(`Content-Length: ${b.length}`);
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), b]);
}

export interface IngestAnswer extends RawResponse {
  /** The parsed JSON body, when it is JSON. */
  json: Record<string, unknown> | undefined;
  text: string;
}

export async function send(
  url: string,
  method: string,
  target: string,
  headers: readonly string[] = [],
  body: Buffer | string = '',
): Promise<IngestAnswer> {
  const res = await rawRequest(url, requestBytes(method, target, headers, body));
  const text = res.body.toString('utf8');
  let json: Record<string, unknown> | undefined;
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    json = undefined;
  }
  return { ...res, json, text };
}
