"""``GET /vectors/...``: the golden ``train_run`` case that the ``/train-check`` page trains.

The page (static/js/traincheck.js) reads ``/vectors/manifest.json`` and the blobs it names in the
golden-vector format (``daisychain.vectorformat``; tests/vectors/README.md). The server does not
ship tests/vectors/: it computes the one case the page needs from the Python reference itself
(ten steps of the ``tiny`` model, about a second of CPU) in a worker thread on the first
request, keeps the result (about 21 KB) for the life of the process, and lets concurrent first
requests share the one build. The case is defined here (``generate``, ``evaluate``); the
contract's vector set registers the same functions (tests/vectorgen/contract.py), so the served
bytes are the committed vectors' bytes (tests/server/test_server_trainvectors.py checks it).

Only ``manifest.json`` and the blobs that manifest names exist here; any other path is a 404.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from aiohttp import web

from daisychain.numerics import prng
from daisychain.server.notfound import not_found
from daisychain.vectorformat import MANIFEST, Case, Fields, Params, manifest

KIND = "train_run"
DOC = "loss and weight hash after each of 10 steps of the tiny model (MODEL.md; NUMERICS.md 8)"
GENERATED_BY = "the daisychain server: daisychain.server.trainvectors at first request"
STEPS = 10
# The PRNG seed of every generated vector input (the contract set's too); the batches of this
# case come from stream 99.
VECTOR_SEED = 0x5EC7025
STREAM = 99


# The tiny model trained for 10 steps from a seed: loss bits and the weight hash after every step
# (all ten localise a divergence). Batches are stored so a mirror can check its training step
# without the corpus or tokenizer; they were drawn with batches.sample_batch (rank 0) from a PRNG
# token stream, which a mirror may check too.


def _config() -> Params:
    from daisychain.model.config import preset
    from daisychain.optim import AdamWConfig

    cfg = preset("tiny", vocab_size=2048)
    model = dataclasses.asdict(cfg)
    model["norm_eps_bits"] = int(np.array([cfg.norm_eps], dtype=np.float32).view(np.uint32)[0])
    del model["norm_eps"]
    optim = dataclasses.asdict(AdamWConfig(lr=3e-3, warmup_steps=3))
    return {"model": model, "optim": optim, "seed": 1, "steps": STEPS}


def evaluate(params: Params, inputs: Fields) -> Fields:
    """The reference's losses and weight hashes for the case's batches."""
    from daisychain import training
    from daisychain.model.config import ModelConfig
    from daisychain.optim import AdamWConfig

    model = dict(params["model"])
    eps = np.array([model.pop("norm_eps_bits")], dtype=np.uint32).view(np.float32)[0]
    cfg = ModelConfig(**model, norm_eps=eps)
    state = training.init(cfg, AdamWConfig(**params["optim"]), int(params["seed"]))
    x, y = inputs["x"], inputs["y"]
    assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
    losses, hashes = [], []
    for i in range(int(params["steps"])):
        res = training.train_step(state, x[i].astype(np.int64), y[i].astype(np.int64))
        losses.append(res.loss)
        hashes.append(res.hash)
    return {"loss": np.array(losses, dtype=np.float32), "hashes": tuple(hashes)}


def generate() -> Iterable[Case]:
    """The one case: ``train_run.tiny``."""
    from daisychain.batches import sample_batch

    params = _config()
    m = params["model"]
    stream = prng.below(prng.key(VECTOR_SEED, STREAM), 20_000, m["vocab_size"])
    xs, ys = [], []
    for step in range(STEPS):
        x, y = sample_batch(stream, m["batch"], m["seq_len"], params["seed"], step)
        xs.append(x)
        ys.append(y)
    inputs: Fields = {"x": np.array(xs, dtype=np.int32), "y": np.array(ys, dtype=np.int32)}
    yield Case("train_run.tiny", KIND, inputs, params)


@dataclass(frozen=True)
class TrainVectors:
    files: dict[str, bytes]  # relative path -> body: manifest.json and blobs/<case>.<field>.bin


def build_train_vectors() -> TrainVectors:
    """The ``train_run`` case's manifest and blobs, computed by the Python reference."""
    cases = [(c, evaluate(c.params, c.inputs)) for c in generate()]
    built, blobs = manifest(cases, {KIND: DOC}, generated_by=GENERATED_BY)
    text = json.dumps(built, indent=1) + "\n"
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
