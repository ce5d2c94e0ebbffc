"""The outer loop's golden vectors (tests/vectors/outer/, ``python tests/vectorgen --write outer``):
the committed files are what the generator writes, the check refuses them once the reference's
rule changes (a planted unweighted mean, a planted momentum order), and the cases hold what
their names promise. ``tests/js/outer.test.mjs`` replays them through static/js/outer/."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from daisychain.outer import nesterov
from vectorgen import outer as vectors
from vectorgen.files import SOURCE_DIR, Stale


def _f32(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4")


def _mean_cases() -> dict[str, dict]:  # type: ignore[type-arg]
    data = json.loads((SOURCE_DIR / "outer" / "mean.json").read_text(encoding="utf-8"))
    return {c["name"]: c for c in data["cases"]}


def test_committed_files_are_what_write_produces() -> None:
    assert vectors.check(SOURCE_DIR) == "outer/mean.json, outer/nesterov.json up to date"


def test_the_cases_hold_what_they_promise() -> None:
    cases = _mean_cases()
    ties = _f32(cases["add-ties"]["mean"])
    # 1 + 2^-24 rounds to 1 (even); (1 + 2^-23) + 2^-24 to 1 + 2^-22; 2^24 + 3 to 2^24 + 4
    assert ties[0] == 0.5 and ties[1] == np.float32(0.5 + 2.0**-23) and ties[4] == 8388610.0
    # roster order: 1 + 2^-24 + 2^-24 is 1, the other order 1 + 2^-23
    assert _f32(cases["roster-order"]["mean"])[2] == np.float32(1.0 + 2.0**-23) / np.float32(3)
    zero = cases["zero-share"]
    assert zero["tokens"][1] == 0 and np.isnan(_f32(zero["values"][1])).any()
    assert np.isfinite(_f32(zero["mean"])).all()
    one = cases["one-peer"]
    assert one["mean"] == one["values"][0]


def test_check_refuses_an_unweighted_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the reference averages without weights. The generator's own guard (a gcd case
    must tell the weighted and unweighted means apart) stops before anything is compared."""

    def unweighted(values: list[np.ndarray], tokens: list[int]) -> np.ndarray:
        kept = [v for v, t in zip(values, tokens, strict=True) if t > 0]
        return np.sum(kept, axis=0, dtype=np.float32) / np.float32(len(kept))

    monkeypatch.setattr(vectors, "weighted_mean", unweighted)
    with pytest.raises(AssertionError, match="gcd-6-3-3"):
        vectors.check(SOURCE_DIR)


def test_check_refuses_the_momentum_in_the_wrong_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the look-ahead takes the old momentum (u before m); mean.json still matches,
    nesterov.json is named stale."""

    def wrong_order(
        state: nesterov.OuterState, cfg: nesterov.OuterConfig, mean: np.ndarray
    ) -> None:
        mu, lr, pos = np.float32(cfg.momentum), np.float32(cfg.lr), 0
        for name, w in state.params.items():
            g = mean[pos : pos + w.size].reshape(w.shape)
            pos += w.size
            m = state.momentum[name]
            u = g + m * mu
            m *= mu
            m += g
            w -= u * lr
        state.step += 1

    monkeypatch.setattr(vectors, "apply_outer", wrong_order)
    with pytest.raises(Stale, match=r"nesterov\.json differs"):
        vectors.check(SOURCE_DIR)
