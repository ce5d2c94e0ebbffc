// The mesh in the browser: the signaling connection (signaling.js) plus one RTCPeerConnection
// and one reliable, ordered data channel per pair of group members. The browser twin of
// daisychain/p2p/mesh.py; normative in docs/PROTOCOL.md, "Peer connections" and "Flow control".
//
// - Who offers: of two peers, the one whose id sorts first (ASCII) creates the connection and
//   the channel (label `daisychain`) and sends the offer when it learns of the other (welcome
//   or peer-joined); the other answers. A second offer for a pair already connected is ignored.
// - ICE: the servers and policy of the server's `welcome` (docs/PROTOCOL.md, "ICE servers";
//   none and 'all' unless the server was configured), unless the page passes its own
//   `iceServers`/`iceTransportPolicy`: with neither, host candidates only and no STUN server is
//   ever contacted. Relay with no TURN server could never connect: an error. Trickle in both directions with a peer whose hello device says
//   `trickle: true` (another browser); to any other peer (the Python peer never trickles and
//   does not say so) the description is sent once gathering completed, with every candidate in
//   it. Candidates a peer trickles to us are always accepted.
// - Flow control: messages to one peer leave in the order they were queued, through one queue
//   per channel, handed to the channel only while its bufferedAmount is at most HIGH_WATER
//   (1 MiB); above it the queue waits for `bufferedamountlow` (threshold LOW_WATER, 256 KiB).
//   A payload is framed lazily, so a large one holds about HIGH_WATER in the channel at a time.
// - peer-left: the server's word travels another path than the channel, so an open channel gets
//   `peerLeftGraceMs` (1 s) to deliver or close before `peer-left` is reported.
// - A reconnected signaling socket is a new identity (the server assigns a new id and the others
//   see us leave): every link of the old identity is closed and the group is met again.
// - Sessions: one protocol machine (one run) per set of links. `closeLinks()` ends a session
//   (every peer connection closes, the signaling connection stays: no new id, no new approval)
//   and `relink()` starts the next one, meeting every member again. A pair connects at most once
//   per session: the machine never re-admits a peer it saw go (docs/PROTOCOL.md, "Peer
//   connections"), so an offer from a peer met already in this session, or one that arrives
//   between sessions, is the remote's next session and is kept (the latest, with the candidates
//   trickled after it) and answered when this mesh's next session starts. The offerer of a pair
//   stays the lower id: whichever of the two starts its next session last completes the link.
//   With `sessions` set (a BrowserPeer drives the mesh), a new identity also ends the session:
//   its run ends, and the next session meets the group under the new id.
//
// Events out (DetailEvent, `detail`), for the page or a protocol machine:
//   signaling {state, old, ...}    the signaling connection's state (see signaling.js)
//   welcome   {id, role, members}  admitted to a group (again after each reconnect)
//   server    {message}            every parsed server message (join-request, host-changed, ...)
//   channel-open {peer} / channel-closed {peer}
//   message   {peer, data}         a text message (a control message; parse with messages.js)
//   frame     {peer, data}         a binary message (Uint8Array; feed a frames.js Reassembler)
//   peer-left {peer}
//   deferred  {peer}                  an offer kept for this mesh's next session (see Sessions)
//   error     {message, hint, peer?}   anything a user should see; also logged to the console
// Effects in: sendMessage(peer, record | text), sendPayload(peer, {...}), closePeer(peer), or
// apply(effect) with the protocol machine's {type: 'send-message' | 'send-payload' | 'close'}.

import { encode } from './messages.js';
import { fragmentBody, prepareBody } from './frames.js';
import { hasTurn } from './ice.js';
import { DetailEvent, SignalingClient, parseSignalData } from './signaling.js';

export const CHANNEL_LABEL = 'daisychain';
export const HIGH_WATER = 1024 * 1024;
export const LOW_WATER = 256 * 1024;
const GATHER_TIMEOUT_MS = 5000; // a description is sent with what was gathered by then

const isBytes = (x) => x instanceof Uint8Array;

/** One peer connection and its channel; `setState` is the one place its state changes. */
class Link {
  constructor(mesh, peer, pc, trickle) {
    this.mesh = mesh;
    this.peer = peer;
    this.pc = pc;
    this.trickle = trickle;
    this.channel = null;
    this.state = 'connecting';
    this.outbox = []; // text, bytes, an iterator of frames, or a promise of one
    this.pumping = false;
    this.waiters = new Set(); // resolve functions woken by bufferedamountlow or close
    this.described = false; // our description went out: trickled candidates may follow
    this.early = []; // candidates gathered before that
    this.signals = Promise.resolve(); // remote signals are applied one after another
  }

