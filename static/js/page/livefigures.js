// The live panel's read-outs as plain functions of what the run reports (live.js draws them):
// the hash agreement line, the unit counts per backend, tokens per second, the step time split,
// the validation schedule and the ETA, an outer run's rounds and the bytes sent per token. No
// DOM here: node tests feed them wrong inputs (tests/js/live.test.mjs, page_outer_live.test.mjs).

const DASH = '–';

/** `9f3c1a…`: the start of a hash, enough to compare by eye. */
export function shortHash(hash) {
  return hash ? `${hash.slice(0, 8)}…` : DASH;
}

/**
 * The per-step hash agreement from the sync guard's tally (machine/guard.js tally) of attempt
 * (step, round) over its roster (this device included): {state, text}. `agree` only when every roster peer published
 * a hash and each equals ours; a differing hash is never counted as agreement.
 */
export function agreementLine(tally) {
  if (tally === null) return { state: 'none', text: 'waiting for the first step\'s hashes' };
  const { step, hash, same, differ, missing } = tally;
  const n = same.length + differ.length + missing.length;
  if (differ.length > 0) {
    return { state: 'differ', text: `${differ.length} of ${n} replicas differ from this one at ` +
      `step ${step} (this one: ${shortHash(hash)})` };
  }
  if (missing.length > 0) {
    return { state: 'partial', text: `${same.length} of ${n} replicas identical at step ${step} ` +
      `so far, hash ${shortHash(hash)}` };
  }
  return { state: 'agree', text: `${n} replica${n === 1 ? '' : 's'} identical at step ${step}, ` +
    `hash ${shortHash(hash)}` };
}

/** "2 × webgpu-dp4a, 1 × numpy" from a Map backend -> count (most first, then by name). */
export function unitsLine(backends) {
  const rows = [...backends].filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return rows.length ? rows.map(([b, n]) => `${n} × ${b}`).join(', ') : DASH;
}

/** Tokens per second, or null when it cannot be known (no time measured). */
export function tokensPerSecond(tokens, ms) {
  return Number.isFinite(ms) && ms > 0 && tokens > 0 ? (tokens * 1000) / ms : null;
}

/** 12 300 tok/s -> "12.3k tok/s"; null -> "–". */
export function formatRate(perSecond) {
  if (perSecond === null || !Number.isFinite(perSecond)) return DASH;
  if (perSecond >= 10000) return `${(perSecond / 1000).toFixed(0)}k tok/s`;
  if (perSecond >= 1000) return `${(perSecond / 1000).toFixed(1)}k tok/s`;
  return `${perSecond.toFixed(0)} tok/s`;
}

/** Milliseconds as "850 ms", "4.2 s", "42 s", "3 min", "1 h 5 min". */
export function formatDuration(ms) {
  if (ms === null || !Number.isFinite(ms) || ms < 0) return DASH;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  const min = Math.round(s / 60);
  if (min < 60) return `${min} min`;
  return `${Math.floor(min / 60)} h ${min % 60} min`;
}

/**
 * One step's time split: {wall, compute, exchange} in ms, from the step records (peer.js
 * record(): computeMs, computedAtMs, appliedAtMs). Compute is this device's gradient (the
 * worker's time); exchange is from the gradient being ready to the step being applied (the
 * all-reduce, waiting for the slowest peer included); wall is from the previous step's apply.
 * Unknown parts are null (a step this device restored rather than computed).
 */
export function stepSplit(record, previous = null) {
  const compute = Number.isFinite(record.computeMs) ? record.computeMs : null;
  const exchange = Number.isFinite(record.computedAtMs) && Number.isFinite(record.appliedAtMs)
    ? Math.max(0, record.appliedAtMs - record.computedAtMs) : null;
  const wall = previous !== null && Number.isFinite(previous.appliedAtMs) &&
    Number.isFinite(record.appliedAtMs) ? record.appliedAtMs - previous.appliedAtMs : null;
  return { wall, compute, exchange };
}

/** The sequences a step record's group computed: its shares' sum (the run's global batch;
 * roster size x batch for a record without shares). */
export function sequencesOf(record, batch) {
  if (Array.isArray(record.shares) && record.shares.length > 0) {
    return record.shares.reduce((a, b) => a + b, 0);
  }
  return record.roster.length * batch;
}

/**
 * The group's tokens per second over the last `window` steps: the step's sequences (the sum of
 * its shares: the global batch) x seq_len tokens per step over the wall time between applies.
 * null before two steps are in.
 */
export function groupRate(records, batch, seqLen, window = 5, inner = 1) {
  if (records.length < 2) return null;
  const last = records[records.length - 1];
  const first = records[Math.max(0, records.length - 1 - window)];
  let tokens = 0;
  for (const r of records.slice(records.indexOf(first) + 1)) {
    tokens += sequencesOf(r, batch) * seqLen * inner; // an outer round: H inner steps of them
  }
  return tokensPerSecond(tokens, last.appliedAtMs - first.appliedAtMs);
}

/**
 * The inner steps per round of a run config (docs/PROTOCOL.md, "Outer runs"): `outer.steps` of
 * a `sync: "outer"` run; 1 for a per-step run (one step is one exchange).
 */
export function innerStepsOf(config) {
  return config?.sync === 'outer' && Number.isInteger(config.outer?.steps) ? config.outer.steps : 1;
}

