// The page at `/` (docs/USAGE.md "Train from a browser", docs/GUIDE.md): the bootstrap. It
// builds the shared context (page/context.js), mounts each panel on its <section>, loads the
// tokenizer and the built-in corpus's ids, chooses the compute backend (modelreplica.js
// chooseBackend) and starts a session: a Mesh (the group, or ?room=CODE), a WorkerReplica and a
// BrowserPeer that follows the first run a leader configures. When a run finishes, the next
// session starts at once, so the device is ready for the next run without a reload.
//
// Query: ?room=CODE (with #invite=TOKEN: a host's invite link), ?name=NAME (else the name kept by the readiness panel),
// ?backend=auto|webgpu-dp4a|webgpu-lut|js-cpu (default auto), ?repair_after=S and
// ?step_timeout=S (protocol timers, seconds; for tests and slow devices).
//
// `app` is for tests and the console: {page, mesh, peer, replica, selection, errors}. Its
// mesh/peer/replica are those of the latest run (the one in progress, or the one that finished)
// until the next session's peer enters a run; before any run, the current session's.

import { Page } from './page/context.js';
import { Mesh } from './p2p/mesh.js';
import { BrowserPeer } from './p2p/peer.js';
import { WorkerReplica, chooseBackend } from './p2p/modelreplica.js';
import { loadTokenizer } from './tokenizer.js';
import { fineWebFeed } from './p2p/datafeed.js';
import { loadTokens, timerParams } from './page/boot.js';
import { deviceName, measuredSpeed } from './page/readiness.js';
import { rosterOf } from './page/roster.js';
import { inviteFromHash } from './page/invitelink.js';
import { endedText } from './page/lead.js';
import { RunMemory, rejoinedText } from './page/rejoin.js';
import { fetchAccess } from './page/access.js';
import * as readiness from './page/readiness.js';
import * as group from './page/group.js';
import * as lead from './page/lead.js';
import * as privateText from './page/privatetext.js';
import * as live from './page/live.js';
import * as keep from './page/keep.js';
import * as use from './page/use.js';
import * as problems from './page/problems.js';

const params = new URLSearchParams(location.search);
// A room's invite link carries its token in the fragment (page/invitelink.js).
const inviteToken = () => (params.get('room') === null ? null : inviteFromHash(location.hash));
const page = new Page();
const memory = new RunMemory(sessionStorageOrNull());
let shown = null; // the session `app` shows (see above)

export const app = {
  page,
  get mesh() { return shown?.mesh ?? null; },
  get peer() { return shown?.peer ?? null; },
  get replica() { return shown?.replica ?? null; },
  get selection() { return page.selection; },
  get errors() { return page.errors; },
};

const statusLine = document.getElementById('status');
page.addEventListener('status', (e) => {
  statusLine.textContent = e.detail.text;
});

const PHASE_STATUS = {
  configured: 'A run is configured: preparing the model and waiting for the first step.',
  training: 'Training.',
};

/** A new session: a new peer and replica on the last session's mesh (peer.js keeps the
 * signaling connection open after a run), or on a new mesh for the first session. */
