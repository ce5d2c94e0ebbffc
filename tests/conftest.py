"""Test-session setup: a private network namespace for the mesh tests (ENVIRONMENT.md).

WebRTC between aiortc peers needs a host ICE candidate, and aioice never offers 127.0.0.1. As
root on Linux the whole test run therefore moves into a fresh network namespace before any
thread starts (``unshare(CLONE_NEWNET)`` affects only the calling thread, so it must happen
while the process has one): loopback comes up as usual (the server and every other test keep
using 127.0.0.1) and a veth pair with 10.231.0.1/24 and a default route gives aioice an address.
Both veth ends stay inside the namespace, so nothing can leave the machine.

Without root, without ``ip`` or when unshare fails, ``$DAISYCHAIN_MESH_SKIP`` says why and the
mesh tests (``mesh_helpers.needs_namespace``) skip; nothing else changes.

On CPython before 3.11.8 every ``ast.parse`` of the session (pytest's own, when it formats a
failure's traceback or rewrites a module's asserts, included) runs with the garbage collector
off: see tests/pyast.py for the interpreter bug that otherwise turns a failing test into an
INTERNALERROR that stops the whole run.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys

import pytest

# The shared helpers are not ``test_*`` files, so pytest would not rewrite their asserts: a
# failing ``assert a == b`` inside one would show no values. Registered before any test imports
# them.
pytest.register_assert_rewrite(
    "fineweb_helpers",
    "firefox_helpers",
    "gpu_plant",
    "hostile_harness",
    "mesh_check_helpers",
    "mesh_helpers",
    "page_helpers",
    "protocol_variants",
    "selftest_helpers",
    "server_fixtures",
    "tab_helpers",
)

# The Hub tests talk to a local stand-in through huggingface_hub (tests/data/test_hub_dataset.py):
# a machine set to the library's offline mode, or holding a token in its environment, must not
# change what they see. Set before the library is first imported (it reads these once).
for _name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_ENDPOINT"):
    os.environ.pop(_name, None)

import teardown_guard  # noqa: E402
from daisychain.bench.rig import netns  # noqa: E402
from pyast import parse_without_collector  # noqa: E402

# A test's event loop closes in bounded time (tests/teardown_guard.py): a failed test whose
# tasks would not end once hung a CI run for good.
teardown_guard.install()

CLONE_NEWNET = 0x40000000


def _enter_namespace() -> str | None:
    """Move this process into a private network namespace; None on success, else why not."""
    if os.environ.get(netns.INSIDE) == "1":
        return None  # already inside one (a parent test run set it up)
    if not sys.platform.startswith("linux"):
        return "mesh tests need Linux network namespaces"
    if os.geteuid() != 0:
        return "mesh tests need root to create a network namespace (or run under `unshare -rn`)"
    if shutil.which("ip") is None:
        return "mesh tests need `ip` from iproute2 to set up the namespace"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        return f"unshare(CLONE_NEWNET) failed: {os.strerror(ctypes.get_errno())}"
    failed = netns.set_up()
    if failed is not None:
        return failed
    # Child processes (subprocess peers) inherit the namespace; tell them it is ready.
    os.environ[netns.INSIDE] = "1"
    return None


def pytest_configure(config: pytest.Config) -> None:
    reason = _enter_namespace()
    if reason is None:
        os.environ.pop("DAISYCHAIN_MESH_SKIP", None)
    else:
        os.environ["DAISYCHAIN_MESH_SKIP"] = reason


if sys.version_info < (3, 11, 8):
    import ast

    ast.parse = parse_without_collector  # type: ignore[assignment]


@pytest.fixture(scope="session", autouse=True)
def _fused_passes_compiled() -> None:
    """Compile (or load from numba's cache) and gate the fused passes once, before any test
    starts peer subprocesses: on a fresh clone their first compile takes seconds of CPU, and
    several peers starting together would each pay it at once (cpu/fused.py)."""
    from daisychain.cpu import fused as cpufused

    if cpufused.available():
        cpufused.proven()
