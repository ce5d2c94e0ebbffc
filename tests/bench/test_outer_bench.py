"""``daisychain bench converge --sync outer``: the report's shape and its byte accounting.

The benchmark's figures come from long runs (docs/OUTER.md); here a few steps of ``tiny`` check
what the report holds, that both modes train the same tokens, and that the bytes follow from
the exchange's sizes. No timing and no loss threshold: those are the benchmark's to measure.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from daisychain.cli import main
from daisychain.model.config import preset
from daisychain.wire import codec

STEPS = 4
ARGV = [
    "bench", "converge", "--sync", "outer", "--preset", "tiny", "--steps", str(STEPS),
    "--warmup", "1", "--peers", "2", "--val-batches", "1", "--curve-points", "2", "--json",
]  # fmt: skip


def _run(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    main([*ARGV, *extra])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_the_report_holds_both_modes_their_bytes_and_curves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = _run(capsys, "--H", "2,3", "--compress", "int8,topk:4+ef")
    assert (doc["mode"], doc["peers"], doc["H"]) == ("outer", 2, [2, 3])
    assert doc["compress"] == ["int8", "topk:4+ef"]
    assert doc["targets"] == {"val_loss_ratio_max": 1.01, "bytes_ratio_min": 100.0}
    assert isinstance(doc["meets_targets"], list)
    [run] = doc["runs"]
    base = run["per_step"]
    cfg = preset("tiny")
    tokens = STEPS * cfg.batch * cfg.seq_len  # one peer's, over the run
    assert doc["tokens_per_peer_step"] == cfg.batch * cfg.seq_len
    assert base["bytes_per_token"] == round(base["bytes_per_peer"] / tokens, 4)
    assert [p["step"] for p in base["curve"]] == [2, STEPS]
    assert [(o["H"], o["compression"]) for o in run["outer"]] == [
        (2, "int8"), (2, "topk:4+ef"), (3, "int8"), (3, "topk:4+ef"),
    ]  # fmt: skip
    one_exchange = base["bytes_per_peer"] // STEPS
    for r in run["outer"]:
        rounds = -(-STEPS // r["H"])  # a last, shorter round: equal tokens
        assert r["outer_steps"] == rounds and len(r["outer_hash"]) == 64
        assert r["curve"][-1]["step"] == STEPS and r["curve"][-1]["tokens"] == 2 * tokens
        assert r["val_loss"] == r["curve"][-1]["val_loss"]
        assert r["val_loss_ratio"] == round(r["val_loss"] / base["val_loss"], 4)
        sizes = [p["bytes_per_peer"] for p in r["curve"]]
        assert sizes == sorted(sizes) and sizes[-1] == r["bytes_per_peer"]
        if r["compression"] == "int8":  # the gradient exchange's bytes, once per round
            assert r["bytes_per_peer"] == rounds * one_exchange
        else:  # every block's exponent, 4 indices and 4 values, to the one other peer
            blocks = one_exchange // (codec.BLOCK + 1)
            assert r["bytes_per_peer"] == rounds * blocks * 9
        assert r["bytes_ratio"] == round(base["bytes_per_peer"] / r["bytes_per_peer"], 1)


def test_the_outer_run_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    first = _run(capsys, "--H", "3", "--compress", "topk:2+ef")
    again = _run(capsys, "--H", "3", "--compress", "topk:2+ef")
    hashes = [[r["outer_hash"] for r in doc["runs"][0]["outer"]] for doc in (first, again)]
    assert hashes[0] == hashes[1]


def test_unequal_shares_train_the_same_sequences_cut_either_way(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--shares: the outer peers' inner work is unequal (a slow device's small share), per-step
    mode is untouched. Shares of one batch each are the default run, bit for bit, and the two
    cuts of a round are the same steps there; 7 and 1 of tiny's 4 + 4 are another outer run (the
    token weights and the inner steps differ), and there the cuts differ too."""
    args = ("--H", "3", "--compress", "int8")
    runs = {
        extra: _run(capsys, *args, *extra)
        for extra in ((), ("--shares", "4,4"), ("--shares", "4,4", "--cut", "batch"),
                      ("--shares", "7,1"), ("--shares", "7,1", "--cut", "batch"))
    }  # fmt: skip
    default = runs[()]
    assert default["shares"] == [4, 4] and default["cut"] == "share"
    for doc in runs.values():
        assert doc["runs"][0]["per_step"]["val_loss"] == default["runs"][0]["per_step"]["val_loss"]
    h = {extra: doc["runs"][0]["outer"][0]["outer_hash"] for extra, doc in runs.items()}
    assert h[()] == h[("--shares", "4,4")] == h[("--shares", "4,4", "--cut", "batch")]
    assert len({h[()], h[("--shares", "7,1")], h[("--shares", "7,1", "--cut", "batch")]}) == 3


