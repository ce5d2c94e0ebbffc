// @ts-check
// ICE servers from the server's `welcome` (docs/PROTOCOL.md, "ICE servers"): checked here and
// turned into RTCConfiguration entries. The server checked every URL at start
// (daisychain/server/ice.py, RFC 7064/7065); this is the browser's shape check of what arrived,
// so a malformed welcome is a SignalingError with a hint rather than an exception from the
// RTCPeerConnection constructor when the first peer is met.

export const MAX_ICE_SERVERS = 8;
export const MAX_ICE_URL_CHARS = 256;
export const MAX_ICE_CREDENTIAL_CHARS = 256;
/** @type {readonly ('all' | 'relay')[]} */
export const ICE_POLICIES = Object.freeze(['all', 'relay']);

// stun:HOST[:PORT] | turn:HOST[:PORT][?transport=udp|tcp] | turns:HOST[:PORT][?transport=tcp]
const ICE_URL_RE = /^(stun|turn|turns):(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::([0-9]{1,5}))?(?:\?transport=(udp|tcp))?$/;

/**
 * Whether `url` is a STUN/TURN URL of the forms the server accepts.
 * @param {unknown} url
 */
export function isIceUrl(url) {
  if (typeof url !== 'string' || url.length > MAX_ICE_URL_CHARS) return false;
  const m = ICE_URL_RE.exec(url);
  if (m === null) return false;
  const [, scheme, , port, transport] = m;
  if (port !== undefined && !(Number(port) >= 1 && Number(port) <= 65535)) return false;
  if (scheme === 'stun' && transport !== undefined) return false;
  return !(scheme === 'turns' && transport === 'udp');
}

/**
 * `welcome.ice_servers` (absent: none) as RTCIceServer objects: `urls`, and `username` and
 * `credential` only when given (WebIDL would turn a null into the string "null").
 * `fail(where, expected)` throws the caller's error.
 * @param {any} value  as the server sent it (anything): checked here
 * @param {(where: string, expected: string) => void} fail  throws
 * @returns {RTCIceServer[]}
 */
export function iceServersFrom(value, fail) {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.length > MAX_ICE_SERVERS) {
    fail('welcome.ice_servers', `a list of at most ${MAX_ICE_SERVERS} ICE servers`);
  }
  return value.map((/** @type {any} */ s) => {
    const where = 'welcome.ice_servers[]';
    if (s === null || typeof s !== 'object' || Array.isArray(s)) fail(where, 'an ICE server {urls, username, credential}');
    if (!Array.isArray(s.urls) || s.urls.length < 1 || s.urls.length > MAX_ICE_SERVERS || !s.urls.every(isIceUrl)) {
      fail(`${where}.urls`, `a list of 1-${MAX_ICE_SERVERS} STUN/TURN URLs`);
    }
    /** @type {{urls: string[], username?: string, credential?: string}} */
    const out = { urls: [...s.urls] };
    for (const name of /** @type {const} */ (['username', 'credential'])) {
      if (s[name] === undefined || s[name] === null) continue;
      if (typeof s[name] !== 'string' || s[name].length > MAX_ICE_CREDENTIAL_CHARS) {
        fail(`${where}.${name}`, `a string of at most ${MAX_ICE_CREDENTIAL_CHARS} characters or null`);
      }
      out[name] = s[name];
    }
    return Object.freeze(out);
  });
}

/**
 * Whether any of `servers` (RTCIceServer objects) is a TURN server: relay needs one.
 * @param {readonly RTCIceServer[]} servers
 */
export function hasTurn(servers) {
  return servers.some((s) => /** @type {string[]} */ ([]).concat(s.urls).some((u) => /^turns?:/.test(u)));
}
