// The "Lead a run" panel of the page at `/` (see context.js): the leader's form and the run's
// standing as this device sees it.
//
// States (from the session's peer, p2p/peer.js): not connected yet (form disabled) -> lobby
// (the form: preset, steps, devices needed, data source, and under "More settings" sequences
// per device, sequences per step of the whole group (default: per device x the devices ready
// here when Start is pressed), sequence length, a custom size (width, layers, heads), learning
// rate, seed, how the group exchanges (per step, or outer rounds of H inner steps with an outer
// learning rate and momentum: docs/PROTOCOL.md "Outer runs"; the three outer fields show only
// for outer rounds); the size and its memory estimate said live above Start; Start) ->
// configured/training as leader
// (what runs, and Stop: peer.endRun(), the whole group stops at the next step boundary) or as
// follower ("Following NAME's run: joined automatically", or, back in the run this tab had left,
// "Rejoined NAME's run by itself: ...", page/rejoin.js) -> stopped (why) -> a new session's
// lobby, which says how the last run ended and that this device is ready for the next. A choice this device could not train itself is refused by the run rules
// (p2p/runconfig.js) with a hint, shown under the form; sizes have no HTML maximum for that
// reason. Defaults: tiny, 300 steps, 2 devices, learning rate 0.003, seed 1, the preset's batch
// and sequence length, the built-in text.

import { describe as describeDataName } from '../datanames.js';
import { h } from './dom.js';
import { rosterOf } from './roster.js';
import { rejoinedText } from './rejoin.js';
import { DEFAULT_VOCAB, PRESETS, preset as presetConfig } from '../model/config.js';
import { estimate } from '../p2p/footprint.js';
import { grouped, groupedFixed0 } from '../p2p/runconfig.js';

// How a run ended, for people (the outcome reasons of p2p/machine/effects.js).
const ENDED = {
  done: 'it finished', 'leader-request': 'its leader stopped it',
  fork: 'the copies disagreed (see Live)', error: 'an error stopped it (see Problems)',
  left: 'this device left it',
};

/** "The run ended at step 19: its leader stopped it." (the reason itself when unknown). */
export function endedText(outcome, which = 'The run') {
  return `${which} ended at step ${outcome.step}: ${ENDED[outcome.reason] ?? outcome.reason}.`;
}

/**
 * The run's sequences per step unless the user says: sequences per device x the devices ready
 * in the group when Start is pressed (this one and every member with an open channel; at least
 * one), so the group trains as many sequences per step as its devices did each alone.
 */
