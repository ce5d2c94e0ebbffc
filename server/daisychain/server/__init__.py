"""The DaisyChain server: static files, WebSocket signaling with groups and rooms, ``/data``.

One module per concept: ``config`` (settings), ``messages`` (every signaling message),
``grouping`` (address -> group), ``rooms`` (membership state machine), ``signaling`` (the ``/ws``
endpoint), ``static`` (files and security headers), ``datasource`` (FineWeb-Edu range reads and
the built-in fallback), ``api`` (HTTP endpoints), ``app`` (assembly), ``main`` (command line).
The protocol is specified in docs/PROTOCOL.md; operating it in docs/SERVER.md.
"""

from daisychain.server.app import create_app
from daisychain.server.config import DataConfig, ServerConfig, SignalingLimits

__all__ = ["DataConfig", "ServerConfig", "SignalingLimits", "create_app"]
