"""Outer runs' config (docs/PROTOCOL.md, "Outer runs"): ``sync`` and ``outer`` on the wire and in
validation, in Python and in the JavaScript mirror (the same rules, messages and hints), and the
page's refusal of an outer run. Every new field is fed wrong values and must be refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from daisychain.bench.rig.nodejs import NodeError, node_argv
from daisychain.p2p import footprint, runconfig
from daisychain.p2p.runconfig import Incompatible
from daisychain.wire import messages

REPO = Path(__file__).resolve().parents[2]
SHA = "5a" * 32
VOCAB = 2048
RUN = "0123456789abcdef"


def raw_config(**top: Any) -> dict[str, Any]:
    """A per-step tiny config as JSON; ``top`` changes or adds top-level fields (None: drop)."""
    obj: dict[str, Any] = {
        "run": RUN, "preset": None,
        "model": {"vocab_size": VOCAB, "width": 64, "layers": 2, "heads": 4, "seq_len": 64,
                  "batch": 4, "mlp_mult": 4},
        "optim": {"lr": 3e-3, "warmup_steps": 0, "weight_decay": 0.1, "clip": 1.0},
        "steps": 30, "seed": 7, "data": "builtin", "tokenizer_sha256": SHA, "resume_step": 0,
        "resume_hash": None, "global_batch": 8, "shares_by": "speed", "type": "config",
    }  # fmt: skip
    for k, v in top.items():
        if v is None:
            obj.pop(k, None)
        else:
            obj[k] = v
    return obj


def outer(steps: Any = 3, lr: Any = 0.7, momentum: Any = 0.9, **more: Any) -> dict[str, Any]:
    return {"steps": steps, "lr": lr, "momentum": momentum, **more}


BIG = {"vocab_size": VOCAB, "width": 1024, "layers": 4, "heads": 16, "seq_len": 256, "batch": 4,
       "mlp_mult": 4}  # fmt: skip

# (name, config JSON, expected outcome): "ok", ("bad-message", text) or (rule, text).
CASES: list[tuple[str, dict[str, Any], Any]] = [
    ("per-step", raw_config(), "ok"),
    ("sync-step-explicit", raw_config(sync="step"), "ok"),
    ("outer", raw_config(sync="outer", outer=outer()), "ok"),
    ("outer-H1", raw_config(sync="outer", outer=outer(1, 1.0, 0.0)), "ok"),
    ("unknown-sync", raw_config(sync="stream", outer=outer()), ("sync", "'stream'")),
    ("sync-wrong-type", raw_config(sync=1), ("bad-message", "config.sync")),
    ("sync-too-long", raw_config(sync="o" * 17), ("bad-message", "config.sync")),
    ("outer-missing", raw_config(sync="outer"), ("bad-message", "config.outer")),
    ("outer-not-object", raw_config(sync="outer", outer=[3]), ("bad-message", "config.outer")),
    ("H-zero", raw_config(sync="outer", outer=outer(0)), ("outer-steps", "outer.steps")),
    ("H-float", raw_config(sync="outer", outer=outer(3.0)), ("bad-message", "config.outer.steps")),
    ("H-negative", raw_config(sync="outer", outer=outer(-1)), ("bad-message", "outer.steps")),
    ("H-times-steps", raw_config(sync="outer", outer=outer(600_000)), ("outer-steps", "600000")),
    # A peer with the whole global batch (8 at a batch of 4) takes 2 H inner steps a round: 30
    # rounds x 2 H must stay below 2^24, so H = 279,620 is the most (300,000 was not refused
    # when a round was H inner steps at every peer).
    ("H-max", raw_config(sync="outer", outer=outer(279_620)), "ok"),
    (
        "H-times-lanes",
        raw_config(sync="outer", outer=outer(300_000)),
        ("outer-steps", "300000 outside [1, 279620] for a run of 30 rounds of 8 sequences at a"),
    ),
    ("lr-zero", raw_config(sync="outer", outer=outer(lr=0.0)), ("outer-lr", "outer learning")),
    ("lr-negative", raw_config(sync="outer", outer=outer(lr=-0.7)), ("outer-lr", "-0.7")),
    ("lr-huge", raw_config(sync="outer", outer=outer(lr=11.0)), ("outer-lr", "11.0")),
    ("lr-f32-zero", raw_config(sync="outer", outer=outer(lr=1e-50)), ("outer-lr", "float32")),
    ("lr-string", raw_config(sync="outer", outer=outer(lr="0.7")), ("bad-message", "outer.lr")),
    ("mu-one", raw_config(sync="outer", outer=outer(momentum=1.0)), ("outer-momentum", "1.0")),
    ("mu-negative", raw_config(sync="outer", outer=outer(momentum=-0.1)), ("outer-momentum", "")),
    ("mu-bool", raw_config(sync="outer", outer=outer(momentum=True)), ("bad-message", "momentum")),
    ("overlap", raw_config(sync="outer", outer=outer(overlap=0.5)), "ok"),
    ("cut-batch", raw_config(sync="outer", outer=outer(cut="batch")), "ok"),
    ("cut-share", raw_config(sync="outer", outer=outer(cut="share")), "ok"),
    (
        "cut-unknown",
        raw_config(sync="outer", outer=outer(cut="tokens")),
        ("outer-cut", "outer cut 'tokens' is not one this version takes"),
    ),
    (
        "cut-number",
        raw_config(sync="outer", outer=outer(cut=4)),
        ("bad-message", "config.outer.cut"),
    ),
    ("overlap-all", raw_config(sync="outer", outer=outer(overlap=1)), "ok"),
    (
        "overlap-negative",
        raw_config(sync="outer", outer=outer(overlap=-0.25)),
        ("outer-overlap", "outer overlap -0.25 outside [0, 1]"),
    ),
    (
        "overlap-over-one",
        raw_config(sync="outer", outer=outer(overlap=1.5)),
        ("outer-overlap", "1.5"),
    ),
    (
        "overlap-string",
        raw_config(sync="outer", outer=outer(overlap="0.5")),
        ("bad-message", "config.outer.overlap"),
    ),
    (
        "overlap-null",
        raw_config(sync="outer", outer=outer(overlap=None)),
        ("bad-message", "config.outer.overlap"),
    ),
    # An outer run with a wrong inner lr: the protocol's rule first, on both sides.
    (
        "outer-bad-inner-lr",
        raw_config(
            sync="outer",
            outer=outer(),
            optim={"lr": 2.0, "warmup_steps": 0, "weight_decay": 0.1, "clip": 1.0},
        ),
        ("lr", "2.0"),
    ),
    # The memory cap counts an outer run's extra state on both sides (about 3,732 MiB
    # per-step, 4,938 MiB outer; the default cap is 4,096 MiB).
    ("outer-memory", raw_config(sync="outer", outer=outer(), model=BIG), ("max-memory", "4,938")),
    ("step-memory", raw_config(model=BIG), "ok"),
]


def python_outcome(text: str) -> dict[str, str]:
    try:
        cfg = messages.parse(text)
        assert isinstance(cfg, messages.Config)
        runconfig.parse(cfg, tokenizer_sha256=SHA, vocab_size=VOCAB)
    except Incompatible as exc:
        return {"rule": exc.rule, "message": exc.message, "hint": exc.hint}
    except messages.MessageError as exc:
        return {"rule": exc.code, "message": exc.message, "hint": exc.hint}
    return {"rule": "ok"}


@pytest.mark.parametrize(("name", "obj", "want"), CASES, ids=[c[0] for c in CASES])
def test_python_refuses_every_wrong_field(name: str, obj: dict[str, Any], want: Any) -> None:
    got = python_outcome(json.dumps(obj))
    if want == "ok":
        assert got == {"rule": "ok"}, got
        return
    rule, text = want
    assert got["rule"] == rule, got
    assert text in got["message"] and got["hint"], got


def test_per_step_config_bytes_unchanged() -> None:
    """A per-step config writes neither ``sync`` nor ``outer``: every trace and vector keeps its
    bytes. An outer config writes both, and reads back to the same record."""
    step = messages.parse(json.dumps(raw_config()))
    assert isinstance(step, messages.Config) and step.sync == "step" and step.outer is None
    text = messages.encode(step)
    assert '"sync"' not in text and '"outer"' not in text
    assert text.endswith('"shares_by":"speed","type":"config"}')
    out = messages.parse(json.dumps(raw_config(sync="outer", outer=outer())))
    assert isinstance(out, messages.Config)
    assert out.outer == messages.OuterSpec(3, 0.7, 0.9)
    text = messages.encode(out)
    assert text.endswith(
        '"shares_by":"speed","sync":"outer","outer":{"steps":3,"lr":0.7,"momentum":0.9},'
        '"type":"config"}'
    )
    assert messages.parse(text) == out
    # overlap is written only when not 0: an outer config without it keeps its bytes.
    assert out.outer.overlap == 0.0
    lapped = messages.parse(json.dumps(raw_config(sync="outer", outer=outer(overlap=0.5))))
    assert isinstance(lapped, messages.Config) and lapped.outer is not None
    assert lapped.outer.overlap == 0.5
    assert '"outer":{"steps":3,"lr":0.7,"momentum":0.9,"overlap":0.5}' in messages.encode(lapped)
    # cut likewise only when not "share".
    assert out.outer.cut == "share"
    both = messages.parse(
        json.dumps(raw_config(sync="outer", outer=outer(overlap=0.5, cut="batch")))
    )
    assert isinstance(both, messages.Config)
    text = messages.encode(both)
    assert '"outer":{"steps":3,"lr":0.7,"momentum":0.9,"overlap":0.5,"cut":"batch"}' in text
    shared = messages.parse(json.dumps(raw_config(sync="outer", outer=outer(cut="share"))))
    assert isinstance(shared, messages.Config)
    assert messages.encode(shared) == messages.encode(out)
    accepted = runconfig.parse(out, tokenizer_sha256=SHA, vocab_size=VOCAB).outer
    assert accepted is not None and accepted.inner_steps == 3 and accepted.lr == 0.7


JS = r"""
import * as M from "%REPO%/static/js/p2p/messages.js";
import * as R from "%REPO%/static/js/p2p/runconfig.js";
const cases = JSON.parse(process.argv[2]);
const out = {};
for (const [name, text] of Object.entries(cases)) {
  let got;
  try {
    const cfg = M.parse(text);
    R.parse(cfg, { tokenizerSha256: "%SHA%", vocabSize: %VOCAB% });
    got = { rule: "ok" };
  } catch (exc) {
    if (!(exc instanceof M.MessageError)) throw exc;
    got = { rule: exc.rule ?? exc.code, message: exc.message, hint: exc.hint };
  }
  let encoded = null;
  try { encoded = M.encode(M.parse(text)); } catch { /* refused above */ }
  out[name] = { got, encoded };
}
console.log(JSON.stringify(out));
"""


def test_javascript_mirror_refuses_the_same_and_the_page_stays_out(tmp_path: Path) -> None:
    """The JS validator gives Python's rule, message and hint for every case; for an outer
    config that Python accepts, the page refuses with the page rule and its hint (a page cannot
    compute outer rounds yet); both encode a parsed config to the same bytes."""
    try:
        node = node_argv()
    except NodeError as exc:
        if "not on PATH" in str(exc):
            pytest.skip(str(exc))
        raise
    texts = {name: json.dumps(obj) for name, obj, _ in CASES}
    script = tmp_path / "outer_config_check.mjs"
    js_text = JS.replace("%SHA%", SHA).replace("%VOCAB%", str(VOCAB))
    script.write_text(js_text.replace("%REPO%", REPO.as_uri()), encoding="utf-8")
    proc = subprocess.run([*node, str(script), json.dumps(texts)], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    js = json.loads(proc.stdout)
    pages_refused = 0
    for name, obj, _ in CASES:
        py = python_outcome(texts[name])
        got = js[name]["got"]
        if py["rule"] == "ok" and obj.get("sync") == "outer":
            assert got["rule"] == "page-outer", (name, got)
            assert "this page cannot train outer runs yet" in got["hint"]
            assert "headless peer" in got["hint"]
            pages_refused += 1
        else:
            assert got == py, name
        if py["rule"] not in ("bad-message",):
            parsed = messages.parse(texts[name])
            assert js[name]["encoded"] == messages.encode(parsed), name
    # outer, outer-H1, H-max, overlap, overlap-all, cut-batch, cut-share
    assert pages_refused == 7, pages_refused


def test_an_outer_run_counts_its_extra_state_against_the_memory_cap() -> None:
    """The momentum and a round's working copies are 24 bytes a parameter more: a memory cap
    between the two estimates admits the per-step run and refuses the outer one."""
    step = messages.parse(json.dumps(raw_config()))
    out = messages.parse(json.dumps(raw_config(sync="outer", outer=outer())))
    assert isinstance(step, messages.Config) and isinstance(out, messages.Config)
    a = runconfig.parse(step, tokenizer_sha256=SHA, vocab_size=VOCAB).footprint
    b = runconfig.parse(out, tokenizer_sha256=SHA, vocab_size=VOCAB).footprint
    assert b.total - a.total == runconfig.OUTER_STATE_BYTES_PER_PARAM * a.params
    # Overlap keeps the measured weights and the carry: 8 bytes a parameter more.
    lapped = messages.parse(json.dumps(raw_config(sync="outer", outer=outer(overlap=0.5))))
    assert isinstance(lapped, messages.Config)
    c = runconfig.parse(lapped, tokenizer_sha256=SHA, vocab_size=VOCAB).footprint
    assert c.total - b.total == runconfig.OVERLAP_STATE_BYTES_PER_PARAM * a.params
    cap = runconfig.Limits(max_memory_mb=-(-a.total // footprint.MIB))
    assert b.total > cap.max_memory_mb * footprint.MIB, "the test's cap must fall between them"
    runconfig.parse(step, tokenizer_sha256=SHA, vocab_size=VOCAB, limits=cap)
    with pytest.raises(Incompatible, match="MiB") as info:
        runconfig.parse(out, tokenizer_sha256=SHA, vocab_size=VOCAB, limits=cap)
    assert info.value.rule == "max-memory"