  setState(state) {
    const old = this.state;
    if (old === state || old === 'closed') return;
    this.state = state;
    this.mesh.log(`link ${this.peer} ${old} -> ${state}`);
    if (state === 'closed') {
      this.outbox.length = 0;
      this.wake();
      try {
        this.pc.close();
      } catch {
        // already closed
      }
      this.mesh.emit('channel-closed', { peer: this.peer });
    } else if (state === 'open') {
      this.mesh.emit('channel-open', { peer: this.peer });
      this.pump();
    }
  }

  /** Run `step` after every remote signal queued before it; a failure closes the link. */
  chain(step) {
    this.signals = this.signals.then(step).catch((exc) => {
      if (this.state === 'closed') return;
      this.mesh.fail(`connection to ${this.peer} failed: ${exc.message}`,
        'check that both devices can reach each other (same network, or an ICE server)', this.peer);
      this.setState('closed');
    });
  }

  attach(channel) {
    this.channel = channel;
    channel.binaryType = 'arraybuffer';
    channel.bufferedAmountLowThreshold = LOW_WATER;
    channel.addEventListener('bufferedamountlow', () => this.wake());
    channel.addEventListener('message', (e) => {
      if (this.state !== 'open') return;
      if (typeof e.data === 'string') this.mesh.emit('message', { peer: this.peer, data: e.data });
      else this.mesh.emit('frame', { peer: this.peer, data: new Uint8Array(e.data) });
    });
    channel.addEventListener('close', () => this.setState('closed'));
    if (channel.readyState === 'open') this.setState('open');
    else channel.addEventListener('open', () => this.setState('open'));
  }

  wake() {
    for (const resolve of this.waiters) resolve();
    this.waiters.clear();
  }

  enqueue(item) {
    this.outbox.push(item);
    this.pump();
  }

  /** Bytes in the channel's buffer plus one for every item not yet handed to it. */
  pending() {
    return (this.channel ? this.channel.bufferedAmount : 0) + this.outbox.length;
  }

  async room() {
    while (this.state === 'open' && this.channel.bufferedAmount > HIGH_WATER) {
      await new Promise((resolve) => this.waiters.add(resolve));
    }
    return this.state === 'open';
  }

  async pump() {
    if (this.pumping || this.state !== 'open') return;
    this.pumping = true;
    try {
      while (this.outbox.length > 0 && this.state === 'open') {
        let item = this.outbox[0];
        if (typeof item.then === 'function') {
          item = await item; // a payload being compressed: what follows it waits
          if (this.state !== 'open') return;
          this.outbox[0] = item;
        }
        if (typeof item === 'string' || isBytes(item)) {
          if (!(await this.room())) return;
          this.channel.send(item);
          this.outbox.shift();
          continue;
        }
        const { value, done } = item.next();
        if (done) {
          this.outbox.shift();
          continue;
        }
        if (!(await this.room())) return;
        this.channel.send(value);
      }
    } catch (exc) {
      // InvalidStateError/OperationError on a dying channel, or a payload that cannot be framed
      this.mesh.fail(`sending to ${this.peer} failed: ${exc.message}`, 'the connection is closed', this.peer);
      this.setState('closed');
    } finally {
      this.pumping = false;
    }
  }
}

