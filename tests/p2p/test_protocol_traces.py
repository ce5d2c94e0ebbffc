"""Conformance traces (tests/vectors/protocol/): every stored trace replays on the Python
machine with every effect and deadline matching, the files are what the generator writes, and a
trace with one effect changed is refused (the replay can fail)."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from daisychain.bench.rig.nodejs import NodeError, node_argv
from protocol_traces.playback import TraceMismatch, load, replay
from protocol_traces.scenarios import SCENARIOS

TRACES = Path(__file__).resolve().parents[1] / "vectors" / "protocol"
PATHS = sorted(TRACES.glob("*.json"))

# What issue 9 asks the traces to cover, and the trace that covers it.
REQUIRED = {
    "a 3-peer run as leader": "leader-3-peers",
    "a 3-peer run as follower": "follower-3-peers",
    "a mid-run join with checkpoint": "join-with-checkpoint",
    "a follower gone mid-exchange": "follower-gone-mid-exchange",
    "the leader gone before the roster": "leader-gone-before-roster",
    "the leader gone during the exchange": "leader-gone-during-exchange",
    "the leader gone after apply": "leader-gone-after-apply",
    "CRC damage and repair": "crc-damage-repair",
    "a forged reduced chunk stopped by the guard": "forged-reduced-guard",
    "a hash mismatch fork": "hash-mismatch-fork",
    "a probe mismatch": "probe-mismatch",
    "version mismatch": "version-mismatch-lobby",
    "wrong run": "wrong-run",
    "a hostile config": "hostile-config",
    "a stop racing a failover": "stop-races-failover",
    "a straggler timeout re-commit": "straggler-recommit",
    "frames out of order, oversized, unknown kind": "frames-hostile",
    "the last step's hashes settled after the stop (issue 44)": "final-hashes-after-stop",
    "a config that audits, refused by version 6 (issue 42)": "v6-audit-config",
    "version 7's messages refused by version 6 (issue 42)": "v6-audit-messages",
    "version 7's repair pieces refused by version 6 (issue 42)": "v6-audit-repair",
}


def effects_of(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for step in trace["steps"] for f in step["effects"]]


def test_every_required_case_has_a_trace() -> None:
    stored = {p.stem for p in PATHS}
    assert len(stored) >= 15
    assert set(REQUIRED.values()) <= stored, set(REQUIRED.values()) - stored
    assert stored == set(SCENARIOS), "stored traces and scenarios differ: run --write"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_trace_replays_exactly(path: Path) -> None:
    assert replay(load(path)) == len(load(path)["steps"]) > 0


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_stored_trace_is_what_the_generator_writes(name: str) -> None:
    regenerated = json.loads(json.dumps(SCENARIOS[name]().trace()))
    assert regenerated == load(TRACES / f"{name}.json"), f"{name}: regenerate with --write"


def _first(steps: list[dict[str, Any]], effect: str) -> int:
    return next(i for i, s in enumerate(steps) if any(f["effect"] == effect for f in s["effects"]))


def _mutations(trace: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """One trace with, in turn: a message field changed, a payload hash changed, an effect
    dropped, an effect added, a deadline moved."""
    out = []
    steps = trace["steps"]
    i = next(
        i for i, s in enumerate(steps) if any(f["effect"] == "send-message" for f in s["effects"])
    )
    t = copy.deepcopy(trace)
    msg = next(f for f in t["steps"][i]["effects"] if f["effect"] == "send-message")
    msg["message"]["type"] = "hello" if msg["message"]["type"] != "hello" else "leave"
    out.append(("message type", t))
    i = next(
        i for i, s in enumerate(steps) if any(f["effect"] == "send-payload" for f in s["effects"])
    )
    t = copy.deepcopy(trace)
    pay = next(f for f in t["steps"][i]["effects"] if f["effect"] == "send-payload")
    pay["sha256"] = "0" * 64
    out.append(("payload hash", t))
    t = copy.deepcopy(trace)
    t["steps"][i]["effects"].pop()
    out.append(("effect dropped", t))
    t = copy.deepcopy(trace)
    t["steps"][0]["effects"].append({"effect": "close", "peer": "ZZZZZZZZZZZZ"})
    out.append(("effect added", t))
    t = copy.deepcopy(trace)
    j = next(j for j, s in enumerate(steps) if s["deadline"] is not None)
    t["steps"][j]["deadline"] += 0.25
    out.append(("deadline", t))
    return out


@pytest.mark.parametrize("what", ["message type", "payload hash", "effect dropped", "effect added",
                                  "deadline"])  # fmt: skip
def test_a_changed_effect_fails_the_replay(what: str) -> None:
    trace = load(TRACES / "leader-3-peers.json")
    mutated = dict(_mutations(trace))[what]
    with pytest.raises(TraceMismatch):
        replay(mutated)


@pytest.mark.parametrize("planted", ["late hashes dropped", "no final agreement"])
def test_the_old_end_of_a_run_fails_the_final_hashes_trace(
    planted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44's bug, planted back: a stopped peer that drops the hashes reaching it after the
    stop (the old rule), or one that does not report what it holds, fails the trace at the
    last event, where ``finished.hashes`` must name every peer whose hash came."""
    from daisychain.p2p.machine.machine import Machine

    trace = load(TRACES / "final-hashes-after-stop.json")
    assert replay(trace) > 0
    if planted == "late hashes dropped":
        monkeypatch.setattr(Machine, "_late_hash", lambda self, peer, m: None)
    else:
        monkeypatch.setattr(Machine, "_final_outcome", lambda self, outcome: outcome)
    last = len(trace["steps"]) - 1
    with pytest.raises(TraceMismatch, match=rf"final-hashes-after-stop: step {last} \(message"):
        replay(trace)