export function defaultGlobalBatch(peer, preset, batch) {
  const perDevice = batch ?? PRESETS[preset]?.batch ?? 1;
  const open = peer.mesh?.openPeers?.().length ?? 0;
  return perDevice * Math.max(1, 1 + open);
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

/**
 * What the form's size fields describe, before Start: {ok, text}, e.g. "Custom: width 128,
 * 3 layers, 2 heads, 861,056 parameters, about 74 MiB per device to train." (the estimate every
 * follower compares with its memory cap, p2p/footprint.js), or why the contract cannot build it.
 */
export function sizeLine({ preset, width, layers, heads, batch, seqLen, vocabSize = DEFAULT_VOCAB }) {
  const changes = { vocabSize };
  for (const [k, v] of Object.entries({ width, layers, heads, batch, seqLen })) {
    if (v !== undefined) changes[k] = v;
  }
  const custom = [width, layers, heads].some((v) => v !== undefined);
  let cfg;
  try {
    cfg = presetConfig(preset, changes);
  } catch (exc) {
    return { ok: false, text: `This size cannot be trained: ${exc.message}.` };
  }
  const fp = estimate(cfg);
  return {
    ok: true,
    text: `${custom ? 'Custom' : preset}: width ${cfg.width}, ${plural(cfg.layers, 'layer')}, ` +
      `${plural(cfg.heads, 'head')}, ${grouped(fp.params)} parameters, about ` +
      `${groupedFixed0(fp.totalMb)} MiB per device to train.`,
  };
}

function field(label, input, cls = 'field') {
  return h('label', { class: cls }, h('span', { text: label }), input);
}

export function mount(root, page) {
  const num = (name, attrs) => h('input', { name, type: 'number', inputmode: 'numeric', ...attrs });
  const dataSelect = h('select', { name: 'data' },
    h('option', { value: 'builtin', text: 'Built-in text' }));
  const start = h('button', { type: 'submit', class: 'primary', text: 'Start the run', disabled: true });
  const form = h('form', { class: 'lead-form', 'aria-label': 'Lead a run' },
    h('div', { class: 'grid' },
      field('Model size', h('select', { name: 'preset' },
        ...['tiny', 'small', 'medium'].map((p) => h('option', { value: p, text: p })))),
      field('Steps', num('steps', { min: 1, value: 300, required: true })),
      field('Devices needed to start', num('min_peers', { min: 1, max: 64, value: 2, required: true })),
      field('Training text', dataSelect)),
    h('details', {}, h('summary', { text: 'More settings' }),
      h('div', { class: 'grid' },
        field('Sequences per device per step', num('batch', { min: 1, placeholder: 'the preset’s' })),
        field('Sequence length', num('seq_len', { min: 1, placeholder: 'the preset’s' })),
        field('Width', num('width', { min: 1, placeholder: 'the preset’s' })),
        field('Layers', num('layers', { min: 1, placeholder: 'the preset’s' })),
        field('Heads', num('heads', { min: 1, placeholder: 'the preset’s' })),
        field('Sequences per step, whole group', num('global_batch', { min: 1,
          placeholder: 'per device × devices here' }), 'field whole'),
        field('Share the work', h('select', { name: 'shares_by' },
          h('option', { value: 'speed', text: 'by each device’s speed' }),
          h('option', { value: 'equal', text: 'equally (reproducible hashes)' })), 'field whole'),
        field('Learning rate', h('input', { name: 'lr', type: 'number', inputmode: 'decimal', step: 'any',
          min: 0, max: 1, value: 0.003 })),
        // 20 as `daisychain train`: without a warm-up the first steps of a fresh model at the
        // full rate can jump the loss back up (seen on tiny at lr 0.003).
        field('Warm-up', num('warmup', { min: 0, value: 20 })),
        field('Seed', num('seed', { min: 0, max: 4294967295, value: 1 })),
        field('Exchange', h('select', { name: 'sync' },
          h('option', { value: 'step', text: 'every step' }),
          h('option', { value: 'outer', text: 'outer rounds (fewer bytes)' })), 'field whole'),
        // DiLoCo's outer optimizer (docs/OUTER.md): the defaults are the headless peer's. No
        // HTML bounds: the run rules refuse a wrong value with their own message and hint.
        field('Inner updates per round (H)', num('outer_steps', { value: 10 }),
          'field whole outer'),
        field('Outer learning rate', h('input', { name: 'outer_lr', type: 'number',
          inputmode: 'decimal', step: 'any', value: 0.7 }), 'field outer'),
        field('Outer momentum', h('input', { name: 'outer_momentum', type: 'number',
          inputmode: 'decimal', step: 'any', value: 0.9 }), 'field outer'),
        field('Overlap (0 to 1)', h('input', { name: 'outer_overlap', type: 'number',
          inputmode: 'decimal', step: 'any', value: 0 }), 'field outer'),
        h('p', { class: 'note outer whole', text: 'Outer rounds: each device makes H updates ' +
          '(AdamW steps) on its share on its own (a faster device has a bigger share), then the ' +
          'group exchanges once per round. Steps counts rounds. ' +
          'Overlap: the share of each round\'s updates that run while its exchange does, so a ' +
          'slow link costs less time (0: none).' }))),
    h('p', { class: 'note size', role: 'status', 'aria-label': 'Model size and memory' }),
    h('div', { class: 'actions' }, start));
  const sizeNote = form.querySelector('.size');
  const outerOnly = form.querySelectorAll('.outer');
  const showSync = () => {
    const outer = new FormData(form).get('sync') === 'outer';
    for (const el of outerOnly) el.hidden = !outer;
  };
  form.addEventListener('change', showSync);
  showSync();
  const refusal = h('p', { class: 'note bad', role: 'alert', hidden: true });
  const standing = h('p', { class: 'standing', role: 'status', 'aria-live': 'polite' });
  const stop = h('button', { type: 'button', class: 'danger', text: 'Stop the run', hidden: true });
  root.append(h('h2', { text: 'Lead a run' }),
    h('p', { class: 'intro', text: 'Anyone in the group can lead. Every other device follows ' +
      'the run on its own, as soon as it starts.' }),
    standing, stop, form, refusal);

  const fields = () => form.querySelectorAll('input, select, button');
  const numberOf = (f, name) => (f.get(name) === '' || f.get(name) === null ? undefined : Number(f.get(name)));

  function sizeChoices() {
    const f = new FormData(form);
    const n = (name) => numberOf(f, name);
    return { preset: f.get('preset'), width: n('width'), layers: n('layers'), heads: n('heads'),
      batch: n('batch'), seqLen: n('seq_len') };
  }

  function showSize() {
    refusal.hidden = true; // a refusal was about the choices before this change
    const line = sizeLine({ ...sizeChoices(), vocabSize: page.peer?.vocabSize ?? DEFAULT_VOCAB });
    sizeNote.textContent = line.text;
    sizeNote.classList.toggle('bad', !line.ok);
  }
  form.addEventListener('input', showSize);
  form.addEventListener('change', showSize);
  showSize();
  let lastOutcome = null; // the outcome of this page's last run, said in the next session

  function offerData(data) {
    dataSelect.replaceChildren(h('option', { value: 'builtin', text: 'Built-in text' }));
    if (data !== null) {
      // FineWeb-Edu, or the dataset the server was started on (serve --dataset).
      const text = data.source === 'fineweb' ? 'FineWeb-Edu' : describeDataName(data.dataName);
      dataSelect.append(h('option', { value: data.dataName, text: `${text} (from the server)` }));
    }
  }

  function render() {
    const peer = page.peer;
    if (peer === null) {
      standing.textContent = 'Available once this device has joined its group.';
      return;
    }
    const { phase, inRun } = peer;
    form.hidden = phase !== 'lobby';
    for (const el of fields()) el.disabled = !peer.canLead;
    stop.hidden = !(inRun && peer.isLeader);
    stop.disabled = false;
    if (!peer.admitted) {
      standing.textContent = 'Available once this device has joined its group.';
    } else if (phase === 'lobby' && lastOutcome !== null) {
      standing.textContent = `${endedText(lastOutcome, 'The last run')} This device is back in the ` +
        'group for the next one: start one, or wait for someone to lead.';
    } else if (phase === 'lobby') {
      standing.textContent = 'No run yet: start one, or wait for someone in the group to lead.';
    } else if (inRun && peer.isLeader) {
      const c = peer.config;
      const steps = c.sync === 'outer' ? `${c.steps} rounds of ${c.outer.steps} inner steps`
        : `${c.steps} steps`;
      standing.textContent = `You lead this run: ${c.preset ?? 'custom'}, ${steps}, ` +
        `${c.global_batch} sequences per step shared ${c.shares_by === 'speed' ? 'by speed' : 'equally'}` +
        `${phase === 'configured' ? ' (waiting for the devices to get ready)' : ''}.`;
    } else if (inRun) {
      const leader = peer.leader;
      const name = leader ? rosterOf(peer.mesh).nameOf(leader) : 'the leader';
      standing.textContent = page.rejoined?.run === peer.config?.run
        ? rejoinedText(page.rejoined.why, name) : `Following ${name}’s run: joined automatically.`;
    } else { // stopping, or finished
      const o = peer.outcome;
      standing.textContent = o ? endedText(o) : 'The run is ending…';
    }
  }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const peer = page.peer;
    const f = new FormData(form);
    const n = (name) => numberOf(f, name);
    refusal.hidden = true;
    start.disabled = true;
    const choices = {
      ...sizeChoices(), steps: n('steps'),
      lr: n('lr'), warmup: n('warmup'), seed: n('seed'), minPeers: n('min_peers'),
      globalBatch: n('global_batch') ?? defaultGlobalBatch(peer, f.get('preset'), n('batch')),
      sharesBy: f.get('shares_by') ?? 'speed',
    };
    if (f.get('data') !== 'builtin') choices.data = f.get('data');
    // Checked by the run rules on Start (outer-steps, outer-lr, outer-momentum), as for Python.
    if (f.get('sync') === 'outer') {
      choices.outer = { innerSteps: n('outer_steps'), lr: n('outer_lr'), momentum: n('outer_momentum'),
        overlap: n('outer_overlap') ?? 0 };
    }
    try {
      await peer.lead(choices);
      page.status('Leading: waiting for the devices to get ready.');
    } catch (exc) {
      refusal.textContent = `Cannot lead this run: ${exc.message}${exc.hint ? `. ${exc.hint}` : ''}`;
      refusal.hidden = false;
      start.disabled = false;
    }
    render();
  });

  stop.addEventListener('click', () => {
    stop.disabled = true;
    page.peer.endRun();
    standing.textContent = 'Stopping at the next step boundary…';
  });

  render();
  const meshes = new WeakSet(); // a mesh serves several sessions: listen to it once
  page.addEventListener('session', ({ detail: { peer, data, mesh } }) => {
    offerData(data);
    const mine = (fn) => () => {
      if (page.peer === peer) fn();
    };
    let ran = false; // a session that never left the lobby had no run to report
    for (const kind of ['ready', 'phase']) peer.addEventListener(kind, mine(render));
    peer.addEventListener('phase', () => {
      ran ||= peer.inRun;
    });
    peer.addEventListener('finished', (e) => {
      if (ran) lastOutcome = e.detail.outcome;
      render();
    });
    if (!meshes.has(mesh)) {
      meshes.add(mesh);
      rosterOf(mesh).addEventListener('change', () => {
        if (page.mesh === mesh) render();
      });
    }
    render();
  });
}