export class Mesh extends EventTarget {
  /**
   * @param {object} o
   * @param {string} o.server  the page's origin or the server's URL (http(s) or ws(s))
   * @param {string|null} [o.room]  a private room code
   * @param {string|null} [o.invite]  an invite token of that room (docs/PROTOCOL.md, Invite links)
   * @param {string} [o.name]  shown to the group (<= 40 characters)
   * @param {object} [o.device]  the hello device summary; `trickle: true` is added
   * @param {RTCIceServer[]|null} [o.iceServers]  overrides the welcome's (null: take them)
   * @param {string|null} [o.iceTransportPolicy]  'all' or 'relay'; null: the welcome's
   * @param {boolean} [o.trickle]  trickle ICE with peers that say they can (default true)
   * @param {number} [o.peerLeftGraceMs]
   * @param {object} [o.backoff]  signaling reconnect: {initialMs, maxMs, factor, random}
   */
  constructor({ server, room = null, invite = null, name = '', device = { kind: 'browser' }, iceServers = null,
    iceTransportPolicy = null, trickle = true, peerLeftGraceMs = 1000, backoff = {},
    RTCPeerConnectionImpl = globalThis.RTCPeerConnection, WebSocketImpl = globalThis.WebSocket,
    log = null } = {}) {
    super();
    this.iceOverride = { servers: iceServers, policy: iceTransportPolicy };
    this.iceServers = iceServers ?? [];
    this.iceTransportPolicy = iceTransportPolicy ?? 'all';
    this.trickle = trickle;
    this.peerLeftGraceMs = peerLeftGraceMs;
    this.RTC = RTCPeerConnectionImpl;
    this.log = log ?? ((line) => console.debug(`daisychain mesh: ${line}`));
    this.id = '';
    this.role = 'member';
    this.links = new Map();
    this.devices = new Map(); // peer id -> its hello device summary (every member)
    this.sessions = false; // a BrowserPeer drives this mesh: a new identity ends the session
    this.session = 'open'; // 'open': links are made; 'closed': between two sessions
    this.met = new Set(); // peers linked in this session (a pair connects once per session)
    this.deferred = new Map(); // peer -> {offer, candidates}: its next session's offer
    this.signaling = new SignalingClient({
      server, room, invite, name, device: { ...device, trickle }, backoff, WebSocketImpl, log: this.log,
    });
    this.signaling.addEventListener('state', (e) => this.emit('signaling', e.detail));
    this.signaling.addEventListener('error', (e) => this.fail(e.detail.message, e.detail.hint));
    this.signaling.addEventListener('message', (e) => this.onServer(e.detail.message));
    this.signaling.addEventListener('state', (e) => {
      if (e.detail.state === 'reconnecting' && e.detail.old !== 'connecting') {
        this.fail(`signaling lost: ${e.detail.reason}; reconnecting in ${(e.detail.delayMs / 1000).toFixed(1)} s`,
          'open channels keep working; new devices are met once the server is back');
      }
    });
  }

  emit(type, detail) {
    this.dispatchEvent(new DetailEvent(type, detail));
  }

  /** An error the page should show; also on the console for developers. */
  fail(message, hint, peer = undefined) {
    console.warn(`daisychain mesh: ${message} (${hint})`);
    this.emit('error', { message, hint, peer });
  }

  start() {
    this.signaling.start();
    return this;
  }

  // -- signaling -----------------------------------------------------------------------------

  onServer(msg) {
    this.emit('server', { message: msg });
    switch (msg.type) {
      case 'welcome':
        if (this.id !== '' && msg.id !== this.id) {
          // A new identity: the others see our old id leave; start over with everyone.
          for (const peer of [...this.links.keys()]) this.closePeer(peer);
          this.devices.clear();
          this.met.clear();
          this.deferred.clear();
          // Driven by sessions, the run of the old identity ends (the peer feeds signaling-lost)
          // and the next session meets the group; a bare mesh meets it again at once.
          if (this.sessions) this.session = 'closed';
        }
        this.id = msg.id;
        this.role = msg.role;
        this.takeIce(msg);
        for (const member of msg.members) this.devices.set(member.id, member.device);
        this.emit('welcome', { id: msg.id, role: msg.role, members: msg.members });
        for (const member of msg.members) this.introduce(member.id);
        break;
      case 'peer-joined':
        this.devices.set(msg.peer.id, msg.peer.device);
        this.introduce(msg.peer.id);
        break;
      case 'peer-left':
        this.onPeerLeft(msg.peer);
        break;
      case 'signal':
        this.onSignal(msg.from, msg.data);
        break;
      case 'host-changed':
        this.role = msg.host === this.id ? 'host' : 'member';
        break;
      case 'error':
        if (this.signaling.state === 'joined') this.fail(`server: ${msg.code}: ${msg.message}`, msg.hint);
        break;
      default:
        break; // pending, denied, join-request(-closed), broadcast, pong: the page's business
    }
  }

  /** The welcome's ICE servers and policy, where the page did not give its own. */
  takeIce(welcome) {
    this.iceServers = this.iceOverride.servers ?? welcome.ice_servers;
    this.iceTransportPolicy = this.iceOverride.policy ?? welcome.ice_transport_policy;
    if (this.iceTransportPolicy === 'relay' && !hasTurn(this.iceServers)) {
      this.fail('relay-only ICE was asked for but no TURN server is known',
        'the page or the server must give a turn: server (docs/USAGE.md, ICE servers)');
    }
  }