def test_a_trace_of_another_version_is_refused() -> None:
    trace = load(TRACES / "leader-3-peers.json")
    for key, value in (
        ("format_version", 2),
        ("protocol_version", 1),
        ("frame_version", 2),
        ("format", "other"),
    ):
        with pytest.raises(TraceMismatch, match=r"version|not a|protocol"):
            replay({**trace, key: value})


def test_hostile_config_trace_answers_incompatible_and_keeps_running() -> None:
    trace = load(TRACES / "hostile-config.json")
    effects = effects_of(trace)
    refusals = [f for f in effects if f["effect"] == "send-message"
                and f["message"]["type"] == "error"]  # fmt: skip
    assert [r["message"]["code"] for r in refusals] == ["incompatible"]
    assert refusals[0]["message"]["hint"]
    assert not any(f["effect"] == "finished" for f in effects)
    assert effects[-1]["effect"] == "send-message" and effects[-1]["message"]["type"] == "ready"


def test_every_trace_says_what_it_covers() -> None:
    for path in PATHS:
        trace = load(path)
        assert trace["name"] == path.stem and len(trace["description"]) > 40, path.name
        assert trace["steps"][0]["event"]["at"] >= 0
        times = [s["event"]["at"] for s in trace["steps"]]
        assert times == sorted(times), f"{path.name}: time runs forward"


