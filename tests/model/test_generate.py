"""Generation (daisychain.generate, docs/MODEL.md "Sampling"): the golden vectors, the rule's
properties, every settings check and the ``daisychain generate`` command.

The golden checkpoint is rebuilt from its recipe (vectorgen.generation) once per process
and must have the recorded weight hash; the JS mirror (tests/js/generate.test.mjs) and the inference
kit in Chromium (tests/browser/test_browser_kit.py) check the same cases.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daisychain import cli, generate, safetensors_io
from daisychain.generate import GenerateError, Settings
from daisychain.model.config import preset
from daisychain.model.params import init_params
from daisychain.numerics import CONTRACT_VERSION
from daisychain.tokenizer import load_default
from vectorgen.generation import VECTORS, golden_checkpoint

DOC: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))


def _settings(s: dict[str, Any]) -> Settings:
    return Settings(s["temperature"], s["top_k"], s["seed"], s["max_tokens"])


@pytest.fixture(scope="module")
def golden() -> Path:
    return golden_checkpoint()


def test_vectors_header() -> None:
    assert DOC["format"] == "daisychain-generate-vectors"
    assert (DOC["format_version"], DOC["contract_version"]) == (1, 1)
    names = [c["name"] for c in DOC["cases"]]
    assert len(names) == len(set(names)) >= 10


def test_golden_cases_match_the_reference(golden: Path) -> None:
    from daisychain import checkpoint

    tok = load_default()
    ck = checkpoint.load(golden, tokenizer_sha256=tok.sha256, vocab_size=tok.vocab_size)
    assert ck.weight_hash == DOC["checkpoint"]["weight_hash"]
    for case in DOC["cases"]:
        g = generate.generate(
            ck.state.params, ck.state.cfg, tok, case["prompt"], _settings(case["settings"])
        )
        assert (g.prompt_ids, g.ids, g.text, g.stop) == (
            case["prompt_ids"],
            case["ids"],
            case["text"],
            case["stop"],
        ), case["name"]


def test_golden_cases_cover_the_brief() -> None:
    cases = DOC["cases"]
    temps = {c["settings"]["temperature"] for c in cases}
    ks = {c["settings"]["top_k"] for c in cases}
    assert 0.0 in temps and len(temps) >= 5
    assert {1, None, 2048} <= ks
    assert len({c["settings"]["seed"] for c in cases}) >= 6
    assert any(c["prompt"] == "" for c in cases)
    assert max(len(c["prompt_ids"]) for c in cases) > preset("tiny").seq_len  # window slides
    # temperature 0 ignores the seed; vocabulary-wide top-k equals top_k=None
    by = {c["name"]: c["ids"] for c in cases}
    assert by["greedy"] == by["greedy-topk1-sampling-seed-ignored"] == by["topk1-hot"]
    assert by["t1-vocab-s7"] == by["t1-k2048-s7"]
    assert by["t08-k40-s1"] != by["t08-k40-s2"]


def test_pick_cases() -> None:
    for case in DOC["pick"]:
        logits = np.array(case["logits_bits"], dtype=np.uint32).view(np.float32)
        got = generate.pick(
            logits, np.float32(case["temperature"]), case["top_k"], case["seed"], case["position"]
        )
        assert got == case["id"], case["name"]


def test_candidate_order_ties_and_signed_zero() -> None:
    order = generate.candidate_order(np.array([1, 3, 3, 0, 3], dtype=np.float32))
    assert order.tolist() == [1, 2, 4, 0, 3]
    assert generate.candidate_order(np.array([-0.0, 0.0, -1], dtype=np.float32)).tolist() == [
        0,
        1,
        2,
    ]
    for bad in (np.nan, np.inf):
        with pytest.raises(GenerateError, match="diverged"):
            generate.candidate_order(np.array([0, bad], dtype=np.float32))


def test_draws_follow_the_softmax() -> None:
    """Over many positions the rule picks each candidate about as often as softmax(l / T) says
    (a wrong threshold, a missing temperature or an off-by-one walk moves these frequencies)."""
    logits = np.array([0.0, math.log(2), math.log(3), math.log(4), -50.0], dtype=np.float32)
    for temperature, expected in ((1.0, [0.1, 0.2, 0.3, 0.4, 0.0]), (2.0, None)):
        counts = np.zeros(5)
        n = 6000
        for pos in range(n):
            counts[generate.pick(logits, np.float32(temperature), 5, 17, pos)] += 1
        freq = counts / n
        if expected is None:
            w = np.exp(logits.astype(np.float64) / temperature)
            expected = list(w / w.sum())
        assert np.max(np.abs(freq - np.array(expected))) < 0.02, (temperature, freq)
    # top-k 2 keeps only the two largest logits
    picks = {generate.pick(logits, np.float32(1.0), 2, 17, pos) for pos in range(300)}
    assert picks == {2, 3}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"temperature": -0.1}, "negative; use 0 for greedy"),
        ({"temperature": float("nan")}, "finite number"),
        ({"temperature": float("inf")}, "finite number"),
        ({"temperature": "1"}, "finite number"),
        ({"temperature": 100.5}, "above 100"),
        ({"top_k": 0}, "top_k must be a positive integer"),
        ({"top_k": 2.5}, "top_k must be a positive integer"),
        ({"seed": -1}, r"seed must be an integer in \[0, 4294967295\]"),
        ({"seed": 2**32}, "seed must be an integer"),
        ({"max_tokens": 0}, r"max_tokens must be an integer in \[1, 1024\]"),
        ({"max_tokens": generate.MAX_NEW_TOKENS + 1}, "ask for fewer tokens"),
    ],
)
def test_settings_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(GenerateError, match=message):
        Settings(**fields)


def test_settings_edges_allowed_and_top_k_against_vocabulary() -> None:
    assert Settings(temperature=100.0, top_k=None, seed=2**32 - 1, max_tokens=1024).top_k is None
    with pytest.raises(GenerateError, match=r"exceeds the vocabulary \(2048 tokens\)"):
        Settings(top_k=2049).top_k_for(2048)
    assert Settings(top_k=2048).top_k_for(2048) == 2048
    assert Settings(top_k=None).top_k_for(2048) == 2048


def test_prompt_checks() -> None:
    tok = load_default()
    cfg = preset("tiny")
    params = init_params(cfg, 1)
    one = Settings(max_tokens=1)
    assert generate.start_context([], 2047) == [2047]
    with pytest.raises(GenerateError, match="no <\\|endoftext\\|> token"):
        generate.start_context([], None)
    long_prompt = "a b " * generate.MAX_PROMPT_TOKENS
    with pytest.raises(GenerateError, match=r"above 4096; .*shorten it"):
        generate.generate(params, cfg, tok, long_prompt, one)
    with pytest.raises(GenerateError, match="lone surrogate"):
        generate.generate(params, cfg, tok, "bad \ud800 text", one)
    other = preset("tiny", vocab_size=300)
    with pytest.raises(GenerateError, match="tokenizer has 2048 tokens, the model 300"):
        generate.generate(init_params(other, 1), other, tok, "x", one)
    with pytest.raises(GenerateError, match="exceeds the vocabulary"):
        generate.generate(params, cfg, tok, "x", Settings(top_k=4096))


# ----------------------------------------------------------------------------------------------
# the command


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["generate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_gives_the_golden_ids(golden: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in DOC["cases"] if c["name"] == "t08-k40-s2")
    s = case["settings"]
    code, out, _ = _run(
        [str(golden), "--prompt", case["prompt"], "--seed", str(s["seed"]), "--max-tokens",
         str(s["max_tokens"]), "--temperature", str(s["temperature"]), "--top-k",
         str(s["top_k"]), "--json"],
        capsys,
    )  # fmt: skip
    assert code == 0
    record = json.loads(out)
    assert record["ids"] == case["ids"] and record["prompt_ids"] == case["prompt_ids"]
    assert record["text"] == case["text"] and record["stop"] == case["stop"]
    assert record["checkpoint"]["weight_hash"] == DOC["checkpoint"]["weight_hash"]


def test_cli_prints_prompt_and_text(golden: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in DOC["cases"] if c["name"] == "greedy")
    code, out, err = _run(
        [str(golden), "--prompt", case["prompt"], "--temperature", "0", "--max-tokens", "24"],
        capsys,
    )
    assert code == 0
    assert out == case["prompt"] + case["text"] + "\n"
    assert "24 tokens, stop: length" in err


def _rewrite(golden: Path, dest: Path, **meta: str) -> Path:
    tensors, old = safetensors_io.load(golden)
    safetensors_io.save(dest, tensors, {**old, **meta})
    return dest


def _bytes(dest: Path, data: bytes) -> Path:
    dest.write_bytes(data)
    return dest


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda g, d: d / "missing.safetensors", "does not exist; check the path"),
        (lambda g, d: _bytes(d / "cut.safetensors", g.read_bytes()[:5000]), "truncated"),
        (
            lambda g, d: _bytes(d / "text.safetensors", b"not a checkpoint at all"),
            "exceeds the file",
        ),
        (
            lambda g, d: _rewrite(
                g, d / "other.safetensors", contract_version=str(CONTRACT_VERSION + 1)
            ),
            f"numerical contract version {CONTRACT_VERSION + 1}.*Use the DaisyChain version that "
            "wrote it",
        ),
        (
            lambda g, d: _rewrite(g, d / "tok.safetensors", tokenizer_sha256="ab" * 32),
            "load it with the tokenizer it was trained with",
        ),
        (
            lambda g, d: _rewrite(g, d / "hash.safetensors", weight_hash="00" * 32),
            "the file is corrupted",
        ),
    ],
)
def test_cli_refuses_bad_checkpoints(
    golden: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    path = make(golden, tmp_path)
    code, out, err = _run([str(path), "--prompt", "x", "--max-tokens", "2"], capsys)
    assert code == 2 and out == ""
    assert err.startswith("daisychain generate: ")
    assert re.search(message, err), err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--temperature", "-1"], "negative"),
        (["--top-k", "0"], "top_k must be a positive integer"),
        (["--top-k", "5000"], "exceeds the vocabulary"),
        (["--seed", "4294967296"], "seed must be an integer"),
        (["--max-tokens", "5000"], "ask for fewer tokens"),
        (["--prompt", "a b " * 4097], "shorten it"),
    ],
)
def test_cli_refuses_bad_settings(
    golden: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = _run([str(golden), *args], capsys)
    assert code == 2 and out == "" and message in err, err


def test_empty_context_refused() -> None:
    cfg = preset("tiny")
    with pytest.raises(GenerateError, match="the context is empty"):
        next(generate.steps(init_params(cfg, 1), cfg, [], Settings(), 2047))


def test_cumsum_probe_tells_sequential_from_pairwise() -> None:
    """The import-time probe: numpy's float32 cumsum adds left to right here; a pairwise or
    reassociated sum of the probe's values gives another float32, so the probe would fail."""
    assert generate._cumsum_is_sequential()
    x = np.array([1.0, 2.0**-24, 2.0**-24], dtype=np.float32)
    assert np.float32(x[0] + (x[1] + x[2])) != np.cumsum(x, dtype=np.float32)[-1]
