// The "Group" panel of the page at `/` (see context.js): who trains with this device and how
// each is connected, and private rooms.
//
// - The connection to the server: connected (which group), waiting for a room's host (a live
//   counter of the wait and the server's timeout), refused (the server's message and hint as
//   sent, with "Ask again"), reconnecting (a live countdown to the next attempt and its number).
// - Members: name, backend, measured speed (the `tokens_per_s` of each device's hello, when it
//   sent one), the data channel's state (open / connecting / closed), the role: host of a
//   room, leader of the run, "private data" (it trains on text only it holds: known for every
//   peer at the leader, for itself at each device), and in a run its share of the latest step ("computes 3 of 16
//   sequences", "follows without computing": protocol v2's capacity-weighted rosters); under
//   them the group's speed next to the fastest device's alone (an estimate from its seconds per
//   sequence: its gradient time only).
// - Add a device (invite.js): the address another device opens to join this group, or in a room
//   the room's link, as text with a Copy button and a QR code.
// - Rooms: "Private room" mints a code (POST /api/rooms, docs/SERVER.md) and opens the page in
//   it. The host answers join requests here, in
//   the page, each with a countdown to the server's timeout; a request disappears when it closes
//   (answered, timed out, the requester left). When the host leaves the server names a new one
//   (`host-changed`) and that page becomes host here, requests included.

import { count, everySecond, fill, h, seconds } from './dom.js';
import { rosterOf } from './roster.js';
import { mountInvite } from './invite.js';
import { mountInviteLink } from './invitelink.js';
import { renderCrowd } from './crowd.js';
import { fastestAlone, groupRate, groupSpeedLine, sequencesOf, shareText } from './livefigures.js';
import { shownName } from '../p2p/deviceinfo.js';

const CHANNEL_TEXT = { open: 'connected', connecting: 'connecting…', closed: 'disconnected' };
const CLOSED_TEXT = {
  approved: 'was let in', denied: 'was turned away', timeout: 'was not answered in time',
  left: 'stopped waiting', dropped: 'lost its place to another network',
};

/** The host's line for requests the server refused unseen (docs/PROTOCOL.md, join-requests-refused). */
export function refusedText(n) {
  return `${count(n)} more join ${n === 1 ? 'request was' : 'requests were'} refused: the ` +
    'waiting list was full. Answer or deny the requests above to make room; if you do not know ' +
    'them, make a new private room and share its link with your guests.';
}

function speedOf(device) {
  const t = device?.tokens_per_s;
  return typeof t === 'number' && t > 0 ? `${count(t)} tokens/s` : null;
}

/** One member's row: name, role badges, then backend · speed · channel · share. `entry` is a
 * crowd.js entry with `badges` (strings) and `share` (text or null) added. */
export function memberRow(entry) {
  const state = entry.self ? null : CHANNEL_TEXT[entry.channel];
  const facts = [entry.backend, speedOf({ tokens_per_s: entry.tokensPerS }), state, entry.share]
    .filter(Boolean).join(' · ');
  return h('li', { 'data-peer': entry.id },
    h('span', { class: 'name', text: entry.name }),
    ...entry.badges.map((b) => h('span', { class: `badge ${b.replace(' ', '-')}`, text: b })),
    h('span', { class: 'facts', text: facts }));
}

/** This page's own address in room `code`: its other query options are kept. */
function roomHere(code) {
  const url = new URL(location.href);
  url.searchParams.set('room', code);
  url.hash = '';
  return url.href;
}

