"""Checkpoints: safetensors round trip (the library is the oracle) and every rejection path."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from daisychain import checkpoint, training
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig

TOK_SHA = "ab" * 32


@pytest.fixture(scope="module")
def state() -> training.TrainState:
    cfg = preset("tiny", vocab_size=256, layers=1, batch=2, seq_len=16)
    st = training.init(cfg, AdamWConfig(lr=1e-3), seed=7)
    tokens = np.arange(4000, dtype=np.int64) * 7919 % 256
    for _ in range(2):
        x, y = training.next_batch(st, tokens)
        training.train_step(st, x, y, with_hash=False)
    return st


def test_round_trip_is_readable_by_the_safetensors_library(
    state: training.TrainState, tmp_path: Path
) -> None:
    path = tmp_path / "ck.safetensors"
    digest = checkpoint.save(path, state, TOK_SHA)
    oracle = load_file(str(path))
    assert set(oracle) == {
        *state.params,
        *(f"m.{k}" for k in state.params),
        *(f"v.{k}" for k in state.params),
    }
    for name, arr in state.params.items():
        assert oracle[name].dtype == np.float32
        assert oracle[name].tobytes() == arr.tobytes()
    ck = checkpoint.load(path, tokenizer_sha256=TOK_SHA, vocab_size=256)
    assert ck.step == 2
    assert ck.weight_hash == digest == training.state_hash(state)
    assert ck.state.opt_state.p1 == state.opt_state.p1
    assert ck.state.cfg == state.cfg


def test_a_file_written_by_the_library_loads(state: training.TrainState, tmp_path: Path) -> None:
    ours = tmp_path / "ours.safetensors"
    checkpoint.save(ours, state, TOK_SHA)
    tensors = load_file(str(ours))
    with open(ours, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n))["__metadata__"]
    theirs = tmp_path / "theirs.safetensors"
    save_file(tensors, str(theirs), metadata=meta)
    ck = checkpoint.load(theirs)
    assert ck.weight_hash == training.state_hash(state)


def test_truncated_file_is_rejected(state: training.TrainState, tmp_path: Path) -> None:
    path = tmp_path / "ck.safetensors"
    checkpoint.save(path, state, TOK_SHA)
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) - 100])
    with pytest.raises(checkpoint.CheckpointError, match="truncated"):
        checkpoint.load(path)
    path.write_bytes(blob[:5])
    with pytest.raises(checkpoint.CheckpointError, match="too short"):
        checkpoint.load(path)


def _rewrite(path: Path, edit_meta: dict[str, str], tensors_edit: dict[str, np.ndarray]) -> None:
    tensors = load_file(str(path))
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n))["__metadata__"]
    meta.update(edit_meta)
    tensors.update(tensors_edit)
    save_file(tensors, str(path), metadata=meta)


def test_wrong_dims_are_rejected(state: training.TrainState, tmp_path: Path) -> None:
    path = tmp_path / "ck.safetensors"
    checkpoint.save(path, state, TOK_SHA)
    _rewrite(path, {}, {"h.0.w1": np.zeros((64, 100), dtype=np.float32)})
    with pytest.raises(checkpoint.CheckpointError, match=r"h\.0\.w1.*dims are wrong"):
        checkpoint.load(path)


def test_wrong_vocabulary_is_rejected(state: training.TrainState, tmp_path: Path) -> None:
    path = tmp_path / "ck.safetensors"
    checkpoint.save(path, state, TOK_SHA)
    with pytest.raises(checkpoint.CheckpointError, match=r"vocabulary has 256 tokens.*2048"):
        checkpoint.load(path, vocab_size=2048)
    with pytest.raises(checkpoint.CheckpointError, match="different vocabulary"):
        checkpoint.load(path, tokenizer_sha256="cd" * 32)


def test_wrong_contract_version_is_rejected(state: training.TrainState, tmp_path: Path) -> None:
    path = tmp_path / "ck.safetensors"
    checkpoint.save(path, state, TOK_SHA)
    _rewrite(path, {"contract_version": "99"}, {})
    with pytest.raises(checkpoint.CheckpointError, match="contract version 99"):
        checkpoint.load(path)


def test_corrupted_weights_fail_the_hash(state: training.TrainState, tmp_path: Path) -> None:
    path = tmp_path / "ck.safetensors"
    checkpoint.save(path, state, TOK_SHA)
    bad = state.params["gf"].copy()
    bad[3] = np.float32(2.5)
    _rewrite(path, {}, {"gf": bad})
    with pytest.raises(checkpoint.CheckpointError, match="corrupted"):
        checkpoint.load(path)


def test_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    save_file({"a": np.zeros(3, dtype=np.float32)}, str(path))
    with pytest.raises(checkpoint.CheckpointError, match="not a DaisyChain checkpoint"):
        checkpoint.load(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        checkpoint.load(tmp_path / "missing.safetensors")


def test_save_is_atomic(state: training.TrainState, tmp_path: Path) -> None:
    path = tmp_path / "ck.safetensors"
    checkpoint.save(path, state, TOK_SHA)
    assert not (tmp_path / "ck.safetensors.tmp").exists()
