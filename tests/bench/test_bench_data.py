"""``daisychain bench data`` at a tiny size: the shape of its report (no timing is checked)."""

from __future__ import annotations

from pathlib import Path


def test_bench_data_reports_healthz_under_a_tokenize_flood(tmp_path: Path) -> None:
    """The shape of ``daisychain bench data`` at a tiny size (no timing is checked)."""
    import argparse

    from daisychain.bench import data as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(
        ["--shards", "1", "--row-groups", "2", "--rows", "20", "--reads", "2",
         "--workdir", str(tmp_path), "--flood", "3", "--flood-tokens", "2000", "--windows", "0"]
    )  # fmt: skip
    flood = bench.measure(args)["healthz_under_tokenize_flood"]
    for side in ("before_pure_python", "after_tokenizers_library"):
        assert flood[side]["healthz_probes"] >= 1 and flood[side]["flood_s"] > 0, flood
    for key in ("healthz_p99", "healthz_max", "flood_s"):
        assert flood[f"{key}_after_vs_before_ratio"] > 0, flood


def test_bench_data_reports_healthz_under_a_burst_from_many_addresses(tmp_path: Path) -> None:
    """The shape of the burst part at a tiny size: every request answered and counted, served
    or refused, and the ratio from the same run's percentiles (no timing is checked)."""
    import argparse

    from daisychain.bench import data as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(
        ["--shards", "1", "--row-groups", "2", "--rows", "20", "--reads", "2",
         "--workdir", str(tmp_path), "--flood", "0", "--windows", "0", "--burst", "3",
         "--burst-chars", "2000", "--idle-probes", "5"]
    )  # fmt: skip
    burst = bench.measure(args)["healthz_under_data_burst"]
    assert burst["clients"] == 3 and burst["addresses"] == "127.0.0.2-127.0.0.4", burst
    assert burst["served"] + sum(burst["refused"].values()) == 3, burst
    assert burst["refused_with_retry_after"] == sum(burst["refused"].values()), burst
    assert burst["healthz_idle_probes"] == 5 and burst["healthz_burst_probes"] >= 1, burst
    for key in ("idle_p50", "idle_p99", "burst_p50", "burst_p99", "burst_max"):
        assert burst[f"healthz_{key}_ms"] > 0, burst
    ratio = burst["healthz_burst_p99_ms"] / burst["healthz_idle_p99_ms"]
    assert abs(burst["healthz_burst_vs_idle_p99_ratio"] - ratio) < 0.01 * ratio + 1e-3, burst
    assert burst["sources"]["fineweb"] >= burst["served"], "the burst reads the stub upstream"
    assert burst["worker"] == {"processes": 1, "started": 1, "died": 0}, burst


def test_bench_data_reports_delivery_against_consumption(tmp_path: Path) -> None:
    """The shape of the delivery part at a tiny size: every window and step is counted (no
    timing is checked)."""
    import argparse

    from daisychain.bench import data as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(
        ["--shards", "1", "--row-groups", "2", "--rows", "20", "--reads", "2",
         "--workdir", str(tmp_path), "--flood", "0", "--windows", "3", "--train-steps", "2"]
    )  # fmt: skip
    delivery = bench.measure(args)["delivery"]
    assert delivery["windows_fetched"] == 3 and delivery["train_steps"] == 2
    assert delivery["tokens_per_step"] == 8 * 128 and delivery["window_chars"] == 8 * 8 * 129
    assert delivery["data_tokens_per_s_delivered_per_peer"] > 0
    assert delivery["training_tokens_per_s_consumed"] > 0
    assert delivery["delivered_vs_consumed_ratio"] > 0
    assert delivery["first_step_waited"] is True  # nothing is ahead of a run's first step
    assert 0 <= delivery["steady_state_wait_fraction"] <= 1


# -- the addressed form under upstream faults -------------------------------------------------


def test_bench_data_reports_both_readers_side_by_side(tmp_path: Path) -> None:
    """The reader part: DaisyChain's own range reader and huggingface_hub's file system read
    the same row groups, each one range GET per warm row group (no timing is checked)."""
    import argparse

    from daisychain.bench import data as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(
        ["--shards", "1", "--row-groups", "2", "--rows", "20", "--reads", "4",
         "--workdir", str(tmp_path), "--flood", "0", "--windows", "0", "--burst", "0"]
    )  # fmt: skip
    result = bench.measure(args)
    assert set(result["readers"]) == {"http", "hub"}
    for reader in result["readers"].values():
        assert reader["warm_range_gets_per_row_group"] == 1.0, result
        assert reader["cold_range_gets_per_row_group"] >= 1.0, result
        assert reader["warm_row_groups_per_s"] > 0 and reader["warm_cpu_ms_per_row_group"] >= 0
    for key in ("warm_throughput", "cold_throughput", "warm_cpu"):
        assert result[f"hub_vs_http_{key}_ratio"] > 0, result