export function mount(root, page) {
  const connection = h('p', { class: 'connection' });
  const roomBox = h('div', { class: 'room' });
  const members = h('ul', { class: 'members', 'aria-label': 'Devices in this group' });
  // The members list, or past crowd.js's FOLD_AT devices a summary and the list folded.
  const membersBox = h('div', { class: 'members-box' }, members);
  // A new request is announced; its countdown (aria-live off) is not, every second.
  const requestList = h('ul', { class: 'requests', 'aria-label': 'Join requests', 'aria-live': 'polite',
    'aria-relevant': 'additions' });
  const requestNote = h('p', { class: 'note closed-requests', role: 'status', 'aria-live': 'polite' });
  // Requests the server turned away because the list was full (join-requests-refused).
  const refusedNote = h('p', { class: 'note refused-requests', role: 'status', hidden: true });
  // The run's pooled speed next to the fastest device's alone (livefigures.groupSpeedLine).
  const speedLine = h('p', { class: 'group-speed', hidden: true });
  const requests = h('div', { class: 'requests-box', hidden: true },
    h('h3', { text: 'Asking to join' }), requestList);
  root.append(h('h2', { text: 'Group' }), connection, membersBox, speedLine, requests, requestNote,
    refusedNote, roomBox);

  let roster = null;
  let updateInviteLink = () => {}; // the host's invite link box (invitelink.js), in a room
  let steps = []; // the session's step records (peer.js record()), for shares and speeds
  let stopTicker = () => {};
  const requestItems = new Map(); // id -> {item, left (span)}

  // -- the connection line -------------------------------------------------------------------

  function renderConnection() {
    stopTicker();
    stopTicker = () => {};
    connection.className = 'connection';
    if (roster === null) {
      connection.textContent = 'Starting…';
      return;
    }
    const { link, waiting, refusal } = roster;
    if (refusal !== null) {
      connection.classList.add('bad');
      fill(connection,
        h('strong', { text: 'Not admitted: ' }), refusal.message,
        refusal.hint ? h('span', { class: 'hint', text: refusal.hint }) : null,
        h('button', { type: 'button', text: 'Ask again', onclick: () => location.reload() }));
      return;
    }
    if (waiting !== null) {
      connection.classList.add('wait');
      const counter = h('span', { class: 'counter' });
      connection.replaceChildren(h('strong', { text: 'Waiting to join. ' }),
        `The server says: ${waiting.message}. `, counter);
      stopTicker = everySecond(() => {
        counter.textContent = `Waited ${seconds((Date.now() - waiting.since) / 1000)} so far ` +
          `(the request closes after ${seconds(waiting.timeoutS)}).`;
      });
      return;
    }
    if (link.state === 'reconnecting') {
      connection.classList.add('wait');
      const counter = h('span', { class: 'counter' });
      const due = link.at + link.delayMs;
      connection.replaceChildren(h('strong', { text: 'Reconnecting. ' }), counter,
        h('span', { class: 'hint', text: `${link.reason}. Open channels keep working meanwhile.` }));
      stopTicker = everySecond(() => {
        const left = (due - Date.now()) / 1000;
        counter.textContent = left > 0.5
          ? `Next try in ${seconds(left)}, attempt ${link.attempt}.`
          : `Trying now, attempt ${link.attempt}…`;
      });
      return;
    }
    if (link.state === 'failed') {
      connection.classList.add('bad');
      connection.replaceChildren(h('strong', { text: 'Disconnected. ' }), link.reason ?? '',
        h('button', { type: 'button', text: 'Reconnect', onclick: () => location.reload() }));
      return;
    }
    if (roster.self === '') {
      connection.textContent = link.state === 'connecting' || link.state === 'open'
        ? 'Connecting to the server…' : 'Starting…';
      return;
    }
    const where = roster.inRoom
      ? `a private room${roster.role === 'host' ? ', which you host' : ''}`
      : roster.group?.kind === 'local' ? 'the group of devices on this network' : 'the group of devices at your address';
    connection.classList.add('good');
    connection.replaceChildren(h('strong', { text: 'Connected ' }), `to ${where}.`);
  }

  // -- members -------------------------------------------------------------------------------

  function roleBadges(id) {
    const badges = [];
    if (roster.inRoom && roster.host === id) badges.push('host');
    if (page.peer?.inRun && page.peer.leader === id) badges.push('leader');
    // Trains on text only it holds (docs/PROTOCOL.md, "Private data"): every such peer at the
    // leader, this device itself anywhere.
    if (page.peer?.privateDataPeers.has(id)) badges.push('private data');
    return badges;
  }

  /** This member's share of the run's latest step ("computes 3 of 16 sequences"), or null. */
  function shareOf(id) {
    const last = steps.at(-1);
    if (!page.peer?.inRun || last === undefined || !Array.isArray(last.shares)) return null;
    const k = last.roster.indexOf(id);
    if (k < 0) return 'not in this step';
    return shareText(last.shares[k], sequencesOf(last, page.peer.config?.model.batch ?? 1));
  }

  function renderSpeed() {
    const peer = page.peer;
    const last = steps.at(-1);
    const cfg = peer?.config;
    if (!peer?.inRun || !cfg || last === undefined) {
      speedLine.hidden = true;
      return;
    }
    const seqLen = cfg.model.seq_len;
    const group = groupRate(steps, cfg.model.batch, seqLen);
    const fastest = fastestAlone(peer.speeds, last.roster, seqLen);
    speedLine.textContent = `Speed: ${groupSpeedLine(group, fastest)}.`;
    speedLine.hidden = group === null && fastest === null;
  }

  function entryOf(id, name, device, channel, self) {
    const t = device?.tokens_per_s;
    return { id, name, backend: typeof device?.backend === 'string' ? device.backend : null,
      tokensPerS: typeof t === 'number' && t > 0 ? t : null, channel, self,
      badges: roleBadges(id), share: shareOf(id) };
  }

  function renderMembers() {
    if (roster === null || roster.self === '') {
      renderCrowd(membersBox, members, [], memberRow, h);
      return;
    }
    const selfName = shownName(roster.nameOf(roster.self), roster.self);
    const self = entryOf(roster.self, `${selfName} (this device)`,
      { backend: page.selection?.backend, tokens_per_s: readinessSpeed() }, null, true);
    const others = [...roster.members.values()].map((m) =>
      entryOf(m.id, shownName(m.name, m.id), m.device, roster.channelOf(m.id), false));
    renderCrowd(membersBox, members, [self, ...others], memberRow, h);
    if (others.length === 0) {
      members.append(h('li', { class: 'alone', text: roster.inRoom
        ? 'No one else yet: share the room link below.'
        : 'No other device yet: open this page on another device on your network, or make a private room.' }));
    }
  }

  function readinessSpeed() {
    return page.mesh?.signaling.hello.device.tokens_per_s ?? null;
  }

  // -- join requests (host) ------------------------------------------------------------------

  function answer(id, approve) {
    const entry = requestItems.get(id);
    if (entry !== undefined) {
      for (const b of entry.item.querySelectorAll('button')) b.disabled = true;
      entry.left.textContent = approve ? 'letting in…' : 'turning away…';
    }
    const sent = approve ? page.mesh.approve(id) : page.mesh.deny(id);
    if (!sent) {
      page.error('the answer could not be sent: this page is not connected to the server',
        'wait until it has reconnected; the request is shown again if it is still open', 'group');
    }
  }

  function renderRequests() {
    const open = roster === null ? new Map() : roster.requests;
    for (const [id, entry] of requestItems) {
      if (!open.has(id)) {
        entry.stop();
        entry.item.remove();
        requestItems.delete(id);
      }
    }
    for (const [id, r] of open) {
      if (requestItems.has(id)) continue;
      const name = shownName(r.peer.name, id); // signaling.js gave a blank name device-XXXX already
      const left = h('span', { class: 'counter', 'aria-live': 'off' });
      const item = h('li', { 'data-peer': id },
        h('span', { class: 'name', text: name }),
        h('span', { class: 'facts', text: [r.peer.device?.backend, speedOf(r.peer.device)].filter(Boolean).join(' · ') }),
        left,
        h('span', { class: 'actions' },
          h('button', { type: 'button', class: 'primary', text: 'Approve', 'aria-label': `Approve ${name}`,
            onclick: () => answer(id, true) }),
          h('button', { type: 'button', text: 'Deny', 'aria-label': `Deny ${name}`,
            onclick: () => answer(id, false) })));
      const stop = everySecond(() => {
        const s = (r.closesAt - Date.now()) / 1000;
        if (!item.querySelector('button:disabled')) left.textContent = `closes in ${seconds(s)}`;
      });
      requestItems.set(id, { item, left, stop });
      requestList.append(item);
    }
    requests.hidden = requestItems.size === 0;
    const news = roster?.news ?? null;
    let text = '';
    if (news?.kind === 'closed') text = `${news.name} ${CLOSED_TEXT[news.reason] ?? news.reason}.`;
    else if (news?.kind === 'host' && news.id === roster.self) {
      text = 'The host left: this device hosts the room now and answers its join requests.';
    } else if (news?.kind === 'host') text = `The host left: ${roster.nameOf(news.id)} hosts the room now.`;
    if (requestNote.textContent !== text) requestNote.textContent = text;
    const refused = roster?.role === 'host' ? roster.refused : 0;
    refusedNote.hidden = refused === 0;
    const shut = refused === 0 ? '' : refusedText(refused);
    if (refusedNote.textContent !== shut) refusedNote.textContent = shut;
  }

  // -- rooms ---------------------------------------------------------------------------------

  async function mintRoom(button) {
    button.disabled = true;
    try {
      const response = await fetch('/api/rooms', { method: 'POST' });
      const body = await response.json().catch(() => null);
      if (!response.ok || typeof body?.code !== 'string') {
        throw Object.assign(new Error(`the server could not make a room (HTTP ${response.status}` +
          `${body?.message ? `: ${body.message}` : ''})`), { hint: body?.hint ?? 'try again in a moment' });
      }
      location.assign(roomHere(body.code));
    } catch (exc) {
      page.error(exc.message, exc.hint ?? 'check the connection to the server and try again', 'group');
      button.disabled = false;
    }
  }

  function renderRoom() {
    const code = new URLSearchParams(location.search).get('room');
    const invite = h('div', { class: 'invite' });
    mountInvite(invite, page, code, page.access);
    if (code === null) {
      roomBox.replaceChildren(invite,
        h('p', { text: 'Devices on the same network find each other here. To train with ' +
          'chosen devices only, anywhere, make a private room and share its link.' }),
        h('button', { type: 'button', text: 'Private room', onclick: (e) => mintRoom(e.currentTarget) }));
      return;
    }
    const leave = new URL(location.href);
    leave.searchParams.delete('room');
    leave.hash = '';
    const inviteLinkBox = h('div', { class: 'invite-links' });
    updateInviteLink = mountInviteLink(inviteLinkBox, page, code);
    roomBox.replaceChildren(
      h('p', { text: 'Private room: only devices the host lets in train here.' }),
      inviteLinkBox,
      invite,
      h('p', {}, h('a', { href: leave.href, text: 'Leave the room' })));
  }

  function render() {
    renderConnection();
    renderMembers();
    renderSpeed();
    renderRequests();
    updateInviteLink(roster);
  }

  renderRoom();
  render();
  page.addEventListener('ready', render);
  const meshes = new WeakSet(); // a mesh serves several sessions: listen to it once
  page.addEventListener('session', ({ detail: { mesh, peer } }) => {
    roster = rosterOf(mesh);
    if (!meshes.has(mesh)) {
      meshes.add(mesh);
      roster.addEventListener('change', () => {
        if (page.mesh === mesh) render();
      });
    }
    steps = [];
    for (const kind of ['phase', 'ready', 'private-data']) {
      peer.addEventListener(kind, () => {
        if (page.peer === peer) {
          renderMembers();
          renderSpeed();
        }
      });
    }
    // The leader can change mid-run (a hand-over) and the shares every step: the step record
    // names both.
    let shown = '';
    peer.addEventListener('step', (e) => {
      if (page.peer !== peer) return;
      steps.push(e.detail);
      if (steps.length > 8) steps.shift();
      const now = `${e.detail.leader}|${e.detail.roster.join(',')}|${(e.detail.shares ?? []).join(',')}`;
      if (now !== shown) {
        shown = now;
        renderMembers();
      }
      renderSpeed();
    });
    render();
  });
}
