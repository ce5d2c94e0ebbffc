"""The browser's checkpoint codec (static/js/p2p/checkpoint.js) against daisychain.checkpoint.

A browser peer serves its state to a joiner as checkpoint bytes and restores the bytes a leader
sends (docs/PROTOCOL.md, "Checkpoints"). Under Node: the JS encoder writes exactly the bytes
Python's ``checkpoint.encode`` writes for the same trained state (so a Python joiner of a browser
leader reads what a Python leader would send), the JS decoder accepts Python's bytes with the
same weight hash, and every check of ``checkpoint.from_parts``/``safetensors_io.decode`` refuses
the same damaged input in JS, with the same words (Python's oracle refuses each one too).
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daisychain import checkpoint, safetensors_io, training
from daisychain.batches import sample_batch
from daisychain.bench.rig.nodejs import NodeError, node_argv
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig

REPO = Path(__file__).resolve().parents[2]
MODULE = (REPO / "static" / "js" / "p2p" / "checkpoint.js").as_uri()
TOKENIZER = "ab" * 32

SCRIPT = """
import { readFileSync, writeFileSync } from 'node:fs';
const { decodeCheckpoint, encodeCheckpoint, stepOf } = await import(process.argv[2]);
const input = JSON.parse(readFileSync(process.argv[3], 'utf8'));
const bytes = (b64) => new Uint8Array(Buffer.from(b64, 'base64'));
const out = { cases: {}, steps: {} };
for (const c of input.cases) {
  try {
    out.steps[c.name] = stepOf(bytes(c.blob), 'case');
  } catch (exc) {
    out.steps[c.name] = `${exc.name}: ${exc.message}`;
  }
  try {
    const ck = await decodeCheckpoint(bytes(c.blob), 'case', c.expect);
    out.cases[c.name] = { ok: true, hash: ck.weightHash, step: ck.state.step };
    if (c.name === 'valid') {
      const again = await encodeCheckpoint(ck.state, { model: ck.model, optim: ck.optim,
        seed: ck.seed, tokenizerSha256: c.expect.tokenizerSha256 });
      out.reencoded = Buffer.from(again).toString('base64');
    }
  } catch (exc) {
    out.cases[c.name] = { ok: false, name: exc.name, message: exc.message };
  }
}
writeFileSync(process.argv[4], JSON.stringify(out));
"""


def _node() -> tuple[str, ...]:
    try:
        return node_argv()
    except NodeError as exc:
        pytest.skip(str(exc))


def trained_state() -> training.TrainState:
    """A tiny state after two steps: moments and bias products are not their initial values."""
    state = training.init(
        preset("tiny", vocab_size=2048, batch=1, seq_len=32), AdamWConfig(lr=3e-3), 7
    )
    tokens = np.arange(4096, dtype=np.uint16) % 2048
    for _ in range(2):
        x, y = sample_batch(tokens, 1, 32, state.seed, state.step)
        _loss, grads = training.compute_grads(state, x, y)
        training.apply_grads(state, grads)
    return state


def parts(blob: bytes) -> tuple[dict[str, Any], dict[str, str]]:
    return safetensors_io.decode(blob)


def rebuilt(blob: bytes, *, meta: dict[str, str | None] | None = None, **tensors: Any) -> bytes:
    """``blob`` with metadata fields replaced (None: removed) and tensors replaced (None:
    removed), encoded again by Python's writer."""
    t, m = parts(blob)
    for k, v in (meta or {}).items():
        if v is None:
            del m[k]
        else:
            m[k] = v
    for k, arr in tensors.items():
        name = k.replace("__", ".")
        if arr is None:
            del t[name]
        else:
            t[name] = arr
    return safetensors_io.encode(t, m)


