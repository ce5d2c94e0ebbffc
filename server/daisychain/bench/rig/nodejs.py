"""How to start Node.js for the JS mirror's tests and benchmarks (``node`` from PATH).

The JS mirror hashes with Web Crypto's global ``crypto.subtle`` where it exists and with its own
SHA-256 otherwise (``static/js/numerics/hash.js``); the tests run both. Node 19 and newer have
``crypto.subtle``; Node 18 (Debian 12's and Ubuntu 24.04's ``nodejs``) has it behind
``--experimental-global-webcrypto``, which is passed so the suite checks the native path too.
ES-module parsing of ``static/js/*.js`` comes from ``static/package.json``
(``"type": "module"``), which every Node version honours.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

MIN_NODE_MAJOR = 18


class NodeError(RuntimeError):
    """Node is missing or too old; the message says what to install."""


@functools.cache
def node_argv() -> tuple[str, ...]:
    """The command prefix that runs Node with what the JS mirror needs; NodeError if it can't."""
    node = shutil.which("node")
    if node is None:
        raise NodeError("node is not on PATH: `apt-get install nodejs` (Node 18 or newer)")
    out = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()
    match = re.fullmatch(r"v(\d+)\..*", out)
    if match is None:
        raise NodeError(f"unexpected `node --version` output: {out!r}")
    major = int(match.group(1))
    if major < MIN_NODE_MAJOR:
        raise NodeError(f"Node {out} is too old: install Node {MIN_NODE_MAJOR} or newer")
    if major < 19:
        return (node, "--experimental-global-webcrypto")
    return (node,)
