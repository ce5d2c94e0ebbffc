// Who is in this session's group, as the server and the mesh report it: the members (name,
// device summary, data-channel state), the host of a private room, this page's own id and role,
// a join request this page is waiting on, the requests this page must answer as host, the
// signaling connection's state (reconnecting: when, which attempt) and the server's own words
// when it refused this page. The group and lead panels read it; neither parses server messages.
//
// One Roster per mesh (`rosterOf(mesh)`), made before the mesh starts (app.js sets the session
// first), so it sees the welcome. Event: `change` after every update.

import { DetailEvent } from '../p2p/signaling.js';

const rosters = new WeakMap();

/** The Roster of `mesh` (made on first use). */
export function rosterOf(mesh) {
  let roster = rosters.get(mesh);
  if (roster === undefined) {
    roster = new Roster(mesh);
    rosters.set(mesh, roster);
  }
  return roster;
}

export class Roster extends EventTarget {
  constructor(mesh) {
    super();
    this.mesh = mesh;
    this.self = ''; // this page's id once welcomed
    this.role = 'member';
    this.group = null; // {kind: local|network|room, id}
    this.host = null;
    this.members = new Map(); // id -> {id, name, device}
    this.channels = new Map(); // id -> 'open' | 'closed' (absent: connecting)
    this.waiting = null; // {since (ms, Date.now), timeoutS, message, room}: our request
    this.requests = new Map(); // id -> {peer, closesAt (ms)}: requests we host
    this.refused = 0; // requests to the room we host refused unseen: its waiting list was full
    // The room's invite link as the host sees it: {token (null for a host that took over: the
    // server sends it only to its maker), uses, used, status, expiresAt (ms, Date.now)}.
    this.invite = null;
    this.news = null; // the latest room event: {kind: 'closed', name, reason} | {kind: 'host', id}
    this.refusal = null; // {message, hint, reason}: the server's words when it refused us
    this.link = { state: mesh.signaling.state }; // the signaling state's last detail
    mesh.addEventListener('server', (e) => this.onServer(e.detail.message));
    mesh.addEventListener('signaling', (e) => {
      this.link = { ...e.detail, at: Date.now() };
      this.changed();
    });
    mesh.addEventListener('channel-open', (e) => this.setChannel(e.detail.peer, 'open'));
    mesh.addEventListener('channel-closed', (e) => this.setChannel(e.detail.peer, 'closed'));
  }

  changed() {
    this.dispatchEvent(new DetailEvent('change', {}));
  }

  setChannel(peer, state) {
    this.channels.set(peer, state);
    this.changed();
  }

  /** A member's name, or its id when it has none. */
  nameOf(id) {
    if (id === this.self) return this.mesh.signaling.hello.name || id;
    const m = this.members.get(id);
    return m?.name || id;
  }

  /** 'open', 'connecting' or 'closed': this page's data channel to `id`. */
  channelOf(id) {
    return this.channels.get(id) ?? 'connecting';
  }

  get inRoom() {
    return this.group?.kind === 'room';
  }

  onServer(m) {
    switch (m.type) {
      case 'welcome':
        this.self = m.id;
        this.role = m.role;
        this.group = m.group;
        this.host = m.host;
        this.waiting = null;
        this.refusal = null;
        this.members = new Map(m.members.map((p) => [p.id, p]));
        this.channels.clear();
        this.requests.clear();
        this.refused = 0;
        this.invite = null; // a new membership: the room's link, if any, is told anew (host-changed)
        break;
      case 'pending':
        this.waiting = { since: Date.now(), timeoutS: m.timeout_s, message: m.message, room: m.room };
        break;
      case 'denied':
        this.waiting = null;
        this.refusal = { message: m.message, hint: m.hint, reason: m.reason };
        break;
      case 'join-request':
        this.requests.set(m.peer.id, { peer: m.peer, closesAt: Date.now() + m.expires_in_s * 1000 });
        break;
      case 'join-request-closed': {
        const r = this.requests.get(m.peer);
        this.requests.delete(m.peer);
        this.news = { kind: 'closed', name: r?.peer.name || m.peer, reason: m.reason };
        break;
      }
      case 'join-requests-refused':
        this.refused = m.count;
        break;
      case 'invite': {
        // A status after the create keeps the token the create's answer carried.
        const token = m.token ?? this.invite?.token ?? null;
        this.invite = { token, uses: m.uses, used: m.used, status: m.status,
          expiresAt: Date.now() + m.expires_in_s * 1000 };
        break;
      }
      case 'peer-joined':
        this.members.set(m.peer.id, m.peer);
        break;
      case 'peer-left':
        this.members.delete(m.peer);
        this.channels.delete(m.peer);
        break;
      case 'host-changed':
        this.host = m.host;
        this.news = { kind: 'host', id: m.host };
        this.role = m.host === this.self ? 'host' : 'member';
        break;
      case 'error':
        // A refusal of our hello (full group, bad room code, rate limit): kept as sent, so the
        // close that follows cannot replace it with a bare code.
        if (this.self === '' || this.waiting !== null) {
          this.waiting = null;
          this.refusal = { message: m.message, hint: m.hint, reason: m.code };
        }
        break;
      default:
        return; // signal, broadcast, pong: not membership
    }
    this.changed();
  }
}
