// The host's invite link on the page (static/js/page/invitelink.js) and the roster's record of
// it (roster.js): the token read from a link's fragment only when it is one, the link built from
// the room's address, the counts and expiry in words, and the token kept across status updates.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { inviteFromHash, inviteLine, inviteUrl } from '../../static/js/page/invitelink.js';
import { Roster } from '../../static/js/page/roster.js';
import { DetailEvent } from '../../static/js/p2p/signaling.js';

const TOKEN = 'Ab-_'.repeat(8);

test('inviteFromHash: a token of the alphabet and length, else nothing', () => {
  assert.equal(inviteFromHash(`#invite=${TOKEN}`), TOKEN);
  assert.equal(inviteFromHash(`#x=1&invite=${TOKEN}`), TOKEN);
  assert.equal(inviteFromHash(''), null);
  assert.equal(inviteFromHash('#invite=short'), null, 'too short');
  assert.equal(inviteFromHash(`#invite=${'a'.repeat(65)}`), null, 'too long');
  assert.equal(inviteFromHash(`#invite=${TOKEN.slice(1)}!`), null, 'outside the alphabet');
});

test('inviteUrl: the room address with the token in the fragment, never twice', () => {
  assert.equal(inviteUrl('https://h:8787/?room=mathclub-42', TOKEN), `https://h:8787/?room=mathclub-42#invite=${TOKEN}`);
  assert.equal(inviteUrl('https://h/?room=r#old', TOKEN), `https://h/?room=r#invite=${TOKEN}`);
});

test('inviteLine: counts, what is left and the expiry; each closed state says why', () => {
  const open = { uses: 20, used: 3, status: 'open', expiresAt: 10_000 + 52 * 60_000 };
  assert.equal(inviteLine(open, 10_000), 'Used 3 of 20 (17 left). Expires in 52 min.');
  assert.equal(inviteLine(open, open.expiresAt), 'Used 3 of 20. Expired: make a new link for more devices.');
  assert.equal(inviteLine({ ...open, status: 'revoked' }, 0), 'Used 3 of 20. Revoked: it admits no one now.');
  assert.equal(inviteLine({ ...open, used: 20, status: 'used-up' }, 0),
    'Used 20 of 20: used up. Make a new link for more devices.');
  assert.equal(inviteLine({ ...open, status: 'expired' }, 0), 'Used 3 of 20. Expired: make a new link for more devices.');
});

function fakeMesh() {
  const mesh = new EventTarget();
  mesh.signaling = { state: 'joined', hello: { name: 'me' } };
  mesh.say = (message) => mesh.dispatchEvent(new DetailEvent('server', { message }));
  return mesh;
}

test('roster: the token of the create answer is kept across updates; a new welcome forgets it', () => {
  const mesh = fakeMesh();
  const r = new Roster(mesh);
  mesh.say({ type: 'welcome', id: 'me', role: 'host', host: 'me', group: { kind: 'room', id: 'r' }, members: [] });
  assert.equal(r.invite, null);
  mesh.say({ type: 'invite', token: TOKEN, uses: 20, used: 0, expires_in_s: 3600, status: 'open' });
  assert.equal(r.invite.token, TOKEN);
  mesh.say({ type: 'invite', token: null, uses: 20, used: 1, expires_in_s: 3500, status: 'open' });
  assert.deepEqual([r.invite.token, r.invite.used, r.invite.status], [TOKEN, 1, 'open']);
  mesh.say({ type: 'invite', token: null, uses: 20, used: 1, expires_in_s: 3400, status: 'revoked' });
  assert.equal(r.invite.status, 'revoked');
  mesh.say({ type: 'welcome', id: 'me2', role: 'member', host: 'x', group: { kind: 'room', id: 'r' }, members: [] });
  assert.equal(r.invite, null);
  mesh.say({ type: 'invite', token: null, uses: 5, used: 2, expires_in_s: 60, status: 'open' });
  assert.equal(r.invite.token, null, 'a host that took over never had the token');
});
