// The "Keeping the model" panel of the page at `/` (see context.js; docs/USAGE.md, "Keeping the
// model"). Three things:
//
// - Download: this page's state as a checkpoint file, the same safetensors bytes Python's
//   `daisychain.checkpoint` writes (peer.checkpoint() -> checkpoint.js), named
//   `daisychain-RUN-stepSTEP.safetensors`. Enabled while the page holds a state, and after a
//   run ended (the state it saved at the end). A leader in a run also gets "Ask every device to
//   save" (userSave: every browser keeps that step in its saved states, every Python peer
//   started with a checkpoint path writes it); Download itself only ever saves this page's copy,
//   so one click never writes files on other people's devices.
// - Continue from a checkpoint: a file (or a saved state) is validated as the Python loader does
//   (checkpoint.js decodeCheckpoint: format, versions, tokenizer, shapes, recorded hash; a refusal
//   is shown with a hint) and this page leads a run that continues it (peer.leadResumed): the
//   steps to train to (default: the checkpoint's schedule, or its step + 100) and the devices
//   needed; its sequences per step are the checkpoint's batch x the devices ready here, as the
//   lead form's default. Followers receive the state (sync-request) and the group continues bit-identically.
// - Saved in this browser: every N steps (a remembered setting, default 25; 0 turns it off) and
//   at the end of a run the state goes to the browser's private storage (opfs.js: a new file,
//   then the older ones removed, the newest two kept). After a reload the panel offers "Resume
//   from the saved state at step S (saved HH:MM)", a download of it and a delete. Without OPFS
//   the panel says automatic saves are off (not an error).

import { decodeCheckpoint } from '../p2p/checkpoint.js';
import { defaultResumeSteps } from '../p2p/peer.js';
import { SavedStates, unavailableReason } from './opfs.js';
import { h } from './dom.js';
import { defaultGlobalBatch } from './lead.js';

export const EVERY_KEY = 'daisychain.keep.every';
export const DEFAULT_EVERY = 25;
const MAX_FILE_BYTES = 2 * 1024 ** 3;

