// static/js/p2p/deviceinfo.js and the page's parseServer against
// tests/vectors/signaling/device.json (written by tests/signaling_vectors.py from the Python
// rules, server/daisychain/wire/deviceinfo.py): every hello name and device a host may be shown
// is accepted with the same name and summary, shown under the same name, or refused on the same
// field with the same words; and the JS-only traps (String.trim's white space, UTF-16 lengths,
// `$` before a newline) are among the cases.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { REPO } from './helpers.mjs';
import * as D from '../../static/js/p2p/deviceinfo.js';
import { SignalingError, parseServer } from '../../static/js/p2p/signaling.js';
import { BACKEND_CHOICES } from '../../static/js/train/messages.js';
import { CpuGemm, GpuGemm, KERNEL_NAMES } from '../../static/js/gpu/gemm.js';

const DOC = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'signaling', 'device.json'), 'utf-8'));
const SITES = [
  ['join-request.peer', (peer) => ({ type: 'join-request', peer, expires_in_s: 120 }), (m) => m.peer],
  ['peer-joined.peer', (peer) => ({ type: 'peer-joined', peer }), (m) => m.peer],
  ['welcome.members[]', (peer) => ({ type: 'welcome', version: 1, id: 'me', group: { kind: 'room', id: 'room-abc123' },
    role: 'host', host: 'me', members: [peer] }), (m) => m.members[0]],
];

test('the page knows the same backends, white space, blanks and limits as the Python rules', () => {
  assert.deepEqual([...D.BACKENDS], DOC.backends);
  assert.equal(D.SPACE, DOC.space);
  assert.equal(D.BLANKS, DOC.blanks);
  assert.equal(D.MAX_NAME_CHARS, DOC.max_name_chars);
  assert.equal(D.fallbackName(DOC.peer_id), DOC.fallback_name);
});

test('every backend the page can send is known', () => {
  // app.js sends the worker's chosen backend: a choice other than 'auto', which is the name of
  // a GPU kernel's GpuGemm or the CPU tier's CpuGemm (gpu/gemm.js).
  const nameOf = (cls, self) => Object.getOwnPropertyDescriptor(cls.prototype, 'name').get.call(self);
  const produced = [...Object.keys(KERNEL_NAMES).map((kind) => nameOf(GpuGemm, { kind })), nameOf(CpuGemm, {})];
  for (const name of [...BACKEND_CHOICES.filter((b) => b !== 'auto'), ...produced]) {
    assert.ok(D.BACKENDS.includes(name), name);
  }
});

test('the file covers accepted, blank and refused names and every refused field', () => {
  const fields = new Set(DOC.cases.filter((c) => c.refused).map((c) => c.refused.field));
  assert.deepEqual([...fields].sort(),
    ['device', 'device.audit_key', 'device.backend', 'device.kind', 'device.tokens_per_s', 'name']);
  assert.ok(DOC.cases.filter((c) => c.accepted?.name === '').length >= 10, 'names that show nothing');
});

for (const c of DOC.cases) {
  test(`case: ${c.what}`, () => {
    for (const [where, wrap, peerOf] of SITES) {
      const raw = JSON.stringify(wrap({ id: DOC.peer_id, name: c.name, device: c.device }));
      if (c.refused) {
        assert.throws(() => parseServer(raw), (exc) => exc instanceof SignalingError &&
          exc.message === `server message ${where}.${c.refused.field} must be ${c.refused.expected}` &&
          exc.hint.length > 0, `${where}: ${c.what}`);
        assert.throws(() => (c.refused.field === 'name' ? D.checkName(c.name) : D.checkDevice(c.device)),
          (exc) => exc instanceof D.DeviceInfoError && exc.field === c.refused.field);
        continue;
      }
      const peer = peerOf(parseServer(raw));
      assert.equal(peer.name, c.accepted.shown, where);
      assert.deepEqual({ ...peer.device }, c.accepted.device, where);
      assert.ok(Object.isFrozen(peer.device));
      assert.equal(D.checkName(c.name), c.accepted.name);
      assert.equal(D.shownName(c.accepted.name, DOC.peer_id), c.accepted.shown);
    }
  });
}

test('a blank name is shown as the fallback, a visible one as it is', () => {
  assert.equal(D.shownName('\u3164', 'AbCdEf'), 'device-AbCd');
  assert.equal(D.shownName('', 'AbCdEf'), 'device-AbCd');
  assert.equal(D.shownName(undefined, 'AbCdEf'), 'device-AbCd');
  assert.equal(D.shownName('Zoë', 'AbCdEf'), 'Zoë');
});

test('a hello name is cut at 40 code points, never inside an emoji', async () => {
  const { SignalingClient } = await import('../../static/js/p2p/signaling.js');
  const c = new SignalingClient({ server: 'http://127.0.0.1:1', name: `A${'\u{1f33c}'.repeat(45)}` });
  assert.equal([...c.hello.name].length, 40);
  assert.equal(D.checkName(c.hello.name), c.hello.name);
});
