"""bench mesh's part cpu (bench/_exchange_cpu.py): the exchange's CPU per MB, stage by stage
(shape and arithmetic only; no timing is asserted)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from daisychain.bench import mesh
from daisychain.demo import only_candidate
from daisychain.wire import codec, frames

STAGES = {"quantize", "framing_crc", "deflate", "reassembly_crc", "inflate", "dequantize",
          "reduce_3"}  # fmt: skip


def gradient(blocks: int = 64) -> Any:
    rng = np.random.default_rng(3)
    return (rng.standard_normal(blocks * codec.BLOCK) * 1e-3).astype(np.float32)


def test_every_stage_has_a_cost_per_mb() -> None:
    out = mesh.exchange_stages(gradient())
    assert out["payload_mb"] == pytest.approx(64 * 257 / 1e6, abs=1e-3)
    assert set(out["cpu_ms_per_mb"]) == STAGES
    assert all(v >= 0 for v in out["cpu_ms_per_mb"].values())
    assert 0 < out["deflate_byte_ratio"] < 1.01


def test_a_reassembly_that_loses_a_fragment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile checks the payload it timed came back whole: a framing that drops the last
    fragment fails it instead of timing nothing."""
    real = frames.fragment

    def dropping(*args: Any, **kwargs: Any) -> Any:
        parts = list(real(*args, **kwargs))
        return iter(parts[:-1])

    monkeypatch.setattr(frames, "fragment", dropping)
    with pytest.raises(AssertionError, match="reassembly lost the payload"):
        mesh.exchange_stages(gradient(blocks=400))  # 100 KB: three fragments


def test_the_profile_sums_each_side_with_and_without_deflate() -> None:
    with only_candidate("127.0.0.1"):
        out = mesh.exchange_profile(gradient(), channel_mb=0.3)
    c, side = out["cpu_ms_per_mb"], out["data_channel_ms_per_mb_per_side"]
    ratio = out["deflate_byte_ratio"]
    send = out["send_side_ms_per_mb"]
    assert send["without_deflate"] == pytest.approx(c["quantize"] + c["framing_crc"] + side,
                                                    abs=0.02)  # fmt: skip
    assert send["with_deflate"] == pytest.approx(
        c["quantize"] + c["framing_crc"] + c["deflate"] + ratio * side, abs=0.02)  # fmt: skip
    receive = out["receive_side_ms_per_mb"]["without_deflate"]
    assert receive == pytest.approx(
        c["reassembly_crc"] + c["dequantize"] + c["reduce_3"] + side, abs=0.02)  # fmt: skip
    assert 0 < out["data_channel_share_of_send_and_receive"] < 1
    assert out["raw_channel_mb_s"] > 0
