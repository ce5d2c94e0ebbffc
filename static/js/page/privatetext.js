// The "Private text" panel of the page at `/` (see context.js): a text file of this device's own
// that it trains on instead of the run's text, when it leads and when it follows
// (docs/PROTOCOL.md "Private data", docs/GUIDE.md "Private text").
//
// The file is read and tokenized here (p2p/privatedata.js); nothing of it is sent. The panel
// says what it holds ("Private text: notes.txt, 12,345 tokens — trains here; only gradients
// leave this device") or why it cannot use a file (too large, not plain UTF-8 text, too short
// for a run's sequences), with a hint. The choice lives in the page (page.setPrivateText): the
// session's peer takes it before a run is configured, later sessions at their start, so a file
// chosen during a run is used from the next run, as the panel says. The length check at choice
// uses the run's sequence length when one is configured, else the smallest preset's; a run with
// longer sequences checks again when it starts (a follower then leaves it with the reason).

import { h } from './dom.js';
import { PRESETS } from '../model/config.js';
import { MAX_PRIVATE_BYTES, readPrivateText } from '../p2p/privatedata.js';

const ACCEPT = '.txt,.md,.markdown,.csv,.tsv,.json,.jsonl,.log,text/plain';

export function mount(root, page) {
  const input = h('input', { type: 'file', name: 'private_text', accept: ACCEPT, disabled: true });
  const said = h('p', { class: 'said', role: 'status', 'aria-live': 'polite' });
  const refusal = h('p', { class: 'note bad', role: 'alert', hidden: true });
  const remove = h('button', { type: 'button', text: 'Use the run’s text instead', hidden: true });
  const thisRun = h('p', { class: 'note this-run', hidden: true });
  root.append(h('h2', { text: 'Private text' }),
    h('p', { class: 'intro', text: 'Train on a text file of your own, whether you lead or ' +
      'follow. This device reads it and draws its own batches from it; the file never leaves ' +
      'the device, only the gradients do, as every device’s do. Gradients can still reveal ' +
      'something of the text they were computed on: use text you would share in that form.' }),
    h('label', { class: 'field whole' }, h('span', { text: 'Private text (stays on this device)' }),
      input),
    h('p', { class: 'note', text: `Plain text (UTF-8), up to ${MAX_PRIVATE_BYTES / (1024 * 1024)} MiB.` }),
    said, refusal, thisRun, remove);

  let reading = 0; // the latest choice: an earlier read that finishes late is dropped

  function render() {
    input.disabled = page.tokenizer === null;
    const text = page.privateText;
    said.classList.toggle('good', text !== null);
    if (page.tokenizer === null) said.textContent = 'Available once the page has loaded.';
    else if (text === null) said.textContent = 'No private text: this device trains on the run’s text.';
    else said.textContent = text.describe();
    remove.hidden = text === null;
    const peer = page.peer;
    thisRun.hidden = !peer?.inRun;
    if (peer?.inRun) {
      if (peer.privateText !== null && peer.privateText === text) {
        thisRun.textContent = `In this run, this device trains on ${peer.privateText.name}.`;
      } else if (peer.privateText !== null) {
        thisRun.textContent = `This run trains on ${peer.privateText.name} here; the change ` +
          'applies from the next run.';
      } else if (text !== null) {
        thisRun.textContent = 'This run started before the file was chosen: it trains on the ' +
          'run’s text here, and the private text from the next run.';
      } else {
        thisRun.hidden = true;
      }
    }
  }

  input.addEventListener('change', async () => {
    const file = input.files?.[0];
    if (file === undefined) return;
    const mine = ++reading;
    refusal.hidden = true;
    said.classList.remove('good');
    said.textContent = `Reading ${file.name} on this device…`;
    const seqLen = page.peer?.config?.model.seq_len ?? PRESETS.tiny.seqLen;
    try {
      const text = await readPrivateText(file, page.tokenizer, {
        seqLen,
        onProgress: (f) => {
          if (mine === reading) said.textContent = `Reading ${file.name} on this device… ${Math.round(f * 100)}%`;
        },
      });
      if (mine !== reading) return;
      page.setPrivateText(text);
    } catch (exc) {
      if (mine !== reading) return;
      // A refused file changes nothing: the text chosen before (if any) stays in use.
      refusal.textContent = `Cannot use this file: ${exc.message}.${exc.hint ? ` ${exc.hint}.` : ''}`;
      refusal.hidden = false;
      input.value = '';
      render();
    }
  });

  remove.addEventListener('click', () => {
    reading++;
    input.value = '';
    refusal.hidden = true;
    page.setPrivateText(null);
  });

  page.addEventListener('ready', render);
  page.addEventListener('private-text', render);
  page.addEventListener('session', ({ detail: { peer } }) => {
    for (const kind of ['ready', 'phase', 'finished']) {
      peer.addEventListener(kind, () => {
        if (page.peer === peer) render();
      });
    }
    render();
  });
  render();
}
