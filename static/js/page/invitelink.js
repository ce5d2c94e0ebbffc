// The host's invite link, in the Group panel of a private room (group.js mounts it): a link that
// admits up to K devices without a click each, until it expires or the host revokes it
// (docs/PROTOCOL.md, "Invite links"). The host chooses K (1-256, default 20) and how long it
// stays open (15 min to 24 h, default 1 h; the server may allow less); the page then shows the
// link as text with Copy and as a QR code (the server draws it: invite.js), how many devices it
// has admitted and how many it still will, when it expires (a live countdown), and Revoke.
//
// The token travels in the link's fragment (`#invite=TOKEN`): a browser never sends a fragment
// to a server, so it reaches no access log and no Referer. The server sends the token once, to
// the host that made the link; a host that took over later sees the counts and can revoke or
// make a new link. Approval of each device stays the default: the room's own link still asks.

import { everySecond, h, seconds } from './dom.js';
import { copy, qrImage } from './invite.js';
import { shareAddress } from './access.js';

export const DEFAULT_USES = 20;
export const EXPIRY_CHOICES = Object.freeze([
  [15 * 60, '15 minutes'], [3600, '1 hour'], [4 * 3600, '4 hours'], [24 * 3600, '24 hours'],
]);
export const DEFAULT_EXPIRY_S = 3600;
const TOKEN_RE = /^[A-Za-z0-9_-]{16,64}$/;

/** The invite token in a page address's fragment (`#invite=TOKEN`), or null. */
export function inviteFromHash(hash) {
  const token = new URLSearchParams(hash.replace(/^#/, '')).get('invite');
  return token !== null && TOKEN_RE.test(token) ? token : null;
}

/** The invite link: the room's shareable address with the token in its fragment. */
export function inviteUrl(roomUrl, token) {
  return `${roomUrl.replace(/#.*$/, '')}#invite=${token}`;
}

/** "Used 3 of 20 (17 left). Expires in 52 min." or why it admits no one now. */
export function inviteLine(invite, nowMs) {
  const left = Math.max(0, invite.uses - invite.used);
  const used = `Used ${invite.used} of ${invite.uses}`;
  const expired = invite.status === 'expired' || (invite.status === 'open' && nowMs >= invite.expiresAt);
  if (invite.status === 'revoked') return `${used}. Revoked: it admits no one now.`;
  if (invite.status === 'used-up') return `${used}: used up. Make a new link for more devices.`;
  if (expired) return `${used}. Expired: make a new link for more devices.`;
  return `${used} (${left} left). Expires in ${seconds((invite.expiresAt - nowMs) / 1000)}.`;
}

/**
 * Mount the host's invite-link box in `box`; returns `update(roster)`, called on every roster
 * change: the box shows only while this page hosts the room.
 */
export function mountInviteLink(box, page, room) {
  const uses = h('input', { type: 'number', name: 'invite_uses', min: 1, max: 256, value: DEFAULT_USES,
    inputmode: 'numeric', required: true });
  const expiry = h('select', { name: 'invite_expiry' },
    ...EXPIRY_CHOICES.map(([s, text]) => h('option', { value: s, text, selected: s === DEFAULT_EXPIRY_S })));
  const make = h('button', { type: 'submit', text: 'Make invite link' });
  const form = h('form', { class: 'invite-form', 'aria-label': 'Make an invite link' },
    h('label', { class: 'field' }, h('span', { text: 'Devices it admits' }), uses),
    h('label', { class: 'field' }, h('span', { text: 'Open for' }), expiry), make);
  const input = h('input', { type: 'text', readonly: true, class: 'link', 'aria-label': 'Invite link' });
  const said = h('span', { class: 'said', role: 'status' }); // not .note: that is the room link's
  const qr = h('img', { class: 'qr', width: 164, height: 164, hidden: true });
  const line = h('p', { class: 'invite-count', role: 'status' });
  const revoke = h('button', { type: 'button', class: 'danger', text: 'Revoke invite link' });
  const linkBox = h('div', { class: 'invite-link', hidden: true },
    h('div', { class: 'copy-row' }, input,
      h('button', { type: 'button', text: 'Copy invite link', onclick: () => copy(input, said) })),
    said, h('div', { class: 'qr-box' }, qr));
  box.replaceChildren(h('h3', { text: 'Invite link' }),
    h('p', { text: 'Let many devices in without a click each: a link that admits up to the number ' +
      'you choose until it expires or you revoke it. Devices it admitted stay when you revoke it.' }),
    form, linkBox, line, revoke);
  box.hidden = true;
  let objectUrl = null;
  let stop = () => {};
  let shownToken = null;

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const n = Number(uses.value);
    if (!Number.isInteger(n) || n < 1 || n > 256) {
      page.error(`an invite link admits 1 to 256 devices, not ${uses.value}`, 'choose a number from 1 to 256', 'group');
      return;
    }
    if (!page.mesh?.createInvite(n, Number(expiry.value))) {
      page.error('the invite link could not be made: this page is not connected to the server',
        'wait until it has reconnected, then try again', 'group');
    }
  });
  revoke.addEventListener('click', () => {
    if (!page.mesh?.revokeInvite()) {
      page.error('the invite link could not be revoked: this page is not connected to the server',
        'wait until it has reconnected, then press Revoke again', 'group');
    }
  });

  async function showLink(token) {
    if (token === shownToken) return;
    shownToken = token;
    linkBox.hidden = token === null;
    if (token === null) return;
    // The address another device can open (the LAN address for a page at 127.0.0.1).
    const facts = await page.access.catch(() => null);
    if (shownToken !== token) return; // superseded meanwhile
    const url = inviteUrl(shareAddress(facts, location, room).url, token);
    input.value = url;
    said.textContent = '';
    qrImage(url).then((src) => {
      if (input.value !== url) return URL.revokeObjectURL(src);
      if (objectUrl !== null) URL.revokeObjectURL(objectUrl);
      objectUrl = src;
      qr.src = src;
      qr.alt = 'QR code of the invite link';
      qr.hidden = false;
    }, (exc) => page.error(exc.message, exc.hint, 'group'));
  }

  return function update(roster) {
    box.hidden = roster === null || roster.role !== 'host' || !roster.inRoom;
    const invite = roster?.invite ?? null;
    stop();
    stop = () => {};
    revoke.hidden = invite === null || invite.status !== 'open';
    line.hidden = invite === null;
    if (invite === null) return;
    // A revoked or used-up link is no use to share: only its counts stay.
    showLink(invite.status === 'open' ? invite.token : null);
    stop = everySecond(() => {
      line.textContent = inviteLine(invite, Date.now());
    });
  };
}