# A second implementation rebuilds every input of a trace from the trace and the documented
# rules alone (tests/vectors/README.md): here, Node.js without any DaisyChain code recomputes the
# trace replica's init hash and checkpoints and the rule payloads of every compute-done event.
JS_INPUTS = r"""
import {readFileSync, readdirSync} from "node:fs";
import {createHash} from "node:crypto";
const dir = process.argv[2];
const sha = (bytes) => createHash("sha256").update(bytes).digest("hex");
const TOTAL_BLOCKS = 11;
function rule(rank, step, rnd, chunk, blocks) {
  const out = new Uint8Array(blocks * 257).fill(0xf9, 0, blocks);  // exponents: -7
  const base = 13 * rank + 5 * step + 3 * rnd + 11 * chunk;
  for (let i = 0; i < blocks * 256; i++) out[blocks + i] = (((7 * i + base) % 255) - 127) & 0xff;
  return out;
}
function checkpoint(step, hash) {
  const out = Buffer.alloc(76);
  out.write("DCTRACE1", 0, "ascii");
  out.writeUInt32LE(step, 8);
  out.write(hash, 12, "ascii");
  return out;
}
const counts = {init: 0, payloads: 0, checkpoints: 0};
for (const name of readdirSync(dir).filter((n) => n.endsWith(".json")).sort()) {
  const trace = JSON.parse(readFileSync(`${dir}/${name}`, "utf8"));
  const fail = (what) => { throw new Error(`${name}: ${what}`); };
  let state = trace.setup.replica ? {...trace.setup.replica} : null;
  const ranks = new Map();
  for (const [i, step] of trace.steps.entries()) {
    const e = step.event;
    if (e.event === "compute-done") {
      const [rank, shares] = ranks.get(`${e.step}/${e.round}`);
      const top = Math.max(...shares);  // ownership: less than half the top share owns nothing
      const c = [0];
      for (const x of shares) c.push(c[c.length - 1] + (2 * x >= top ? x : 0));
      const g = c[c.length - 1];
      e.payloads.forEach((b64, k) => {
        const end = Math.floor(c[k + 1] * TOTAL_BLOCKS / g);
        const blocks = end - Math.floor(c[k] * TOTAL_BLOCKS / g);
        const want = blocks === 0 || shares[rank] === 0 ? new Uint8Array(0)
          : rule(rank, e.step, e.round, k, blocks);
        if (!Buffer.from(b64, "base64").equals(Buffer.from(want))) fail(`step ${i} payload ${k}`);
        counts.payloads++;
      });
    }
    if (e.event === "lead" && e.config.resume_step === 0) {
      if (state.hash !== sha(`daisychain-trace init seed=${e.config.seed}`)) fail("lead init");
      counts.init++;
    }
    for (const f of step.effects) {
      if (f.effect === "compute") ranks.set(`${f.step}/${f.round}`, [f.rank, f.shares]);
      if (f.effect === "step-applied") state = {step: f.step, hash: f.hash};
      if (f.effect === "send-message" && f.message.type === "ready" && f.message.step === 0) {
        const seed = JSON.parse(trace.steps.find((s) => s.event.event === "message" &&
          JSON.parse(s.event.text).type === "config").event.text).seed;
        if (f.message.hash !== sha(`daisychain-trace init seed=${seed}`)) fail(`step ${i} ready`);
        counts.init++;
      }
      if (f.effect === "send-payload" && f.kind === 3) {
        if (sha(checkpoint(state.step, state.hash)) !== f.sha256) fail(`step ${i} checkpoint`);
        counts.checkpoints++;
      }
    }
  }
}
console.log(JSON.stringify(counts));
"""


def test_a_second_implementation_rebuilds_every_input(tmp_path: Path) -> None:
    try:
        node = node_argv()
    except NodeError as exc:
        if "not on PATH" in str(exc):
            pytest.skip(str(exc))
        raise
    script = tmp_path / "inputs.mjs"
    script.write_text(JS_INPUTS, encoding="utf-8")
    proc = subprocess.run([*node, str(script), str(TRACES)], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout)
    assert counts["payloads"] >= 90 and counts["init"] >= 15 and counts["checkpoints"] >= 4, counts
    # ...and it can fail: one payload byte changed in a copy of the traces.
    broken = tmp_path / "broken"
    broken.mkdir()
    trace = load(TRACES / "leader-3-peers.json")
    step = next(s for s in trace["steps"] if s["event"]["event"] == "compute-done")
    raw = bytearray(base64.b64decode(step["event"]["payloads"][1]))
    raw[300] ^= 1
    step["event"]["payloads"][1] = base64.b64encode(bytes(raw)).decode("ascii")
    (broken / "leader-3-peers.json").write_text(json.dumps(trace), encoding="utf-8")
    proc = subprocess.run([*node, str(script), str(broken)], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode != 0 and "leader-3-peers.json: step" in proc.stderr, proc.stderr