  /** Host only: admit or refuse a device waiting to join this room. */
  approve(peer) {
    return this.signaling.send({ type: 'approve', peer });
  }

  deny(peer) {
    return this.signaling.send({ type: 'deny', peer });
  }

  /** Host only: open an invite link for `uses` devices, `expiresS` seconds (the server answers
   * with an `invite` message holding its token), or revoke the open one. */
  createInvite(uses, expiresS) {
    return this.signaling.send({ type: 'invite-create', uses, expires_s: expiresS });
  }

  revokeInvite() {
    return this.signaling.send({ type: 'invite-revoke' });
  }

  signal(peer, data) {
    this.signaling.send({ type: 'signal', to: peer, data });
  }

  onPeerLeft(peer) {
    const link = this.links.get(peer);
    const finish = () => {
      this.devices.delete(peer);
      this.deferred.delete(peer);
      this.emit('peer-left', { peer });
      this.closePeer(peer);
    };
    if (link === undefined || link.state !== 'open') {
      finish();
      return;
    }
    let timer = null;
    const done = () => {
      clearTimeout(timer);
      link.channel.removeEventListener('close', done);
      finish();
    };
    timer = setTimeout(done, this.peerLeftGraceMs);
    link.channel.addEventListener('close', done);
  }

  // -- peer connections ----------------------------------------------------------------------

  newLink(peer) {
    const config = { iceServers: this.iceServers, iceTransportPolicy: this.iceTransportPolicy };
    const pc = new this.RTC(config);
    const trickle = this.trickle && this.devices.get(peer)?.trickle === true;
    const link = new Link(this, peer, pc, trickle);
    this.links.set(peer, link);
    pc.addEventListener('icecandidate', (e) => {
      if (!link.trickle || !e.candidate || !e.candidate.candidate) return;
      const data = {
        kind: 'candidate', candidate: e.candidate.candidate, sdpMid: e.candidate.sdpMid,
        sdpMLineIndex: e.candidate.sdpMLineIndex,
      };
      if (link.described) this.signal(peer, data);
      else link.early.push(data);
    });
    pc.addEventListener('connectionstatechange', () => {
      if (pc.connectionState === 'failed') {
        this.fail(`connection to ${peer} failed (ICE found no working path)`,
          'devices on different networks need a STUN or TURN server (iceServers)', peer);
      }
      if (pc.connectionState === 'failed' || pc.connectionState === 'closed') link.setState('closed');
    });
    return link;
  }