async function newSession(previous = null) {
  const reuse = previous !== null;
  const mesh = reuse ? previous.mesh : new Mesh({
    server: location.origin, room: params.get('room'), invite: inviteToken(), name: page.name,
    device: { kind: 'browser', backend: page.selection.backend,
      ...(measuredSpeed(page.selection) === null ? {} : { tokens_per_s: measuredSpeed(page.selection) }) },
  });
  const replica = new WorkerReplica({
    tokenizerSha256: page.tokenizer.sha256, vocabSize: page.tokenizer.vocabSize,
    backend: page.selection.backend,
    onEvent: (e) => {
      if (e.kind === 'fallback') page.error(`${e.from} failed: computing on ${e.to} from now on`, e.reason, 'worker');
      else if (e.kind === 'device-lost') page.error(`the GPU device was lost in step ${e.step}: ${e.reason}`, 'rebuilding it', 'worker');
      else if (e.kind === 'error') page.error(e.message, e.hint, 'worker');
    },
  });
  // FineWeb-Edu runs too, when this page's server reads it at a pinned revision (/api/status).
  const data = await fineWebFeed(location.origin, page.tokenizer);
  const peer = new BrowserPeer({ mesh, replica, tokens: page.tokens, tokenizerSha256: page.tokenizer.sha256,
    vocabSize: page.tokenizer.vocabSize, name: page.name, timers: timerParams(params), data,
    privateText: page.privateText });
  if (reuse) previous.peer.dispose(); // its run is over; the mesh's events are the new peer's
  const session = { mesh, peer, replica, data, ran: false };
  if (shown === null || !shown.ran) shown = session;

  const current = () => page.peer === peer;
  if (!reuse) {
    const roster = rosterOf(mesh);
    mesh.addEventListener('error', (e) => {
      // The server's refusal (denied, timed out, room full) was shown as sent; the close that
      // follows it says only its code.
      if (roster.refusal !== null && /^the server closed the connection \(code 44/.test(e.detail.message)) return;
      page.error(e.detail.message, e.detail.hint, 'mesh');
    });
    mesh.addEventListener('welcome', () => {
      if (page.mesh === mesh) page.status('In the group: ready to follow the next run, or lead one.');
    });
    mesh.addEventListener('signaling', (e) => {
      if (page.mesh === mesh && e.detail.state === 'reconnecting' && e.detail.old !== 'connecting') {
        page.status('The connection to the server was lost: reconnecting (see Group).');
      } else if (page.mesh === mesh && e.detail.state === 'failed') {
        // Refused (a bad room code, denied, expired): the group panel shows the server's words.
        page.status('Not connected to the group: see Group.');
      }
    });
    mesh.addEventListener('server', (e) => {
      if (page.mesh === mesh && e.detail.message.type === 'pending') page.status('Waiting for the room’s host to let this device in.');
    });
  }
  peer.addEventListener('error', (e) => page.error(e.detail.message, e.detail.hint, 'run'));
  peer.addEventListener('phase', (e) => {
    if (peer.inRun && !session.ran) {
      session.ran = true;
      shown = session;
      // Back in the run this tab was in before a reload, a freeze or a lost connection?
      const why = memory.entered(peer.config.run);
      page.rejoined = why === null ? null : { run: peer.config.run, why };
    }
    if (current() && PHASE_STATUS[e.detail.phase]) page.status(PHASE_STATUS[e.detail.phase]);
    if (current() && page.rejoined?.run === peer.config?.run && peer.inRun) {
      const leader = peer.leader ? rosterOf(mesh).nameOf(peer.leader) : 'the leader';
      page.status(rejoinedText(page.rejoined.why, leader));
    }
  });
  peer.addEventListener('finished', (e) => {
    const o = e.detail.outcome;
    const run = peer.config?.run;
    if (session.ran && run !== undefined) {
      if (o.reason === 'error') memory.leaving('disconnected');
      else if (o.reason !== 'left') memory.ended(run);
    }
    if (session.ran && (o.reason === 'fork' || o.reason === 'error')) {
      page.error(`the run stopped: ${o.message}`, 'this device is ready for the next run', 'run');
    }
    if (!current()) return;
    if (['failed', 'closed'].includes(mesh.signaling.state)) {
      // Refused by the server (the group panel shows its words and a Reconnect button): asking
      // again on its own would only be refused again.
      page.status('Not connected to the group: see Group.');
      return;
    }
    newSession(session).then(() => {
      // A session that never ran ends when the signaling connection comes back as a new device.
      page.status(session.ran
        ? `${endedText(o)} This device is back in the group, ready for the next run.`
        : `Back in the group (${o.message || o.reason}).`);
    }, (exc) => page.error(`could not rejoin the group after the run: ${exc.message}`, exc.hint ?? 'reload the page', 'start'));
  });

  page.setSession(session); // panels attach before the mesh starts: they see its welcome
  if (!reuse) mesh.start(); // else the peer built its machine on the admitted mesh already
  return session;
}

/** This tab's sessionStorage, or null where the browser refuses it (a storage policy). */
function sessionStorageOrNull() {
  try {
    return sessionStorage;
  } catch {
    return null;
  }
}

async function main() {
  page.name = deviceName(params);
  page.access = fetchAccess();
  for (const [panel, id] of [[readiness, 'readiness'], [group, 'group'], [lead, 'lead'],
    [privateText, 'private'], [live, 'live'],
    [keep, 'keep'], [use, 'use'], [problems, 'problems']]) {
    panel.mount(document.getElementById(id), page);
  }
  page.status('Loading the tokenizer and the training text…');
  page.tokenizer = await loadTokenizer('/luts/tokenizer.json');
  page.tokens = await loadTokens(page.tokenizer);
  page.status('Checking this device: exact gates, kernel probe, one timed step…');
  page.selection = await chooseBackend({
    backend: params.get('backend') ?? 'auto',
    onEvent: (e) => {
      if (e.kind === 'error') page.error(e.message, e.hint, 'start');
      else if (e.kind === 'progress') page.emit('progress', { message: e.message });
    },
  });
  page.emit('ready', { selection: page.selection });
  addEventListener('pagehide', () => {
    memory.leaving('reloaded');
    page.peer?.leave('the tab was closed');
  });
  // A browser freezes a background tab (a phone does): nothing runs until it resumes, and
  // Chromium closes the signaling connection meanwhile. Saying `leave` now lets the group drop
  // the tab at once instead of after its step timeout, when the message leaves before the freeze
  // (the machine may be awaiting a task then: it leaves at resume, and the step timeout decides);
  // on resume a new session, under the new id, rejoins the run and says so (page/rejoin.js).
  document.addEventListener('freeze', () => {
    memory.leaving('frozen');
    page.peer?.leave('the browser paused this tab');
  });
  page.status('Joining the group…');
  await newSession();
}

main().catch((exc) => {
  page.error(`this page could not start: ${exc.message}`, exc.hint ?? 'reload the page', 'start');
  page.status('Not training: see Problems.');
});