const clock = (at) => new Date(at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
const short = (hash) => `${hash.slice(0, 12)}…`;

/** The file name of a downloaded checkpoint. */
export function fileName(run, step) {
  return `daisychain-${run || 'run'}-step${step}.safetensors`;
}

/** The hint for a refused checkpoint file, from the refusal's text. */
export function refusalHint(message, tokenizerSha256) {
  if (/tokenizer|vocabulary/.test(message)) {
    return `this page trains with tokenizer ${short(tokenizerSha256)}: choose a checkpoint trained ` +
      "with this server's tokenizer";
  }
  if (/corrupted|truncated|damaged|not valid JSON|too short|trailing bytes|overlaps/.test(message)) {
    return 'the file is damaged: download or save it again and choose that .safetensors file';
  }
  return 'choose a .safetensors checkpoint written by DaisyChain (Download on this page, or ' +
    '`daisychain train --out`)';
}

function readEvery() {
  try {
    const v = Number(localStorage.getItem(EVERY_KEY));
    return localStorage.getItem(EVERY_KEY) !== null && Number.isInteger(v) && v >= 0 ? v : DEFAULT_EVERY;
  } catch {
    return DEFAULT_EVERY; // storage refused (a private window's policy): the default
  }
}

function download(bytes, name) {
  const url = URL.createObjectURL(new Blob([bytes], { type: 'application/octet-stream' }));
  const a = h('a', { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

export function mount(root, page) {
  // -- DOM ------------------------------------------------------------------------------------
  const now = h('p', { class: 'keep-now', 'aria-live': 'polite', text: 'No trained state on this page yet: join or lead a run.' });
  const save = h('button', { type: 'button', disabled: true, text: 'Download checkpoint' });
  const saveAll = h('button', { type: 'button', class: 'quiet', hidden: true, text: 'Ask every device to save' });

  const savedNote = h('p', { class: 'keep-note', 'aria-live': 'polite', text: 'Looking for saved states…' });
  const savedList = h('ul', { class: 'keep-saves', 'aria-label': 'saved states' });
  const every = h('input', { type: 'number', min: 0, max: 100000, step: 1, inputmode: 'numeric', id: 'keep-every' });
  every.value = String(readEvery());
  const everyLabel = h('label', { for: 'keep-every', class: 'keep-every' }, 'Auto-save every ', every, ' steps');
  const everyHint = h('p', { class: 'keep-note', text: '0 turns automatic saves off; the end of a run is always saved.' });

  const file = h('input', { type: 'file', id: 'keep-file', accept: '.safetensors,application/octet-stream' });
  const fileLabel = h('label', { for: 'keep-file' }, 'Checkpoint to continue (.safetensors)');
  const chosen = h('p', { class: 'keep-note', 'aria-live': 'polite' });
  const error = h('p', { class: 'keep-error', role: 'alert', hidden: true });
  const steps = h('input', { type: 'number', min: 1, step: 1, required: true, id: 'keep-steps', inputmode: 'numeric' });
  const devices = h('input', { type: 'number', min: 1, max: 64, step: 1, required: true, value: 2, id: 'keep-devices', inputmode: 'numeric' });
  const resume = h('button', { type: 'submit', disabled: true, text: 'Lead the resumed run' });
  const resumeForm = h('form', { class: 'keep-resume', hidden: true, 'aria-label': 'lead a resumed run' },
    h('label', {}, h('span', { text: 'Train to step' }), steps),
    h('label', {}, h('span', { text: 'Devices needed to start' }), devices),
    resume);

  root.classList.add('keep');
  root.append(
    h('h2', { text: 'Keeping the model' }),
    now,
    h('div', { class: 'keep-actions' }, save, saveAll),
    h('h3', { text: 'Saved in this browser' }),
    savedNote, savedList, everyLabel, everyHint,
    h('h3', { text: 'Continue from a checkpoint' }),
    fileLabel, file, chosen, error, resumeForm,
  );

  // -- state ----------------------------------------------------------------------------------
  let store = null; // SavedStates once opened
  let saves = []; // store.list()
  let selected = null; // {bytes, source, ck}: the checkpoint a resumed run would continue
  let session = null; // AbortController of the current session's listeners
  let kept = null; // the latest `save` of any session: what a finished run leaves to download
  const peer = () => page.peer;
  // The run's state: a leader's (fresh or restored) or a follower's once it applied a step (a
  // joiner's seed-initialised replica before its sync is not the run's state).
  const holdsRun = (p) => Boolean(p && p.outcome === null && p.hasState &&
    (p.isLeader || p.records.length > 0));
  const holdsState = () => holdsRun(peer()) || kept !== null;
  const canLead = () => Boolean(peer()?.canLead);

  function render() {
    const p = peer();
    save.disabled = !holdsState();
    if (holdsRun(p)) {
      now.textContent = `This page holds the model at step ${p.replica.step} (hash ${short(p.replica.hash)}).`;
    } else if (p?.inRun) {
      now.textContent = "This page is joining the run: it holds the run's state once it applied a step.";
    } else if (kept !== null) {
      now.textContent = `The last run ended; this page kept its state at step ${kept.step} (hash ${short(kept.hash)}).`;
    } else {
      now.textContent = 'No trained state on this page yet: join or lead a run.';
    }
    saveAll.hidden = !(p?.inRun && p.phase === 'training' && p.isLeader && p.hasState);
    resume.disabled = selected === null || !canLead();
    resume.title = canLead() ? '' : 'available in the lobby, before this page joins a run';
  }

  function renderSaves() {
    if (store === null) return;
    savedList.replaceChildren(...saves.map((s) => {
      const label = `the saved state at step ${s.step} (saved ${clock(s.at)})`;
      return h('li', {},
        h('button', { type: 'button', onclick: () => pickSaved(s) }, `Resume from ${label}`),
        h('span', { class: 'keep-actions' },
          h('span', { class: 'keep-note', text: `${(s.size / 1024 / 1024).toFixed(1)} MB` }),
          h('button', { type: 'button', class: 'quiet', 'aria-label': `Download ${label}`, onclick: () => downloadSaved(s) }, 'Download'),
          h('button', { type: 'button', class: 'quiet', 'aria-label': `Delete ${label}`, onclick: () => deleteSaved(s) }, 'Delete')));
    }));
    savedNote.textContent = saves.length === 0
      ? 'Nothing saved in this browser yet.'
      : `Kept in this browser's private storage (the newest ${saves.length === 1 ? 'one' : 'two'}).`;
  }

  async function refresh() {
    if (store === null) return;
    try {
      saves = await store.list();
    } catch (exc) {
      page.error(`the saved states could not be listed: ${exc.message}`, 'reload the page', 'keep');
      saves = [];
    }
    renderSaves();
  }

  function showError(message, hint) {
    error.textContent = `${message} (${hint})`;
    error.hidden = false;
    page.error(message, hint, 'keep');
  }

  // -- choosing a checkpoint ------------------------------------------------------------------

  async function choose(bytes, source) {
    selected = null;
    error.hidden = true;
    resumeForm.hidden = true;
    chosen.textContent = `Checking ${source}…`;
    render();
    const tok = page.tokenizer;
    try {
      const ck = await decodeCheckpoint(bytes, source, { tokenizerSha256: tok.sha256, vocabSize: tok.vocabSize });
      selected = { bytes, source, ck };
      const m = ck.model;
      chosen.textContent = `${source}: step ${ck.state.step}, model width ${m.width}, ${m.layers} layers, ` +
        `seed ${ck.seed}, hash ${short(ck.weightHash)}; checked: this page can continue it.`;
      steps.min = String(ck.state.step + 1);
      steps.value = String(defaultResumeSteps(ck));
      resumeForm.hidden = false;
    } catch (exc) {
      chosen.textContent = '';
      // The refusal names its source first (checkpoint.js); say it once.
      const why = exc.message.startsWith(`${source}: `) ? exc.message.slice(source.length + 2) : exc.message;
      showError(`${source} cannot be used: ${why}`, exc.hint ?? refusalHint(exc.message, tok.sha256));
    }
    render();
  }

  file.addEventListener('change', async () => {
    const f = file.files?.[0];
    if (!f) return;
    if (f.size > MAX_FILE_BYTES) {
      showError(`${f.name} is ${(f.size / 1024 ** 3).toFixed(1)} GB`, 'a DaisyChain checkpoint is far smaller: choose the .safetensors file');
      return;
    }
    await choose(new Uint8Array(await f.arrayBuffer()), f.name);
  });

  async function pickSaved(s) {
    try {
      await choose(await store.read(s.name), `the saved state at step ${s.step}`);
      resumeForm.scrollIntoView?.({ block: 'nearest' });
      steps.focus();
    } catch (exc) {
      showError(`the saved state at step ${s.step} could not be read: ${exc.message}`, 'delete it and use another one');
    }
  }

  async function downloadSaved(s) {
    try {
      download(await store.read(s.name), fileName(s.run, s.step));
    } catch (exc) {
      showError(`the saved state at step ${s.step} could not be read: ${exc.message}`, 'delete it and use another one');
    }
  }

  async function deleteSaved(s) {
    try {
      await store.remove(s.name);
    } catch (exc) {
      page.error(`the saved state could not be deleted: ${exc.message}`, 'reload the page and try again', 'keep');
    }
    await refresh();
  }

  resumeForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (selected === null || !resumeForm.reportValidity()) return;
    resume.disabled = true;
    const target = Number(steps.value);
    try {
      // Sequences per step as the lead form's default: the checkpoint's batch per device x the
      // devices ready here now.
      await page.peer.leadResumed(selected.bytes, { steps: target, minPeers: Number(devices.value),
        source: selected.source,
        globalBatch: defaultGlobalBatch(page.peer, null, selected.ck.model.batch) });
      page.status(`leading a run resumed at step ${selected.ck.state.step} to step ${target}: ` +
        `waiting for ${devices.value} devices`);
      error.hidden = true;
    } catch (exc) {
      showError(`cannot lead the resumed run: ${exc.message}`, exc.hint ?? refusalHint(exc.message, page.tokenizer.sha256));
    }
    render();
  });

  // -- saving ---------------------------------------------------------------------------------

  save.addEventListener('click', async () => {
    save.disabled = true;
    try {
      const s = holdsRun(peer()) ? await peer().checkpoint() : kept;
      download(s.bytes, fileName(s.run, s.step));
      page.status(`checkpoint of step ${s.step} downloaded (${fileName(s.run, s.step)})`);
    } catch (exc) {
      page.error(`the checkpoint could not be made: ${exc.message}`, exc.hint ?? 'try again after the next step', 'keep');
    }
    render();
  });

  saveAll.addEventListener('click', () => {
    page.peer.saveGroup();
    page.status('asked every device of the run to save this step');
  });

  every.addEventListener('change', () => {
    const v = Number(every.value);
    if (!Number.isInteger(v) || v < 0) {
      every.value = String(readEvery());
      return;
    }
    try {
      localStorage.setItem(EVERY_KEY, String(v));
    } catch {
      // not remembered (storage refused); it still applies to this page
    }
    if (page.peer && store !== null) page.peer.saveEvery = v;
  });

  async function onSave({ detail: s }) {
    kept = s;
    render();
    if (store === null) return;
    try {
      // Not on the status line: a save at the end of a run would cover how the run ended.
      // The panel's own list shows the saved state.
      await store.write(s.bytes, { run: s.run, step: s.step, at: s.at });
    } catch (exc) {
      page.error(`saving step ${s.step} in this browser failed: ${exc.message}`,
        exc.name === 'QuotaExceededError' ? 'the browser has no room left: delete saved states or use Download'
          : 'the previous save is kept; use Download to keep this one', 'keep');
    }
    await refresh();
  }

  function attach({ peer: p }) {
    session?.abort();
    session = new AbortController();
    const opts = { signal: session.signal };
    p.keep = true;
    p.saveEvery = store !== null ? Number(every.value) || 0 : 0;
    for (const kind of ['ready', 'phase', 'step', 'finished']) p.addEventListener(kind, render, opts);
    p.addEventListener('save', onSave, opts);
    render();
  }

  page.addEventListener('session', (e) => attach(e.detail));
  if (page.peer) attach({ peer: page.peer });
  render();

  const why = unavailableReason();
  if (why !== null) {
    savedNote.textContent = `Automatic saves are off: ${why}. Download keeps a checkpoint.`;
    every.disabled = true;
    return;
  }
  SavedStates.open().then(async (s) => {
    store = s;
    if (page.peer) page.peer.saveEvery = Number(every.value) || 0;
    await refresh();
  }, (exc) => {
    savedNote.textContent = `Automatic saves are off: this browser refused its private storage (${exc.message}). Download keeps a checkpoint.`;
    every.disabled = true;
  });
}
