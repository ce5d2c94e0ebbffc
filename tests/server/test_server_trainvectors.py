"""``/vectors/``: the train_run case the /train-check page trains, computed by the server.

The served manifest entry and blobs must be the committed golden vectors' (tests/vectors/), so
the page checks a device against the same reference the Python tests use; the build runs once,
however many requests arrive together; a failed build is a 503 with a hint and is tried again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from daisychain.server import trainvectors
from server_fixtures import serve

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def committed_case() -> dict[str, Any]:
    manifest = json.loads((VECTORS / "manifest.json").read_text(encoding="utf-8"))
    case: dict[str, Any] = next(c for c in manifest["cases"] if c["kind"] == "train_run")
    return case


async def test_served_case_is_the_committed_golden_case() -> None:
    async with serve() as client:
        response = await client.get("/vectors/manifest.json")
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        manifest = await response.json()
        assert manifest["format"] == "daisychain-vectors"
        assert [c["name"] for c in manifest["cases"]] == ["train_run.tiny"]
        case = manifest["cases"][0]
        assert case == committed_case()
        blobs = [*case["inputs"].values(), case["outputs"]["loss"]]
        for field in blobs:
            blob = await client.get(f"/vectors/{field['blob']}")
            assert blob.status == 200
            assert blob.headers["Content-Type"] == "application/octet-stream"
            body = await blob.read()
            assert len(body) == field["bytes"]
            assert hashlib.sha256(body).hexdigest() == field["sha256"]
            assert body == (VECTORS / field["blob"]).read_bytes()


async def test_only_the_manifest_and_its_blobs_exist() -> None:
    async with serve() as client:
        for path in (
            "/vectors/",
            "/vectors/blobs/quantize.0.x.bin",  # a committed case the page does not need
            "/vectors/tokenizer.json",
            "/vectors/MANIFEST.json",
            "/vectors/blobs/train_run.tiny.hashes.bin",  # hashes are inline in the manifest
        ):
            response = await client.get(path)
            assert response.status == 404, path
            assert "no such file under vectors/" in await response.text()


async def test_concurrent_first_requests_share_one_build(monkeypatch: pytest.MonkeyPatch) -> None:
    builds = 0
    real = trainvectors.build_train_vectors

    def counting() -> trainvectors.TrainVectors:
        nonlocal builds
        builds += 1
        return real()

    monkeypatch.setattr(trainvectors, "build_train_vectors", counting)
    async with serve() as client:
        answers = await asyncio.gather(*(client.get("/vectors/manifest.json") for _ in range(5)))
        assert [r.status for r in answers] == [200] * 5
        assert (await client.get("/vectors/manifest.json")).status == 200
    assert builds == 1


async def test_a_failed_build_is_a_503_with_a_hint_and_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken() -> trainvectors.TrainVectors:
        raise ImportError("no module named daisychain.training")

    monkeypatch.setattr(trainvectors, "build_train_vectors", broken)
    async with serve() as client:
        response = await client.get("/vectors/manifest.json")
        assert response.status == 503
        text = await response.text()
        assert "no module named daisychain.training" in text and "reinstall" in text
        monkeypatch.setattr(
            trainvectors,
            "build_train_vectors",
            lambda: trainvectors.TrainVectors({"manifest.json": b"{}"}),
        )
        again = await client.get("/vectors/manifest.json")
        assert again.status == 200 and await again.read() == b"{}"
