"""``daisychain bench step``'s report at a tiny size (never a timing): every side that can run
here reports, and the CPU int8 sides are there exactly when onnxruntime is installed."""

from __future__ import annotations

import argparse
import importlib.util

from daisychain.bench import step


def test_the_report_has_every_side_that_runs_here() -> None:
    args = argparse.Namespace(preset="tiny", steps=1, rounds=1, vocab=0)
    doc = step.measure(args)
    assert doc["benchmark"] == "step" and doc["tokens_per_step"] > 0
    assert doc["contract"]["tokens_per_s"] > 0
    if importlib.util.find_spec("onnxruntime") is None:
        assert "cpu-int8" not in doc
        return
    if isinstance(doc["cpu-int8"], str):  # this CPU's gates refused it: say why, time nothing
        assert doc["cpu-int8"].startswith("refused by its gates here:")
        assert "cpu-int8-unaudited" not in doc
        return
    for side in ("cpu-int8", "cpu-int8-unaudited"):
        assert doc[side]["tokens_per_s"] > 0
        assert doc[side.replace("-", "_") + "_vs_numpy_ratio"] > 0