def damaged(blob: bytes, state: training.TrainState) -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, the words both implementations must refuse them with)."""
    header = struct.unpack("<Q", blob[:8])[0]
    flipped = bytearray(blob)
    flipped[8 + header + 100] ^= 0x40
    t, _ = parts(blob)
    return {
        "too-short": (blob[:5], "too short"),
        "header-length": (struct.pack("<Q", 1 << 40) + blob[8:], "exceeds the file"),
        "header-not-json": (struct.pack("<Q", 4) + b"{x:1" + blob[12:], "not valid JSON"),
        "truncated": (blob[:-4], "lies outside"),
        "trailing": (blob + b"\0" * 4, "trailing bytes"),
        "flipped-weight": (bytes(flipped), "does not match the recorded"),
        "format": (rebuilt(blob, meta={"format": "other"}), "format is"),
        "format-version": (rebuilt(blob, meta={"format_version": "2"}), "format version 2"),
        "contract": (rebuilt(blob, meta={"contract_version": "9"}), "contract version 9"),
        "no-hash": (rebuilt(blob, meta={"weight_hash": None}), "'weight_hash' is missing"),
        "bad-model": (rebuilt(blob, meta={"model": "{}"}), "invalid configuration"),
        "recorded-hash": (rebuilt(blob, meta={"weight_hash": "0" * 64}), "does not match"),
        "missing-tensor": (rebuilt(blob, v__gf=None), "tensors do not match"),
        "wrong-shape": (
            rebuilt(blob, wpe=t["wpe"].reshape(64, 32)),
            "tensor 'wpe' is float32 (64, 32), the configuration (width 64, layers 2, vocab "
            "2048) needs float32 (32, 64); the dims are wrong for this model",
        ),
        "f64": (rebuilt(blob, gf=t["gf"].astype(np.float64)), "'gf' is float64 (64,)"),
        "bf16": (blob.replace(b'"dtype":"F32"', b'"dtype":"BF1"', 1), "unsupported dtype 'BF1'"),
        "no-step": (rebuilt(blob, meta={"step": None}), "'step' is missing"),
        "bad-step": (rebuilt(blob, meta={"step": "-1"}), "integers in decimal, not '-1'"),
        "spaced-seed": (rebuilt(blob, meta={"seed": " 7"}), "integers in decimal, not ' 7'"),
        "tokenizer": (blob, "trained with tokenizer"),
        "vocab": (blob, "vocabulary has 2048 tokens"),
    }


def test_js_checkpoints_are_pythons_bytes_and_refuse_what_python_refuses(tmp_path: Path) -> None:
    node = _node()
    state = trained_state()
    blob = checkpoint.encode(state, TOKENIZER)
    expect = {"tokenizerSha256": TOKENIZER, "vocabSize": 2048}
    cases: dict[str, tuple[bytes, str]] = damaged(blob, state)
    options = {name: expect for name in cases}
    options["tokenizer"] = {"tokenizerSha256": "cd" * 32, "vocabSize": 2048}
    options["vocab"] = {"tokenizerSha256": TOKENIZER, "vocabSize": 4096}
    # The oracle: Python refuses every damaged case.
    for name, (data, words) in cases.items():
        with pytest.raises((checkpoint.CheckpointError, safetensors_io.CheckpointFormatError)) as e:
            tensors, meta = safetensors_io.decode(data, "case")
            checkpoint.from_parts(
                tensors, meta, "case", options[name]["tokenizerSha256"], options[name]["vocabSize"]
            )
        assert words in str(e.value), (name, str(e.value))
    listed = [{"name": "valid", "blob": base64.b64encode(blob).decode(), "expect": expect}]
    listed += [
        {"name": n, "blob": base64.b64encode(d).decode(), "expect": options[n]}
        for n, (d, _w) in cases.items()
    ]
    (tmp_path / "in.json").write_text(json.dumps({"cases": listed}))
    (tmp_path / "check.mjs").write_text(SCRIPT)
    subprocess.run(
        [*node, str(tmp_path / "check.mjs"), MODULE, str(tmp_path / "in.json"),
         str(tmp_path / "out.json")],
        check=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    out = json.loads((tmp_path / "out.json").read_text())
    valid = out["cases"]["valid"]
    assert valid == {"ok": True, "hash": training.state_hash(state), "step": 2}
    assert base64.b64decode(out["reencoded"]) == blob, "JS must write Python's exact bytes"
    for name, (_data, words) in cases.items():
        got = out["cases"][name]
        assert got["ok"] is False and got["name"] == "ReplicaRefused", (name, got)
        assert words in got["message"], (name, got["message"])
    # stepOf: the step a page names its export by, read from the header alone.
    assert out["steps"]["valid"] == 2
    for name in ("too-short", "header-length", "header-not-json", "no-step", "bad-step"):
        assert out["steps"][name].startswith("ReplicaRefused: case: "), (name, out["steps"][name])
