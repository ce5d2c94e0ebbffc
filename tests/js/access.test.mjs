// What the page tells about reaching this server (static/js/page/access.js): the address to hand
// to another device (this page's own, or the server's LAN address for a page at 127.0.0.1; a
// room's link carries only the room), what a plain-http page lacks and the https address of the
// same page when the server offers one, and the server's facts read defensively. The page
// itself over http and https at a network address: tests/page/test_page_lan.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isLoopbackHost, shareAddress, insecureNotice, fetchAccess } from '../../static/js/page/access.js';
import { backendLines } from '../../static/js/page/readiness.js';

const at = (href) => new URL(href);
const FP = 'SHA256:AB:CD';
const HTTPS = { secure: true, https: { port: 8787, fingerprint: FP, selfSigned: true }, lan: ['https://192.168.1.5:8787/'] };
const CA = { ...HTTPS, https: { ...HTTPS.https, selfSigned: false } };
const PLAIN = { secure: false, https: null, lan: ['http://192.168.1.5:8787/'] };

test('loopback hosts are the ones only this machine can open', () => {
  for (const host of ['localhost', '127.0.0.1', '127.1.2.3', '[::1]', 'LOCALHOST']) assert.ok(isLoopbackHost(host), host);
  for (const host of ['192.168.1.5', '10.231.0.1', 'myhost.local', 'example.org', '[fd00::2]', '128.0.0.1']) {
    assert.ok(!isLoopbackHost(host), host);
  }
});

test('a page at a network address shares its own origin, with only the room in the query', () => {
  const loc = at('https://192.168.1.5:8787/?name=phone&backend=js-cpu&room=abc#x');
  assert.deepEqual(shareAddress(CA, loc, null), { url: 'https://192.168.1.5:8787/', secure: true, note: '' });
  // A self-signed certificate: the other device will be asked about it once.
  assert.match(shareAddress(HTTPS, loc, null).note, /fingerprint SHA256:AB:CD, then accept/);
  const room = shareAddress(HTTPS, loc, 'a b&c');
  assert.equal(room.url, 'https://192.168.1.5:8787/?room=a%20b%26c');
  assert.equal(new URL(room.url).searchParams.get('room'), 'a b&c');
});

test('a page at 127.0.0.1 shares the server\'s LAN address, https first, with the fingerprint to check', () => {
  const loc = at('http://127.0.0.1:8787/?name=host');
  const address = shareAddress(HTTPS, loc, 'CODE');
  assert.equal(address.url, 'https://192.168.1.5:8787/?room=CODE');
  assert.equal(address.secure, true);
  assert.match(address.note, /SHA-256 fingerprint SHA256:AB:CD/);
  assert.equal(shareAddress(CA, loc, 'CODE').note, ''); // a CA's certificate: nothing to check
  const plain = shareAddress(PLAIN, loc, null);
  assert.equal(plain.url, 'http://192.168.1.5:8787/');
  assert.equal(plain.secure, false);
  assert.match(plain.note, /CPU only.*--https/);
});

test('a server listening on this machine only: its own address (other tabs here), and how to serve the network', () => {
  const address = shareAddress({ secure: false, https: null, lan: [] }, at('http://localhost:8787/?name=x'), 'R');
  assert.equal(address.url, 'http://localhost:8787/?room=R');
  assert.match(address.note, /this machine only.*--host 0\.0\.0\.0 --https/);
  // Before the server's facts arrive (or from an older server): the own address, no verdict.
  assert.deepEqual(shareAddress(null, at('http://127.0.0.1:8787/'), null),
    { url: 'http://127.0.0.1:8787/', secure: true, note: '' });
});

test('a plain-http page at a network address warns what the other device lacks', () => {
  const loc = at('http://10.0.0.2:8787/');
  assert.match(shareAddress({ ...PLAIN, lan: [] }, loc, null).note, /start the server with --https/);
  assert.match(shareAddress({ secure: false, https: { port: 8443, fingerprint: FP }, lan: [] }, loc, null).note,
    /https address gives it WebGPU/);
});

test('in a secure context nothing is lacking', () => {
  assert.equal(insecureNotice(HTTPS, at('https://192.168.1.5:8787/'), true), null);
});

test('over plain http the notice names what is withheld and the https address of this very page', () => {
  const loc = at('http://10.231.0.1:8080/?room=R&name=n');
  const notice = insecureNotice({ secure: false, https: { port: 8443, fingerprint: FP, selfSigned: true }, lan: [] },
    loc, false);
  assert.equal(notice.url, 'https://10.231.0.1:8443/?room=R&name=n');
  assert.ok(notice.lacks.some((l) => /WebGPU/.test(l)) && notice.lacks.some((l) => /saves/.test(l)));
  assert.match(notice.check, /SHA256:AB:CD/);
  const ca = insecureNotice({ secure: false, https: { port: 8443, fingerprint: FP, selfSigned: false }, lan: [] },
    loc, false);
  assert.equal(ca.check, ''); // a CA's certificate: the browser asks nothing
  const none = insecureNotice({ secure: false, https: null, lan: [] }, loc, false);
  assert.equal(none.url, null);
  assert.match(none.how, /--https/);
  assert.equal(insecureNotice(null, loc, false).url, null); // an older server says nothing
});

test('the server\'s facts are read defensively: junk is dropped, a failure is null', async () => {
  const answer = (status, body) => async () => new Response(JSON.stringify(body), { status });
  const wire = (a) => ({ ...a, https: { port: a.https.port, fingerprint: a.https.fingerprint, self_signed: a.https.selfSigned } });
  assert.deepEqual(await fetchAccess(answer(200, { access: wire(HTTPS) })), HTTPS);
  assert.deepEqual(await fetchAccess(answer(200, { access: wire(CA) })), CA);
  assert.deepEqual(await fetchAccess(answer(200, {
    access: { secure: 'yes', https: { port: '8443' }, lan: ['javascript:alert(1)', 7, 'http://a:1/'] },
  })), { secure: false, https: null, lan: ['http://a:1/'] });
  assert.equal(await fetchAccess(answer(200, { protocol: 1 })), null); // an older server
  assert.equal(await fetchAccess(answer(503, { access: HTTPS })), null);
  assert.equal(await fetchAccess(async () => { throw new TypeError('offline'); }), null);
  assert.equal(await fetchAccess(async () => new Response('not json')), null);
});

test('readiness: no WebGPU over plain http is said as such, not as a browser without it', () => {
  const selection = { backend: 'js-cpu', rows: [
    { name: 'webgpu-dp4a', adapter: 'none', gates_passed: false, failure: 'no navigator.gpu' },
    { name: 'js-cpu', adapter: 'cpu', gates_passed: true, failure: null },
  ] };
  assert.match(backendLines(selection, false)[0][1], /only over https/);
  assert.match(backendLines(selection, true)[0][1], /no WebGPU on this browser/);
});
