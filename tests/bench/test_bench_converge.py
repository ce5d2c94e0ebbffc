"""``daisychain bench converge``'s gradient figures (server/daisychain/bench/converge.py).

The benchmark itself runs thousands of steps (docs/BENCHMARKS.md); here its measurements run on
an untrained ``tiny`` model, against their definitions, and on a planted bias they must report.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from daisychain import batches, training
from daisychain.bench import converge
from daisychain.cli import main
from daisychain.corpus import load_builtin_text, split_train_val
from daisychain.model import gpt, quality, reference
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
from daisychain.tokenizer import load_default
from daisychain.tokenizer.cache import encode_corpus_cached

K = 3


def _setup() -> tuple[training.TrainState, np.ndarray]:
    tok = load_default()
    _, val_text = split_train_val(load_builtin_text())
    tokens = encode_corpus_cached(val_text, tok)
    cfg = preset("tiny", vocab_size=tok.vocab_size)
    return training.init(cfg, AdamWConfig(lr=3e-3, warmup_steps=20), 5), tokens


def test_averaged_figures_are_bias_ratio_and_mean_cosine_by_their_definitions() -> None:
    state, tokens = _setup()
    got = converge.averaged_quality(state, tokens, K)
    assert got["batches"] == K
    # The same figures from the K gradients kept whole, by quality.py's definitions.
    p64 = reference.cast_params(state.params, np.float64)
    errors: dict[str, list[np.ndarray]] = {}
    backward: dict[str, list[np.ndarray]] = {}
    means: dict[str, list[np.ndarray]] = {}
    for i in range(K):
        x, y = batches.sample_batch(
            tokens, state.cfg.batch, state.cfg.seq_len, state.seed ^ 0xA7E, i
        )
        _, want, _ = reference.forward_backward(p64, state.cfg, x, y)
        _, mine = gpt.forward_backward(state.params, state.cfg, x, y)
        _, exact = gpt.forward_backward(state.params, state.cfg, x, y, quality.ExactBackwardOps())
        for name, g in mine.items():
            errors.setdefault(name, []).append((g.astype(np.float64) - want[name]).ravel())
            backward.setdefault(name, []).append((g.astype(np.float64) - exact[name]).ravel())
            means.setdefault(name, []).append(np.stack([g.ravel(), want[name].ravel()]))
    assert set(got["bias_ratio"]) == set(errors) == set(state.params)
    for name, errs in errors.items():
        assert got["bias_ratio"][name] == pytest.approx(quality.bias_ratio(errs), abs=1e-3), name
        assert got["backward_bias_ratio"][name] == pytest.approx(
            quality.bias_ratio(backward[name]), abs=1e-3
        ), name
        pair = np.mean(np.stack(means[name]), axis=0)
        assert got["mean_grad_cosine"][name] == pytest.approx(
            quality.cosine(pair[0], pair[1]), abs=1e-6
        ), name
        # The persistent part: |mean e|^2 less the noise's share (mean |e|^2 / K), unbiased.
        mean_e = np.mean(np.stack(errs), axis=0)
        noise = np.mean([float(e @ e) for e in errs])
        persistent = max(0.0, (K * float(mean_e @ mean_e) - noise) / (K - 1))
        share = np.sqrt(persistent) / np.linalg.norm(pair[1])
        assert got["persistent_share"][name] == pytest.approx(share, abs=1e-4), name
        mean_b = np.mean(np.stack(backward[name]), axis=0)
        noise_b = np.mean([float(e @ e) for e in backward[name]])
        persistent_b = max(0.0, (K * float(mean_b @ mean_b) - noise_b) / (K - 1))
        assert got["backward_persistent_share"][name] == pytest.approx(
            np.sqrt(persistent_b) / np.linalg.norm(pair[1]), abs=1e-4
        ), name
        along = float(mean_e @ pair[1]) / float(pair[1] @ pair[1])
        assert got["mean_scale_error"][name] == pytest.approx(along, abs=1e-4), name


def test_a_planted_bias_in_one_tensor_shows_in_its_bias_ratio(monkeypatch: Any) -> None:
    state, tokens = _setup()
    honest = converge.averaged_quality(state, tokens, K)
    real = gpt.forward_backward

    def biased(*args: Any, **kwargs: Any) -> Any:
        loss, grads = real(*args, **kwargs)
        g = grads["h.0.wqkv"]
        # The same push on every batch, a quarter of the tensor's typical size.
        grads["h.0.wqkv"] = g + np.float32(0.25 * float(np.sqrt(np.mean(g * g))))
        return loss, grads

    monkeypatch.setattr(gpt, "forward_backward", biased)
    planted = converge.averaged_quality(state, tokens, K)
    assert planted["bias_ratio"]["h.0.wqkv"] > 1.5 * honest["bias_ratio"]["h.0.wqkv"]
    assert planted["bias_ratio"]["h.0.wqkv"] > 1.6, planted["bias_ratio"]["h.0.wqkv"]
    assert planted["bias_ratio"]["wte"] == honest["bias_ratio"]["wte"], "only the planted tensor"
    assert planted["persistent_share"]["h.0.wqkv"] > 0.1 + honest["persistent_share"]["h.0.wqkv"]
    # Planted in the forward's gradient (the same for the exact backward): not the backward's.
    assert planted["backward_bias_ratio"] == honest["backward_bias_ratio"]


def test_persistent_share_finds_a_planted_part_under_noise_and_not_in_noise_alone() -> None:
    rng = np.random.default_rng(7)
    k, n = 16, 4000
    noise = [rng.normal(size=n) for _ in range(k)]
    truth = np.ones(n)  # the mean gradient the share is measured against: |truth| = sqrt(n)
    for planted in (0.0, 0.2, 0.5):
        errs = [e + planted * truth for e in noise]
        mean_e = np.mean(np.stack(errs), axis=0)
        mean_sq = float(np.mean([e @ e for e in errs]))
        got = converge.persistent_share(mean_e, mean_sq, k, float(np.linalg.norm(truth)))
        assert got == pytest.approx(planted, abs=0.05), (planted, got)


def test_the_command_reports_both_runs_and_the_averaged_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "converge", "--preset", "tiny", "--steps", "3", "--warmup", "1"]
    main([*argv, "--val-batches", "2", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (doc["schedule"], doc["val_batches"]) == ("linear", 2)
    [run] = doc["runs"]
    assert run["seed"] == 1 and {"contract", "reference", "val_loss_ratio"} <= set(run)
    assert run["averaged"]["batches"] == converge.AVERAGE_BATCHES
    for figure in ("bias_ratio", "backward_bias_ratio", "persistent_share", "mean_scale_error"):
        assert set(run["averaged"][figure]) == set(run["gradient_quality"]["grad_cosine_median"])
    assert all(0.9 < c <= 1.0 for c in run["averaged"]["mean_grad_cosine"].values()), run


def test_bad_arguments_get_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "converge", "--seeds", "1,x"])
    assert "comma-separated integers" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="needs --steps \\(2\\) above --warmup \\(20\\)"):
        main(["bench", "converge", "--preset", "tiny", "--steps", "2"])
    with pytest.raises(SystemExit, match="--val-batches: at least 1"):
        main(["bench", "converge", "--preset", "tiny", "--val-batches", "0"])


def test_the_group_mode_trains_the_same_first_step_as_one_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--peers``: the group and one process start from the same state on the same global
    batch, so their first losses agree (the exchange only acts on the update); every share
    layout, a share of 0 included, covers the whole batch."""
    argv = [
        "bench",
        "converge",
        "--preset",
        "tiny",
        "--steps",
        "2",
        "--schedule",
        "constant",
        "--warmup",
        "0",
        "--val-batches",
        "1",
        "--json",
        "--peers",
        "3",
        "--shares",
        "5,0,3",
    ]
    main(argv)  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert (doc["mode"], doc["global_batch"], doc["shares"]) == ("group", 8, [5, 0, 3])
    [run] = doc["runs"]
    assert abs(run["group"]["first_loss"] - run["one-process"]["first_loss"]) < 1e-3, run
    assert run["group"]["val_loss"] != run["one-process"]["val_loss"], "the exchange quantizes"
    assert 0.9 < run["val_loss_ratio"] < 1.1


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--peers", "0", "--shares", "1"], "--peers: at least 1"),
        (["--peers", "2", "--shares", "4"], "2 integers >= 0"),
        (["--peers", "2", "--shares", "4,x"], "comma-separated integers"),
        (["--peers", "2", "--shares", "0,0"], "not all 0"),
        (["--peers", "2", "--shares", "3,-1"], "2 integers >= 0"),
    ],
)
def test_bad_group_arguments_get_a_clear_error(extra: list[str], why: str) -> None:
    with pytest.raises(SystemExit, match=why):
        main(["bench", "converge", "--preset", "tiny", "--steps", "2", "--schedule", "constant",
              "--warmup", "0", *extra])  # fmt: skip
