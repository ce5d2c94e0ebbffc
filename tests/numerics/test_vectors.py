"""The committed golden vectors (tests/vectors/) against the Python reference, and proof that
``python tests/vectorgen --check`` catches corruption and names the case."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vectorgen
from daisychain.numerics import CONTRACT_VERSION
from vectorgen import contract as vectors
from vectorgen.files import SOURCE_DIR

VECTORS = SOURCE_DIR
DTYPES = {"float32": "<f4", "int32": "<i4", "uint32": "<u4", "int8": "i1"}


def load_manifest(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    return data


def load_field(directory: Path, entry: dict[str, Any]) -> Any:
    """What a JavaScript loader does: inline value, or typed array over the blob's bytes."""
    if "value" in entry:
        value = entry["value"]
        return tuple(value) if isinstance(value, list) else value
    data = (directory / entry["blob"]).read_bytes()
    assert len(data) == entry["bytes"]
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["blob"]
    return np.frombuffer(data, dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"]).copy()


def copy_vectors(tmp_path: Path) -> Path:
    target = tmp_path / "vectors"
    shutil.copytree(VECTORS, target)
    return target


def first_blob(manifest: dict[str, Any], case: str, field: str) -> str:
    entry = next(c for c in manifest["cases"] if c["name"] == case)
    blob: str = entry["outputs"][field]["blob"]
    return blob


def test_committed_vectors_match_the_reference() -> None:
    vectors.check(VECTORS)


def test_manifest_header_and_budget() -> None:
    manifest = load_manifest(VECTORS)
    assert manifest["format"] == "daisychain-vectors"
    assert manifest["format_version"] == vectors.FORMAT_VERSION
    assert manifest["contract_version"] == CONTRACT_VERSION
    kinds = {c["kind"] for c in manifest["cases"]}
    assert kinds == set(vectors.KINDS) == set(manifest["kinds"])
    total = sum(
        f["bytes"]
        for c in manifest["cases"]
        for section in ("inputs", "outputs")
        for f in c[section].values()
        if "blob" in f
    )
    assert total < 2_000_000, f"blobs total {total} bytes"
    referenced = {
        f["blob"]
        for c in manifest["cases"]
        for section in ("inputs", "outputs")
        for f in c[section].values()
        if "blob" in f
    }
    on_disk = {f"blobs/{p.name}" for p in (VECTORS / "blobs").glob("*.bin")}
    assert on_disk == referenced, "stale or missing blob files"
    assert [e["path"] for e in manifest["external"]] == ["tokenizer.json"]


def test_outputs_recomputed_from_the_stored_inputs() -> None:
    """Load every case as another implementation would and rerun the reference on its inputs."""
    manifest = load_manifest(VECTORS)
    for case in manifest["cases"]:
        inputs = {k: load_field(VECTORS, v) for k, v in case["inputs"].items()}
        expected = {k: load_field(VECTORS, v) for k, v in case["outputs"].items()}
        got = vectors.KINDS[case["kind"]].evaluate(case["params"], inputs)
        assert set(got) == set(expected), case["name"]
        for name, want in expected.items():
            have = got[name]
            if isinstance(want, np.ndarray):
                assert isinstance(have, np.ndarray)
                assert have.dtype == want.dtype and have.shape == want.shape, case["name"]
                same = have.view(f"u{have.itemsize}") == want.view(f"u{want.itemsize}")
                assert bool(np.all(same)), f"{case['name']}.{name} differs"
            else:
                assert have == want, f"{case['name']}.{name}"


def test_vectors_cover_the_required_edges() -> None:
    names = {c["name"] for c in load_manifest(VECTORS)["cases"]}
    for required in (
        "quantize.ties",
        "quantize.bump",
        "quantize.special-rows",
        "quantize.random-cols",
        "quantize2.ties",
        "qmatmul.all-neg128-k1024",
        "qmatmul.edges-k2049",
        "qmatmul.random-4x3000x3",
        "qmatmul.batched-2x3",
        "qmatmul.reference-low",
        "qmatmul.subnormal-ties",
        "qmatmul_grad_left.5x1025x6",
        "qmatmul_grad_right.5x1025x6",
        "grad_matmul_left.4x1500x6",
        "grad_matmul_right.2x2x8x16x8",
        "exp.special",
        "exp.random-softmax",
        "log.random-normal",
        "tree_sum.n100",
        "prng_key.0",
        "prng_stream.counter-wrap",
    ):
        assert required in names, required


def test_write_reproduces_the_committed_bytes(tmp_path: Path) -> None:
    summary = vectors.write(tmp_path)
    assert f"wrote {len(load_manifest(VECTORS)['cases'])} cases" in summary
    assert (tmp_path / "manifest.json").read_bytes() == (VECTORS / "manifest.json").read_bytes()
    for blob in (tmp_path / "blobs").glob("*.bin"):
        assert blob.read_bytes() == (VECTORS / "blobs" / blob.name).read_bytes(), blob.name


def flip_bit(path: Path, byte: int = 5, bit: int = 3) -> bytes:
    data = bytearray(path.read_bytes())
    data[byte % len(data)] ^= 1 << bit
    path.write_bytes(bytes(data))
    return bytes(data)


def run_check(directory: Path) -> int:
    return vectorgen.main(["--check", "contract", "--dir", str(directory)])


def test_flipped_bit_is_detected_with_the_case_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = copy_vectors(tmp_path)
    blob = first_blob(load_manifest(target), "qmatmul.edges-k2049", "y")
    flip_bit(target / blob)
    with pytest.raises(vectors.Mismatch, match=r"qmatmul\.edges-k2049.*sha256"):
        vectors.check(target)
    assert run_check(target) == 1
    assert "qmatmul.edges-k2049" in capsys.readouterr().err


def test_corruption_with_a_matching_hash_is_still_detected(tmp_path: Path) -> None:
    # A blob changed and its manifest hash updated to match: only recomputation catches it.
    target = copy_vectors(tmp_path)
    manifest = load_manifest(target)
    case = next(c for c in manifest["cases"] if c["name"] == "exp.random-softmax")
    data = flip_bit(target / case["outputs"]["y"]["blob"], byte=401, bit=0)
    case["outputs"]["y"]["sha256"] = hashlib.sha256(data).hexdigest()
    (target / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(vectors.Mismatch, match=r"exp\.random-softmax.*differs from the reference"):
        vectors.check(target)


def test_manifest_hash_is_checked(tmp_path: Path) -> None:
    target = copy_vectors(tmp_path)
    manifest = load_manifest(target)
    entry = manifest["cases"][3]["inputs"]["x"]
    entry["sha256"] = "0" * 64
    (target / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(vectors.Mismatch, match=manifest["cases"][3]["name"].replace(".", r"\.")):
        vectors.check(target)


def test_missing_case_and_contract_version_are_reported(tmp_path: Path) -> None:
    target = copy_vectors(tmp_path)
    manifest = load_manifest(target)
    removed = manifest["cases"].pop(10)["name"]
    (target / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(vectors.Mismatch, match=f"{removed}.*missing"):
        vectors.check(target)
    manifest["contract_version"] = CONTRACT_VERSION + 1
    (target / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(vectors.Mismatch, match="contract version"):
        vectors.check(target)
    assert run_check(tmp_path / "nowhere") == 1


def test_a_registered_kind_joins_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "KINDS", dict(vectors.KINDS))

    def evaluate(params: vectors.Params, inputs: vectors.Fields) -> vectors.Fields:
        x = inputs["x"]
        assert isinstance(x, np.ndarray)
        return {"y": x + np.float32(1.0)}

    def generate() -> list[vectors.Case]:
        return [vectors.Case("demo.one", "demo", {"x": np.zeros(3, np.float32)})]

    vectors.register_kind("demo", "y = x + 1", evaluate, generate)
    with pytest.raises(ValueError, match="twice"):
        vectors.register_kind("demo", "again", evaluate, generate)
    vectors.write(tmp_path)
    manifest = load_manifest(tmp_path)
    assert manifest["cases"][-1]["name"] == "demo.one"
    vectors.check(tmp_path)
