// The page's shared context (the page at `/`, static/index.html): what every panel module
// (readiness.js, group.js, lead.js, live.js, keep.js, use.js, problems.js) reads and listens to,
// so that no panel reaches into another. app.js builds one Page, fills it as the page starts and
// calls each panel's `mount(root, page)` once with its <section>.
//
// One panel style: a panel module exports `mount(root, page)`, a function that builds the
// panel's DOM with dom.js `h()` (no other element builder), keeps its state in the closure's
// own variables, listens to `page` (and to each session's peer and mesh) and re-renders; no
// class, no `this`. What a test reads of a panel is an exported plain object (live.js `live`,
// use.js `panels`). A panel reads the run only through the peer's facade (p2p/peer.js
// BrowserPeer: id, admitted, phase, inRun, canLead, config, leader, isLeader, hasState, gone,
// agreement(), tally(), privateDataPeers, and the fields outcome, records, lastSave,
// privateText), never `peer.machine`;
// "is this page in a run?" is `peer.inRun`. tests/js/page_facade.test.mjs checks both.
//
// Fields (null until known): tokenizer {sha256, vocabSize, ...}, tokens (the built-in corpus's
// training ids), selection (the backend choice record, modelreplica.js chooseBackend), name (this
// device's name), access (a promise of the server's access facts, page/access.js: https,
// LAN addresses; resolves to null when the server does not say), privateText (the private text
// the user chose, p2p/privatedata.js PrivateText, or null: it outlives sessions, and each new
// session's peer is given it), rejoined ({run, why} when this tab came back by itself into the
// run it had left, page/rejoin.js; else null), and per session: mesh (p2p/mesh.js), peer (p2p/peer.js BrowserPeer), replica
// (p2p/modelreplica.js WorkerReplica), data (the FineWeb-Edu feed or null). A session is one mesh +
// peer: a page that finished a run starts a new session for the next one, so panels listen to
// `session` and re-attach their listeners to the new peer and mesh.
//
// Events (DetailEvent, `detail` as listed):
//   ready    {selection}                       the backend is chosen, the tokens are loaded
//   session  {mesh, peer, replica, data}       a new session (the first, and after each run)
//   error    {message, hint, source}           every problem the page shows (panels add theirs)
//   status   {text}                            the one-line status (aria-live)
//   private-text {text}                        the user chose a private text (null: removed it)

import { DetailEvent } from '../p2p/signaling.js';

export class Page extends EventTarget {
  constructor() {
    super();
    this.tokenizer = null;
    this.tokens = null;
    this.selection = null;
    this.name = '';
    this.access = Promise.resolve(null);
    this.mesh = null;
    this.peer = null;
    this.replica = null;
    this.data = null;
    this.errors = []; // {message, hint, source}: every error shown, for tests
    this.privateText = null;
    this.rejoined = null;
  }

  /**
   * Train on `text` (a PrivateText; null: on the run's text) from the next run this page enters:
   * the session's peer is told now (it takes it only before a run is configured), every later
   * session's peer at its start (app.js).
   */
  setPrivateText(text) {
    this.privateText = text;
    this.peer?.usePrivateText(text);
    this.emit('private-text', { text });
  }

  emit(type, detail) {
    this.dispatchEvent(new DetailEvent(type, detail));
  }

  /** Show a problem (the problems list renders it with its hint). */
  error(message, hint = '', source = 'page') {
    const e = { message, hint, source };
    this.errors.push(e);
    this.emit('error', e);
  }

  /** Set the one-line status. */
  status(text) {
    this.emit('status', { text });
  }

  /** Start a session: panels re-attach to the new mesh and peer. */
  setSession({ mesh, peer, replica, data = null }) {
    Object.assign(this, { mesh, peer, replica, data });
    this.emit('session', { mesh, peer, replica, data });
  }
}
