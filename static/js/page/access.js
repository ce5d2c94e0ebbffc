// How other devices reach this server, and what this page lacks when it is not a secure context
// (docs/USAGE.md "On your LAN"). The facts come from the server (`/api/status` field `access`,
// server/daisychain/server/access.py): whether it serves https, on which port and with which
// certificate, and, to a page on the server's own machine only, the addresses other devices
// can open. The functions below are pure (the location and the facts come in), so node tests
// cover every case (tests/js/page.test.mjs).
//
// Over plain http at an address other than this machine's own (a phone opening
// http://192.168.1.5:8787/) the browser withholds Web Crypto, WebGPU, the origin-private file
// system and cross-origin isolation. The page still trains there: it hashes with its own
// SHA-256 (numerics/sha256.js), computes on the JavaScript CPU tier, and says what it lacks.

const LOOPBACK = /^(localhost|127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\])$/i;

/** True for a host name only this machine can open (127.0.0.0/8, ::1, localhost). */
export function isLoopbackHost(hostname) {
  return LOOPBACK.test(hostname);
}

/** The server's `access` facts ({secure, https: {port, fingerprint, selfSigned} | null,
 * lan: [url]}), or null when the server does not say (an older server, or the request failed). */
export async function fetchAccess(fetchFn = (...a) => globalThis.fetch(...a)) {
  try {
    const response = await fetchFn('/api/status', { cache: 'no-store' });
    if (!response.ok) return null;
    const access = (await response.json())?.access;
    if (access === null || typeof access !== 'object') return null;
    return {
      secure: access.secure === true,
      https: Number.isInteger(access.https?.port)
        ? { port: access.https.port, fingerprint: String(access.https.fingerprint ?? '') || null,
          selfSigned: access.https.self_signed !== false } : null,
      lan: Array.isArray(access.lan) ? access.lan.filter((u) => typeof u === 'string' && /^https?:\/\//.test(u)) : [],
    };
  } catch {
    return null;
  }
}

/** `url` (a string) with the query `room=CODE` only: a name or a backend in this page's own
 * address is this device's, not the other device's. */
function withRoom(url, room) {
  const u = new URL(url);
  u.pathname = '/';
  u.search = room === null ? '' : `?room=${encodeURIComponent(room)}`;
  u.hash = '';
  return u.href;
}

/**
 * The address another device should open to join this page's group (or room `room`), as
 * {url, secure, note}: this page's own origin when another device can open it, else (a page at
 * 127.0.0.1 on the server's machine) the server's first LAN address, https first. A server that
 * listens on this machine only has no such address: then url is this page's own (it still
 * serves other tabs and browsers on this machine) and the note says how to serve the network.
 * `secure` says whether the other device gets a secure context there; `note` says what to
 * know, or ''.
 */
export function shareAddress(access, loc, room = null) {
  if (!isLoopbackHost(loc.hostname)) {
    const secure = loc.protocol === 'https:';
    return { url: withRoom(loc.origin, room), secure, note: secure ? certificateNote(access) : plainNote(access) };
  }
  const lan = access?.lan ?? [];
  if (lan.length === 0) {
    return { url: withRoom(loc.origin, room), secure: true,
      note: access === null ? '' : 'This server listens on this machine only: other devices cannot reach ' +
        'this address. Restart it with --host 0.0.0.0 --https to serve your network (docs/USAGE.md, On your LAN).' };
  }
  const url = withRoom(lan[0], room);
  const secure = url.startsWith('https:');
  return { url, secure, note: secure ? certificateNote(access) : plainNote(access) };
}

function certificateNote(access) {
  const fp = access?.https?.selfSigned ? access.https.fingerprint : null;
  return fp ? `The first visit warns about the server's own certificate: check that it shows the ` +
    `SHA-256 fingerprint ${fp}, then accept it.` : '';
}

function plainNote(access) {
  return access?.https
    ? 'Over plain http the other device trains on its CPU only; the https address gives it WebGPU and saves.'
    : 'Over plain http the other device trains on its CPU only (no WebGPU, no saves in the browser): ' +
      'start the server with --https to give it everything.';
}

/**
 * What this page lacks and how to get it, or null in a secure context: {lacks, how, url, check}
 * where `lacks` lists what the browser withholds, `how` is a sentence, `url` the https address
 * of this very page when the server offers one (else null), and `check` what to compare when
 * the browser asks about a self-signed certificate ('' otherwise).
 */
export function insecureNotice(access, loc, secureContext) {
  if (secureContext) return null;
  const lacks = ['WebGPU (it trains on its CPU)', 'saves in the browser', 'Web Crypto (it hashes in JavaScript)'];
  if (access?.https) {
    const url = `https://${loc.hostname}:${access.https.port}${loc.pathname}${loc.search}`;
    return { lacks, url, how: 'For everything, open the https address:', check: certificateNote(access) };
  }
  return { lacks, url: null, check: '',
    how: 'This server serves plain http only: whoever runs it can restart it with --https, then open ' +
      'the https:// address it prints (docs/USAGE.md, On your LAN).' };
}
