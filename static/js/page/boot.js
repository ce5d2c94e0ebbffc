// What the page at `/` needs before its first session: the built-in corpus's token ids (checked
// against the tokenizer this page loaded) and the protocol timers the address may set.

/** ?repair_after=S and ?step_timeout=S as the machine's timer settings (seconds). */
export function timerParams(params) {
  const out = {};
  for (const [query, name] of [['repair_after', 'repair_after_s'], ['step_timeout', 'step_timeout_s']]) {
    const v = params.get(query);
    if (v !== null) out[name] = Number(v);
  }
  return out;
}

/** The built-in corpus's training ids from /api/corpus/builtin, made with `tokenizer`. */
export async function loadTokens(tokenizer) {
  const response = await fetch('/api/corpus/builtin');
  if (!response.ok) {
    throw Object.assign(new Error(`the training text could not be loaded: HTTP ${response.status}`),
      { hint: 'reload the page; if it persists, the server cannot tokenize its built-in corpus' });
  }
  const made = response.headers.get('X-DaisyChain-Tokenizer-SHA256');
  if (made !== tokenizer.sha256) {
    throw Object.assign(new Error(`the server's tokens were made with tokenizer ${String(made).slice(0, 12)}..., ` +
      `this page loaded ${tokenizer.sha256.slice(0, 12)}...`), { hint: 'reload the page (the server was updated)' });
  }
  const dtype = response.headers.get('X-DaisyChain-Token-Dtype');
  const bytes = await response.arrayBuffer();
  const Type = dtype === 'uint16' ? Uint16Array : dtype === 'uint32' ? Uint32Array : null;
  if (Type === null || bytes.byteLength % Type.BYTES_PER_ELEMENT !== 0) {
    throw Object.assign(new Error(`unexpected token data (${dtype}, ${bytes.byteLength} bytes)`),
      { hint: 'reload the page' });
  }
  return new Type(bytes); // little-endian, as every platform that runs this page stores it
}