  async describe(link, kind) {
    const pc = link.pc;
    if (!link.trickle && pc.iceGatheringState !== 'complete') {
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, GATHER_TIMEOUT_MS);
        const on = () => {
          if (pc.iceGatheringState !== 'complete') return;
          clearTimeout(timer);
          pc.removeEventListener('icegatheringstatechange', on);
          resolve();
        };
        pc.addEventListener('icegatheringstatechange', on);
      });
    }
    if (link.state === 'closed') return;
    this.signal(link.peer, { kind, sdp: pc.localDescription.sdp });
    link.described = true;
    for (const data of link.early.splice(0)) this.signal(link.peer, data);
  }

  /** A new member: the lower id offers (once per session). */
  introduce(peer) {
    if (peer === this.id || this.links.has(peer) || !(this.id < peer)) return;
    if (this.session !== 'open' || this.met.has(peer)) return;
    this.met.add(peer);
    const link = this.newLink(peer);
    link.attach(link.pc.createDataChannel(CHANNEL_LABEL, { ordered: true }));
    link.chain(async () => {
      await link.pc.setLocalDescription(await link.pc.createOffer());
      await this.describe(link, 'offer');
    });
  }

  onSignal(peer, raw) {
    let data;
    try {
      data = parseSignalData(raw);
    } catch (exc) {
      this.fail(`${peer}: ${exc.message}`, exc.hint, peer);
      return;
    }
    if (data.kind === 'offer') {
      if (this.session !== 'open' || this.met.has(peer)) {
        // The remote's next session (see Sessions): answered when ours starts.
        this.deferred.set(peer, { offer: data, candidates: [] });
        this.log(`offer from ${peer} kept for the next session`);
        this.emit('deferred', { peer });
        return;
      }
      if (this.links.has(peer)) return; // glare with our own: keep the first
      this.answer(peer, data);
      return;
    }
    const kept = this.deferred.get(peer);
    if (kept !== undefined && data.kind === 'candidate') {
      kept.candidates.push(data); // trickled after a kept offer: they belong to it
      return;
    }
    const link = this.links.get(peer);
    if (link === undefined) return; // signals for a connection already closed
    if (data.kind === 'answer') {
      link.chain(async () => {
        if (link.pc.signalingState === 'have-local-offer') {
          await link.pc.setRemoteDescription({ type: 'answer', sdp: data.sdp });
        }
      });
    } else {
      link.chain(() => link.pc.addIceCandidate({
        candidate: data.candidate, sdpMid: data.sdpMid, sdpMLineIndex: data.sdpMLineIndex,
      }));
    }
  }

  /** Answer `peer`'s offer (and apply the candidates it trickled after it). */
  answer(peer, offer, candidates = []) {
    this.met.add(peer);
    const link = this.newLink(peer);
    link.pc.addEventListener('datachannel', (e) => {
      if (e.channel.label === CHANNEL_LABEL && link.channel === null) link.attach(e.channel);
    });
    link.chain(async () => {
      await link.pc.setRemoteDescription({ type: 'offer', sdp: offer.sdp });
      await link.pc.setLocalDescription(await link.pc.createAnswer());
      await this.describe(link, 'answer');
    });
    for (const c of candidates) {
      link.chain(() => link.pc.addIceCandidate({
        candidate: c.candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex,
      }));
    }
  }

  // -- sessions --------------------------------------------------------------------------------

  /**
   * End this session: close every peer connection (the machine that used them finished) and keep
   * the signaling connection. Offers that arrive until `relink()` are kept for it.
   */
  closeLinks() {
    for (const peer of [...this.links.keys()]) this.closePeer(peer);
    this.session = 'closed';
  }

  /**
   * Start the next session: answer the offers kept for it and offer to every member this page
   * offers to. A no-op while the current session is open (its links are in use).
   */
  relink() {
    if (this.session === 'open') return;
    this.session = 'open';
    this.met.clear();
    const kept = [...this.deferred];
    this.deferred.clear();
    for (const [peer, { offer, candidates }] of kept) {
      if (this.devices.has(peer)) this.answer(peer, offer, candidates);
    }
    if (this.id !== '') for (const peer of [...this.devices.keys()]) this.introduce(peer);
  }

  // -- use -----------------------------------------------------------------------------------

  openPeers() {
    return [...this.links.values()].filter((l) => l.state === 'open').map((l) => l.peer);
  }

  linkOf(peer) {
    const link = this.links.get(peer);
    return link !== undefined && link.state === 'open' ? link : null;
  }

  /** Queue a control message (a messages.js record, or its text); false when not open. */
  sendMessage(peer, message) {
    const link = this.linkOf(peer);
    if (link === null) return false;
    link.enqueue(typeof message === 'string' ? message : encode(message));
    return true;
  }

  /**
   * Queue one payload, framed (and compressed when `deflate`) as frames.js does it; it leaves
   * after everything queued before it and before everything queued after it.
   */
  sendPayload(peer, { kind, step, round = 0, chunk = 0, transfer, deflate = false, payload }) {
    const link = this.linkOf(peer);
    if (link === null) return false;
    link.enqueue(prepareBody(payload, { deflate }).then(({ body, flags }) =>
      fragmentBody(kind, body, { transfer, step, round, chunk, flags })));
    return true;
  }

  /** Queue already built frames (an array or a lazy iterator of Uint8Array). */
  sendFrames(peer, frames) {
    const link = this.linkOf(peer);
    if (link === null) return false;
    link.enqueue(frames[Symbol.iterator]());
    return true;
  }

  /** A protocol machine's effect; false for effects that are not the mesh's to carry out. */
  apply(effect) {
    switch (effect.type) {
      case 'send-message':
        return this.sendMessage(effect.peer, effect.message);
      case 'send-payload':
        return this.sendPayload(effect.peer, effect);
      case 'close':
        this.closePeer(effect.peer);
        return true;
      default:
        return false;
    }
  }

  /** What is still queued towards `peer` (0 when everything went to the channel's transport). */
  buffered(peer) {
    const link = this.links.get(peer);
    return link === undefined ? 0 : link.pending();
  }

  closePeer(peer) {
    const link = this.links.get(peer);
    if (link === undefined) return;
    this.links.delete(peer);
    link.setState('closed');
  }

  /** Leave the group for good (the page is going away): every link and the signaling socket. */
  close() {
    this.closeLinks();
    this.deferred.clear();
    this.signaling.close();
  }
}