def test_normalize_steps_rescales_unequal_step_counts_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--normalize-steps (an experiment): with shares 7 and 1 cut by the batch the peers take
    unequal inner steps, so their pseudo-gradients are rescaled and the outer run differs; the
    per-step run and the bytes do not."""
    args = ("--H", "3", "--compress", "int8", "--shares", "7,1", "--cut", "batch")
    plain, scaled = _run(capsys, *args), _run(capsys, *args, "--normalize-steps")
    assert scaled["normalize_steps"] is True and plain["normalize_steps"] is False
    a, b = plain["runs"][0], scaled["runs"][0]
    assert a["per_step"]["val_loss"] == b["per_step"]["val_loss"]
    assert a["outer"][0]["outer_hash"] != b["outer"][0]["outer_hash"]
    assert a["outer"][0]["bytes_per_peer"] == b["outer"][0]["bytes_per_peer"]


def test_overlap_changes_the_outer_run_only(capsys: pytest.CaptureFixture[str]) -> None:
    """--overlap 0.5: each peer's round of 3 inner steps is measured after 2, the third reaches
    the outer weights a round later (the carry): another outer run, the same per-step run, the
    same bytes (the same exchanges)."""
    args = ("--H", "3", "--compress", "int8")
    plain, lapped = _run(capsys, *args), _run(capsys, *args, "--overlap", "0.5")
    assert lapped["overlap"] == 0.5 and plain["overlap"] == 0.0
    a, b = plain["runs"][0], lapped["runs"][0]
    assert a["per_step"]["val_loss"] == b["per_step"]["val_loss"]
    assert a["outer"][0]["outer_hash"] != b["outer"][0]["outer_hash"]
    assert a["outer"][0]["bytes_per_peer"] == b["outer"][0]["bytes_per_peer"]


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--H", "0"], "must be >= 1"),
        (["--H", "ten"], "comma-separated integers"),
        (["--compress", "topk"], "use int8, int8\\+ef, topk:K or topk:K\\+ef"),
        (["--compress", "topk:300"], "1..256"),
    ],
)
def test_bad_outer_options_are_refused_with_a_hint(
    extra: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*ARGV, *extra])
    assert why.replace("\\", "") in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--shares", "4,3"], "--shares with --sync outer: they must sum to peers x batch = 8"),
        (["--shares", "8"], "--shares: 2 integers >= 0 \\(one per peer\\)"),
        (["--outer-momentum", "1.0"], "outer momentum must lie in \\[0, 1\\)"),
        (["--overlap", "1.5"], "overlap must lie in \\[0, 1\\], got 1.5"),
        (["--outer-lr", "0"], "outer lr must be finite and > 0"),
        (["--curve-points", "0"], "--curve-points: at least 1"),
        (["--batch", "-2"], "--batch: sequences per peer, at least 1"),
        (
            ["--warm-start", "-1"],
            "--warm-start: at least 0 steps, got -1 \\(e.g. --warm-start 100\\)",
        ),
    ],
)
def test_bad_outer_runs_are_refused_with_a_hint(extra: list[str], why: str) -> None:
    with pytest.raises(SystemExit, match=why):
        main([*ARGV, *extra])


def _without(argv: list[str], flag: str) -> list[str]:
    i = argv.index(flag)
    return argv[:i] + argv[i + 2 :]


def test_a_warm_start_is_the_per_step_runs_start_and_is_not_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--warm-start W``: both modes start from W per-step steps. The per-step run then ends
    where a run of W + steps from scratch ends (one schedule, the same batches), bit for bit in
    its validation loss; steps, tokens and bytes count only after W; the outer run starts from
    those weights too (its first round's outer hash differs from a cold start's)."""
    base = _without(ARGV, "--steps")
    main([*base, "--steps", str(STEPS), "--warm-start", "2", "--H", "4", "--compress", "int8"])
    warm = json.loads(capsys.readouterr().out)
    main([*base, "--steps", str(STEPS + 2), "--H", "4", "--compress", "int8"])
    cold_longer = json.loads(capsys.readouterr().out)
    main([*base, "--steps", str(STEPS), "--H", "4", "--compress", "int8"])
    cold = json.loads(capsys.readouterr().out)
    assert warm["warm_start"] == 2 and cold["warm_start"] == 0
    [w], [c6], [c4] = warm["runs"], cold_longer["runs"], cold["runs"]
    assert w["per_step"]["val_loss"] == c6["per_step"]["val_loss"]
    assert w["per_step"]["val_loss"] != c4["per_step"]["val_loss"]
    assert [p["step"] for p in w["per_step"]["curve"]] == [2, STEPS]
    assert w["per_step"]["bytes_per_peer"] == c4["per_step"]["bytes_per_peer"]
    assert w["outer"][0]["curve"][-1]["tokens"] == c4["outer"][0]["curve"][-1]["tokens"]
    assert w["outer"][0]["outer_hash"] != c4["outer"][0]["outer_hash"]


def test_a_batch_sets_each_peers_sequences_in_both_modes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = _run(capsys, "--H", "2", "--compress", "int8", "--batch", "3")
    cfg = preset("tiny")
    assert doc["batch"] == 3 and doc["tokens_per_peer_step"] == 3 * cfg.seq_len
    [run] = doc["runs"]
    assert run["per_step"]["curve"][-1]["tokens"] == 2 * STEPS * 3 * cfg.seq_len
    assert run["outer"][0]["curve"][-1]["tokens"] == 2 * STEPS * 3 * cfg.seq_len


def test_an_outer_lr_scaled_by_the_inner_schedule_changes_the_outer_steps_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--outer-schedule inner`` (an experiment, OUTER.md): each round's outer lr is scaled by
    the inner schedule, so the outer weights differ from the constant lr's from the first round
    on, while per-step mode and the bytes stay what they were."""
    extra = ("--H", "2", "--compress", "int8", "--schedule", "linear")
    constant = _run(capsys, *extra)
    scaled = _run(capsys, *extra, "--outer-schedule", "inner")
    assert (constant["outer_schedule"], scaled["outer_schedule"]) == ("constant", "inner")
    [a], [b] = constant["runs"][0]["outer"], scaled["runs"][0]["outer"]
    assert a["outer_hash"] != b["outer_hash"]
    assert a["bytes_per_peer"] == b["bytes_per_peer"]
    assert constant["runs"][0]["per_step"] == {
        **scaled["runs"][0]["per_step"],
        "seconds": constant["runs"][0]["per_step"]["seconds"],
    }
