"""The hostile clients of issue 47 that are not about log volume (test_server_logs.py has those),
each against the real server process while a bystander pair relays through it
(``hostile_harness.run_hostile``): bodies that used to be 500s, HEADs pipelined as a proxy sends
them, and hello fields a stranger used to get shown to a host as if trusted.

Each asserts what the server answered, that the bystanders got every relay, and that no
traceback was logged. The QR burst's cost to ``/healthz`` is a timing, measured by ``daisychain
bench signaling --attacks qr-burst``, not asserted here; this file checks what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from daisychain.bench.rig import http_attacks
from hostile_harness import assert_bystanders_unharmed, record, run_hostile

FLOOD_TIMEOUT = pytest.mark.timeout(120)


@FLOOD_TIMEOUT
async def test_bodies_that_were_500s_are_400s_and_log_no_traceback(tmp_path: Path) -> None:
    result = await run_hostile(
        http_attacks.qr_bad_bodies(max_requests=200), tmp_path, name="qr-bad-bodies", attack_s=5.0
    )
    record(result, tmp_path)
    assert_bystanders_unharmed(result)
    statuses = result.attack.notes["statuses"]
    assert statuses.get("400", 0) >= len(http_attacks.BAD_QR_BODIES), statuses
    assert set(statuses) <= {"400", "429"}, statuses  # never a 500
    assert result.log_tracebacks == 0
    assert "Error handling request" not in result.log_text


@FLOOD_TIMEOUT
async def test_a_proxy_pipelining_after_a_head_reads_the_next_response(tmp_path: Path) -> None:
    result = await run_hostile(
        http_attacks.head_pipeline(max_requests=40), tmp_path, name="head-pipeline", attack_s=5.0
    )
    record(result, tmp_path)
    assert_bystanders_unharmed(result)
    assert result.attack.sent >= len(http_attacks.HEAD_TARGETS)
    assert result.attack.notes["stray_bodies"] == 0, result.attack.summary()


@FLOOD_TIMEOUT
async def test_hostile_device_text_is_refused_and_invisible_names_fall_back(
    tmp_path: Path,
) -> None:
    hellos = http_attacks.HOSTILE_HELLOS
    result = await run_hostile(
        http_attacks.hostile_hellos(max_connections=len(hellos)), tmp_path,
        name="hostile-hellos", attack_s=6.0,
    )  # fmt: skip
    record(result, tmp_path)
    assert_bystanders_unharmed(result)
    invisible = sum(1 for name, _ in hellos if not name.strip("\u3164\u2800\u034f"))
    notes = result.attack.notes
    assert notes["refused"] == len(hellos) - invisible, result.attack.summary()
    assert notes["pending"] == invisible, result.attack.summary()
    # the bystanders' host was shown the invisible names' requests only
    assert result.join_requests_seen == invisible
