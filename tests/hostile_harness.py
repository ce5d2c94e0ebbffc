"""The hostile-client harness for tests: the real server in a child process, a bystander pair
relaying through it, and one bounded loopback attacker (see ``daisychain.bench.rig.hostile``).

Usage in a test::

    result = await run_hostile(my_attacker, tmp_path, name="my-attack")
    record(result, tmp_path)        # prints the summary, writes tmp_path/<name>.json
    assert_bystanders_unharmed(result)
    assert_memory_returned(result)

An attacker is ``async def attacker(a: Attack) -> None``: aim at ``a.url``/``a.ws_url``
(``a.host``, ``a.port`` for raw sockets via ``raw_websocket``), stop by ``a.deadline``
(``a.over()``), and count what the server did in ``a.outcome`` (``errors``, ``closes``,
``notes``). The scenarios of issue 8 are in ``daisychain.bench.rig.attacks``. No timing threshold
is asserted here: the bystanders' p50/p99 are printed and written to the JSON; the latency goal
is shown by ``daisychain bench signaling`` (its ``hostile`` part).
"""

from __future__ import annotations

import json
from pathlib import Path

from daisychain.bench.rig.hostile import (
    BYSTANDER_ROOM,
    Attack,
    Attacker,
    AttackOutcome,
    HostileResult,
    RelayStats,
    ServerProcess,
    percentile,
    raw_websocket,
    read_frame,
    read_until_closed,
    run_hostile,
    server_process,
    server_status,
    text_frame,
)

__all__ = [
    "BYSTANDER_ROOM",
    "RSS_SLACK_BYTES",
    "Attack",
    "AttackOutcome",
    "Attacker",
    "HostileResult",
    "RelayStats",
    "ServerProcess",
    "assert_bystanders_unharmed",
    "assert_memory_returned",
    "percentile",
    "raw_websocket",
    "read_frame",
    "read_until_closed",
    "record",
    "run_hostile",
    "server_process",
    "server_status",
    "text_frame",
]

# Issue 8: once the attacker is gone the server's RSS is back within 20 MB of where it started.
RSS_SLACK_BYTES = 20 * 1000 * 1000


def record(result: HostileResult, folder: Path) -> dict[str, object]:
    """Print the summary (visible with ``pytest -rA`` or ``-s``) and keep it as JSON."""
    summary = result.summary()
    text = json.dumps(summary, indent=2, sort_keys=True)
    (folder / f"{result.name}.json").write_text(text + "\n")
    print(f"hostile scenario {result.name}:\n{text}")
    return summary


def assert_bystanders_unharmed(result: HostileResult) -> None:
    """Every relay the bystanders sent while the attacker ran arrived, and they met no error."""
    stats = result.under_attack
    assert stats.sent > 0, "the bystanders sent nothing during the attack"
    assert stats.delivered == stats.sent, f"relays lost: {stats.delivered}/{stats.sent}"
    assert stats.echoed == stats.sent, f"echoes lost: {stats.echoed}/{stats.sent}"
    assert not result.bystander_trouble, result.bystander_trouble


def assert_memory_returned(result: HostileResult) -> None:
    grown = result.rss_after - result.rss_start
    assert grown < RSS_SLACK_BYTES, (
        f"server RSS {result.rss_start / 1e6:.1f} MB -> {result.rss_after / 1e6:.1f} MB after "
        f"the attacker left (peak {result.rss_peak / 1e6:.1f} MB)"
    )
