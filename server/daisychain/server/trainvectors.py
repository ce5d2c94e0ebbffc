"""``GET /vectors/...``: the golden ``train_run`` case that the ``/train-check`` page trains.

The page (static/js/traincheck.js) reads ``/vectors/manifest.json`` and the blobs it names in the
golden-vector format (tests/vectors/README.md: per field dtype, shape, blob path, byte count and
SHA-256). The server does not ship tests/vectors/: it computes the one case the page needs from
the Python reference itself (``daisychain.vectors.contract.build_kind("train_run")``: ten steps
of the ``tiny`` model, about a second of CPU) in a worker thread on the first request, keeps the
result (about 21 KB) for the life of the process, and lets concurrent first requests share the
one build. The bytes are the committed vectors' bytes (tests/server/test_server_trainvectors.py
checks it), so the page compares the device with the same Python reference either way.

Only ``manifest.json`` and the blobs that manifest names exist here; any other path is a 404.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from aiohttp import web

from daisychain.server.notfound import not_found

KIND = "train_run"
MANIFEST = "manifest.json"
GENERATED_BY = (
    "the daisychain server: daisychain.vectors.contract.build_kind('train_run') at first request"
)


@dataclass(frozen=True)
class TrainVectors:
    files: dict[str, bytes]  # relative path -> body: manifest.json and blobs/<case>.<field>.bin


def build_train_vectors() -> TrainVectors:
    """The ``train_run`` cases' manifest and blobs, computed by the Python reference."""
    from daisychain.vectors import contract as vectors

    manifest, blobs = vectors.build_kind(KIND)
    manifest["generated_by"] = GENERATED_BY
    text = json.dumps(manifest, indent=1) + "\n"
    return TrainVectors({MANIFEST: text.encode("utf-8"), **blobs})


class TrainVectorsEndpoint:
    """Serves ``build_train_vectors()``, computed once (concurrent first requests share it)."""

    def __init__(self) -> None:
        self._task: asyncio.Task[TrainVectors] | None = None

    async def handle(self, request: web.Request) -> web.Response:
        relative = request.match_info.get("path", "")
        if self._task is None:
            self._task = asyncio.ensure_future(asyncio.to_thread(build_train_vectors))
        try:
            built = await asyncio.shield(self._task)
        except Exception as exc:  # the reference failed: a broken install, not the request
            self._task = None
            raise web.HTTPServiceUnavailable(
                text=f"the train-check vectors could not be computed: {exc}; reinstall daisychain",
                content_type="text/plain",
            ) from None
        body = built.files.get(relative)
        if body is None:
            raise not_found(request, "vectors")
        kind = "application/json" if relative == MANIFEST else "application/octet-stream"
        return web.Response(body=body, content_type=kind, headers={"Cache-Control": "no-cache"})
