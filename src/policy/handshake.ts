/**
 * URL handshakes: the requests a provider sends to prove a URL before it delivers to it, answered
 * inline by the bucket. Pure: this module recognises a handshake and checks its token; the edge
 * checks signatures and secrets (in constant time) and computes the HMACs that Zoom and X ask for.
 *
 * - `slack`: a signed POST `{"type":"url_verification","challenge":…}`; answered with the challenge.
 * - `meta`: `GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…`; the challenge, when the
 *   verify token matches, else 403.
 * - `graph` (Microsoft Graph): a POST `?validationToken=…` with an empty body; the URL-decoded token.
 * - `zoom`: a signed POST `{"event":"endpoint.url_validation","payload":{"plainToken":…}}`; answered
 *   `{plainToken, encryptedToken}`, the hex HMAC-SHA256 of plainToken.
 * - `dropbox`: `GET ?challenge=…`; the challenge, as text/plain with nosniff.
 * - `twitter` (X CRC): `GET ?crc_token=…`; `{"response_token":"sha256=<base64 HMAC>"}`.
 *
 * Tokens that are echoed or signed must match `[A-Za-z0-9_-]{1,256}`; Graph's URL-decoded token is
 * printable ASCII, `[\x20-\x7e]{1,1024}` (space included: Graph's tokens are sentences such as
 * "Validation: Testing client application reachability…"). Anything else is a 400, so a handshake can never reflect content, and the
 * X CRC (whose HMAC uses the key and encoding of the body signature) can never sign a payload for
 * a caller.
 */

export const HANDSHAKES = ['slack', 'meta', 'graph', 'zoom', 'dropbox', 'twitter'] as const;
export type HandshakeName = (typeof HANDSHAKES)[number];

/** The handshake a verify scheme brings with it; Graph has no HMAC, so it is only ever named. */
export function handshakeOfScheme(scheme: string): HandshakeName | null {
  switch (scheme) {
    case 'slack':
    case 'meta':
    case 'zoom':
    case 'dropbox':
    case 'twitter':
      return scheme;
    default:
      return null;
  }
}

const TOKEN = /^[A-Za-z0-9_-]{1,256}$/;
const GRAPH_TOKEN = /^[\x20-\x7e]{1,1024}$/;
/** Handshake bodies are small; a larger body is a delivery, never parsed here. */
export const HANDSHAKE_MAX_BODY = 16 * 1024;

export function validToken(name: HandshakeName, token: string): boolean {
  return name === 'graph' ? GRAPH_TOKEN.test(token) : TOKEN.test(token);
}

/**
 * A recognised handshake:
 * - `needs`: what the edge must establish before answering: a verified signature (`signature`),
 *   a matching `--verify-token` (`verify_token`, the value given here), or nothing;
 * - `answer`: what to send once it holds. `hmac` answers (Zoom, X) carry the token the edge signs.
 */
export type Handshake =
  | { name: HandshakeName; kind: 'echo'; token: string; needs: 'signature' | 'none'; nosniff: boolean }
  | { name: 'meta'; kind: 'echo'; token: string; needs: 'verify_token'; verifyToken: string; nosniff: false }
  | { name: 'zoom' | 'twitter'; kind: 'hmac'; token: string; needs: 'signature' | 'none' }
  | { name: HandshakeName; kind: 'bad_token'; reason: string };

export interface HandshakeRequest {
  method: string;
  /** The raw query string, without `?`. */
  query: string;
  /** The body, when the request is a POST small enough to look at (≤ HANDSHAKE_MAX_BODY); else null. */
  body: Uint8Array | null;
}

function jsonObject(body: Uint8Array | null): Record<string, unknown> | null {
  if (body === null || body.length === 0 || body.length > HANDSHAKE_MAX_BODY) return null;
  try {
    const v: unknown = JSON.parse(Buffer.from(body).toString('utf8'));
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** One query parameter's decoded value, or null when absent or given more than once. */
function single(params: URLSearchParams, key: string): string | null {
  const all = params.getAll(key);
  return all.length === 1 ? all[0]! : null;
}

/**
 * Whether this request is a handshake of one of the enabled kinds. Null means it is not: it is
 * stored and delivered like any other request.
 */
export function detectHandshake(enabled: readonly HandshakeName[], req: HandshakeRequest): Handshake | null {
  const method = req.method.toUpperCase();
  const params = new URLSearchParams(req.query);
  const bad = (name: HandshakeName): Handshake => ({ name, kind: 'bad_token', reason: 'handshake_token_invalid' });
  for (const name of enabled) {
    switch (name) {
      case 'slack': {
        if (method !== 'POST') break;
        const j = jsonObject(req.body);
        if (j === null || j.type !== 'url_verification') break;
        const token = j.challenge;
        if (typeof token !== 'string' || !validToken(name, token)) return bad(name);
        return { name, kind: 'echo', token, needs: 'signature', nosniff: true };
      }
      case 'meta': {
        if (method !== 'GET' || single(params, 'hub.mode') !== 'subscribe') break;
        const token = single(params, 'hub.challenge');
        const verifyToken = single(params, 'hub.verify_token');
        if (token === null || !validToken(name, token) || verifyToken === null) return bad(name);
        return { name, kind: 'echo', token, needs: 'verify_token', verifyToken, nosniff: false };
      }
      case 'graph': {
        if (method !== 'POST' || !params.has('validationToken')) break;
        if (req.body !== null && req.body.length > 0) break;
        const token = single(params, 'validationToken');
        if (token === null || !validToken(name, token)) return bad(name);
        return { name, kind: 'echo', token, needs: 'none', nosniff: true };
      }
      case 'zoom': {
        if (method !== 'POST') break;
        const j = jsonObject(req.body);
        if (j === null || j.event !== 'endpoint.url_validation') break;
        const payload = j.payload;
        const token = typeof payload === 'object' && payload !== null ? (payload as Record<string, unknown>).plainToken : undefined;
        if (typeof token !== 'string' || !validToken(name, token)) return bad(name);
        return { name, kind: 'hmac', token, needs: 'signature' };
      }
      case 'dropbox': {
        if (method !== 'GET' || !params.has('challenge')) break;
        const token = single(params, 'challenge');
        if (token === null || !validToken(name, token)) return bad(name);
        return { name, kind: 'echo', token, needs: 'none', nosniff: true };
      }
      case 'twitter': {
        if (method !== 'GET' || !params.has('crc_token')) break;
        const token = single(params, 'crc_token');
        if (token === null || !validToken(name, token)) return bad(name);
        return { name, kind: 'hmac', token, needs: 'none' };
      }
    }
  }
  return null;
}

/** The answer body once the edge has the HMAC (Zoom: hex; X: base64) for an `hmac` handshake. */
export function hmacAnswer(name: 'zoom' | 'twitter', token: string, mac: Buffer): { contentType: string; body: string } {
  if (name === 'zoom')
    return { contentType: 'application/json', body: JSON.stringify({ plainToken: token, encryptedToken: mac.toString('hex') }) };
  return { contentType: 'application/json', body: JSON.stringify({ response_token: `sha256=${mac.toString('base64')}` }) };
}
