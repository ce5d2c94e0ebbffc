// "Add a device", in the Group panel of the page at `/` (group.js mounts it): the address to
// open on another device, as text with a Copy button and as a QR code, for this group or for
// the private room this page is in. The address is access.js's `shareAddress`: this page's own
// origin, or, for a page at 127.0.0.1 on the server's machine, the server's LAN address. The QR
// code is drawn by the server (POST /api/qr, an SVG): the page carries no QR encoder.

import { h } from './dom.js';
import { shareAddress } from './access.js';

/** Copy `input`'s text; where the clipboard is refused (plain http has no navigator.clipboard)
 * select it for the device's own copy command. */
export async function copy(input, said) {
  try {
    await navigator.clipboard.writeText(input.value);
    said.textContent = 'Copied.';
  } catch {
    input.select();
    said.textContent = 'Selected: copy it with your device’s copy command.';
  }
}

/** The QR code of `text` as an object URL of the server's SVG; rejects with a hint. */
export async function qrImage(text) {
  const response = await fetch('/api/qr', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ text }) });
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    throw Object.assign(new Error(`the server could not draw the QR code (HTTP ${response.status}` +
      `${body?.error ? `: ${body.error}` : ''})`), { hint: body?.hint ?? 'copy the address instead' });
  }
  return URL.createObjectURL(await response.blob());
}

/**
 * Fill `box` with the invitation for room `room` (null: the group). `access` is a promise of
 * access.js's facts (null when the server does not say); until it settles the page's own
 * address is shown where it is shareable.
 */
export function mountInvite(box, page, room, access) {
  const inRoom = room !== null;
  const input = h('input', { type: 'text', readonly: true, class: 'link',
    'aria-label': inRoom ? 'Link to this private room' : 'Address of this group' });
  const said = h('span', { class: 'note', role: 'status' });
  const copyButton = h('button', { type: 'button', text: 'Copy link', onclick: () => copy(input, said) });
  const qr = h('img', { class: 'qr', width: 164, height: 164, hidden: true });
  const note = h('p', { class: 'invite-note' }); // not .note: that is the copy status
  const row = h('div', { class: 'copy-row' }, input, copyButton);
  // The address (its QR code follows when the server has drawn it) and what to know about it.
  box.replaceChildren(
    h('h3', { text: 'Add a device' }),
    h('p', { text: inRoom
      ? 'Open this link on another device to ask to join this private room (its host lets each device in):'
      : 'Open this address on another device on this network (a phone, a laptop) to join this group:' }),
    row, said, h('div', { class: 'qr-box' }, qr), note);
  let objectUrl = null;

  function show(address) {
    note.textContent = address.note;
    if (address.url === input.value) return; // the same address: its code is shown (or coming)
    input.value = address.url;
    said.textContent = '';
    qrImage(address.url).then((src) => {
      if (input.value !== address.url) return URL.revokeObjectURL(src); // superseded
      if (objectUrl !== null) URL.revokeObjectURL(objectUrl);
      objectUrl = src;
      qr.src = src;
      qr.alt = `QR code of ${address.url}`;
      qr.hidden = false;
    }, (exc) => page.error(exc.message, exc.hint, 'group'));
  }

  // This page's own address at once; the server's facts may then name a better one (the LAN
  // address, for a page at 127.0.0.1) and what to know about it.
  show(shareAddress(null, location, room));
  access.then((facts) => show(shareAddress(facts, location, room)));
}