/**
 * How the run exchanges, for the live panel: "every step" for a per-step run; for an outer run
 * "round 3 of 10: 2 inner steps per device per round (6 of 20 inner steps done)", or with rounds
 * cut by the batch (docs/PROTOCOL.md, "A round at a peer": a device takes inner steps of its
 * batch, so H is the count of a device whose share is one batch) "round 3 of 10: 2 inner steps
 * per round at an even share, more on faster devices (6 of 20 done)"; with overlap, what share
 * of each round's inner steps runs beside its exchange.
 */
export function syncLine(config, round) {
  const h = innerStepsOf(config);
  if (config?.sync !== 'outer') return 'every step (per-step exchange)';
  const steps = config.steps;
  const overlap = config.outer?.overlap;
  const beside = Number.isFinite(overlap) && overlap > 0
    ? `; ${Math.round(overlap * 100)}% of each round's inner steps run beside its exchange` : '';
  const s = h === 1 ? '' : 's';
  if (config.outer?.cut === 'batch') {
    return `round ${round} of ${steps}: ${h} inner step${s} per round at an even share, more on ` +
      `faster devices (${round * h} of ${steps * h} done)${beside}`;
  }
  return `round ${round} of ${steps}: ${h} inner step${s} per device per round ` +
    `(${round * h} of ${steps * h} inner steps done)${beside}`;
}

/**
 * Payload bytes this device sent per token it trained: its cumulative bytes sent (the last
 * record's `bytesSent`) over the tokens of its shares in every record (share x seq_len x inner
 * steps), null before it trained any. The figure per-step and outer runs are compared by
 * (docs/OUTER.md, "Measured": bytes per token).
 */
export function bytesPerToken(records, seqLen, inner = 1) {
  let tokens = 0;
  for (const r of records) if (Number.isInteger(r.share)) tokens += r.share * seqLen * inner;
  const sent = records.at(-1)?.bytesSent;
  return tokens > 0 && Number.isFinite(sent) ? sent / tokens : null;
}

/** 1377.4 -> "1,377 bytes per token sent by this device"; 13.77 -> "13.8 ..."; null -> "–". */
export function bytesPerTokenLine(perToken) {
  if (perToken === null || !Number.isFinite(perToken)) return DASH;
  const n = perToken >= 100 ? Math.round(perToken).toLocaleString('en-US')
    : perToken >= 10 ? perToken.toFixed(1) : perToken.toFixed(2);
  return `${n} bytes per token sent by this device`;
}

/**
 * An estimate of the fastest roster device's tokens per second alone: its share's tokens over
 * its gradient time, i.e. seq_len / its seconds per sequence (`speeds`: a Map id -> seq_s, as
 * every `hash` reports it; 0 = not measured). Its gradient time only: the optimizer step and
 * the exchange it would not need alone are left out. null when no roster device is measured.
 */
export function fastestAlone(speeds, roster, seqLen) {
  let best = null;
  for (const id of roster) {
    const s = speeds?.get(id);
    if (Number.isFinite(s) && s > 0 && (best === null || s < best)) best = s;
  }
  return best === null ? null : seqLen / best;
}

/** "computes 3 of 16 sequences" / "follows without computing" (a share of 0). */
export function shareText(share, globalBatch) {
  if (!Number.isInteger(share)) return '';
  if (share === 0) return 'follows without computing';
  return `computes ${share} of ${globalBatch} sequence${globalBatch === 1 ? '' : 's'}`;
}

/** The devices table's short form: "3 of 16", "follows" (a share of 0), "–" (unknown). */
export function shareCell(share, globalBatch) {
  if (!Number.isInteger(share)) return DASH;
  return share === 0 ? 'follows' : `${share} of ${globalBatch}`;
}

/** 1520.4 -> "1,520 tok/s" (null -> "–"). */
export function formatTokens(perSecond) {
  if (perSecond === null || !Number.isFinite(perSecond)) return DASH;
  return `${Math.round(perSecond).toLocaleString('en-US')} tok/s`;
}

/**
 * "group 1,520 tok/s; fastest device alone ≈ 1,180 tok/s (its gradient time)", or without the
 * second part while no device's speed is known.
 */
export function groupSpeedLine(group, fastest) {
  const head = `group ${formatTokens(group)}`;
  return fastest === null ? head
    : `${head}; fastest device alone ≈ ${formatTokens(fastest)} (its gradient time only)`;
}

/** How often the page measures the validation loss: every max(10, steps / 20) steps. */
export function evalEvery(steps) {
  return Math.max(10, Math.round(steps / 20));
}

/** Whether the validation loss is measured after step `step` of a `steps`-step run. */
export function evalDue(step, steps) {
  return step > 0 && (step % evalEvery(steps) === 0 || step === steps);
}

/** "step 41 of 300" (an outer run: "round 41 of 300") and the ETA from the recent step rate
 * ("about 3 min left"). */
export function progressLine(step, steps, msPerStep, unit = 'step') {
  const left = steps - step;
  const eta = left > 0 && msPerStep !== null && Number.isFinite(msPerStep)
    ? `, about ${formatDuration(left * msPerStep)} left` : '';
  return `${unit} ${step} of ${steps}${eta}`;
}
