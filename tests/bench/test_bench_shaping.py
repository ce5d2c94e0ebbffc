"""bench mesh --process-link (bench/rig/shaping.py): the namespace's loopback limited by a real
tc token bucket for the measured part, and never the host's."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from daisychain.bench.rig import netns, shaping
from mesh_helpers import needs_namespace


def _qdisc() -> str:
    out = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True)
    return out.stdout


@pytest.mark.parametrize("spec", ["40mbit", "500kbit", " 1GBIT "])
def test_rates_in_tcs_form_are_taken(spec: str) -> None:
    assert shaping.parse_rate(spec) == spec.strip().lower()


@pytest.mark.parametrize("spec", ["", "40", "fast", "40 mbit", "0mbit", "-5mbit", "40mb/s"])
def test_anything_else_is_refused_with_an_example(spec: str) -> None:
    with pytest.raises(SystemExit, match=r"e\.g\. 40mbit"):
        shaping.parse_rate(spec)


def test_the_hosts_loopback_is_never_shaped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(netns.INSIDE, raising=False)
    refused = pytest.raises(RuntimeError, match="outside this run's own namespace")
    with refused, shaping.shaped_loopback("40mbit"):
        pass


@needs_namespace
@pytest.mark.skipif(shutil.which("tc") is None, reason="tc (iproute2) is not installed")
def test_the_namespaces_loopback_is_shaped_only_inside_the_block() -> None:
    assert "tbf" not in _qdisc()
    with shaping.shaped_loopback("40mbit"):
        shown = _qdisc()
        assert "tbf" in shown and "40Mbit" in shown, shown
    assert "tbf" not in _qdisc()
    with pytest.raises(ZeroDivisionError), shaping.shaped_loopback("8mbit"):
        1 / 0  # noqa: B018 - an error inside still removes the limit
    assert "tbf" not in _qdisc()
