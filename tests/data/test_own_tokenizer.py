"""A tokenizer of your own: ``daisychain tokenizer --source DIR --out PATH`` trains one on a
folder of text (the documents ``serve --text`` would serve), never over the shipped file; headless
peers started with ``--tokenizer PATH`` train a run named by its SHA-256 with identical hashes,
and a peer with the shipped tokenizer refuses that run with the ``tokenizer`` rule's hint.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

import pytest

from daisychain.assets import asset_dir
from daisychain.bench.rig.fineweb_stub import WORDS
from daisychain.server.app import serve_local
from daisychain.tokenizer import Tokenizer, train
from mesh_helpers import PeerProcess, needs_namespace
from server_fixtures import ByteTokenizer, config


def write_folder(root: Path) -> Path:
    """Seeded word salad (the FineWeb stand-in's words) in a .md file and a .jsonl file."""
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(5)
    salad = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    (root / "a.md").write_text("# Rivers\n\n" + salad(20_000), encoding="utf-8")
    lines = [json.dumps({"text": f"note {i}: " + salad(200)}) for i in range(50)]
    (root / "b.jsonl").write_text("\n".join(lines), encoding="utf-8")
    return root


def run_tokenizer(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    return train.run(parser.parse_args(list(argv)))


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tok")
    out = root / "own-tokenizer.json"
    assert run_tokenizer("--source", str(write_folder(root / "notes")), "--vocab-size", "320",
                         "--out", str(out)) == 0  # fmt: skip
    return out


def test_a_tokenizer_trained_on_a_folder_is_one_a_peer_can_load(
    own: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tok = Tokenizer.from_file(own)
    assert tok.vocab_size == 320
    assert tok.sha256 == hashlib.sha256(own.read_bytes()).hexdigest()
    assert tok.decode(tok.encode("note 7: the water cell")) == "note 7: the water cell"
    shipped = Tokenizer.from_file(asset_dir("luts") / "tokenizer.json")
    assert tok.sha256 != shipped.sha256


def test_your_own_text_needs_out_and_bad_sources_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = (asset_dir("luts") / "tokenizer.json").read_bytes()
    folder = write_folder(tmp_path / "notes")
    assert run_tokenizer("--source", str(folder), "--vocab-size", "320") == 2
    assert "needs --out" in capsys.readouterr().err
    assert (asset_dir("luts") / "tokenizer.json").read_bytes() == shipped, "shipped file kept"
    assert run_tokenizer("--source", str(folder), "--vocab-size", "100", "--out",
                         str(tmp_path / "t.json")) == 2  # fmt: skip
    assert "multiple of 64" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match=r"holds no \.txt"):
        run_tokenizer("--source", str(tmp_path / "empty"), "--out", str(tmp_path / "t.json"))
    with pytest.raises(SystemExit, match="no such file or folder"):
        run_tokenizer("--source", str(tmp_path / "missing"), "--out", str(tmp_path / "t.json"))


@needs_namespace
async def test_peers_with_the_same_tokenizer_train_a_run_and_a_peer_without_refuses_it(
    own: Path, tmp_path: Path
) -> None:
    sha = Tokenizer.from_file(own).sha256
    common = ("--preset", "tiny", "--steps", "3", "--batch", "1", "--seq-len", "16")
    async with serve_local(config(), tokenizer=ByteTokenizer) as url:
        lead = PeerProcess(url, "lead", "--tokenizer", str(own), "--lead", "--min-peers", "2",
                           *common)  # fmt: skip
        follow = PeerProcess(url, "follow", "--tokenizer", str(own))
        other = PeerProcess(url, "shipped")  # the shipped tokenizer
        broken = tmp_path / "broken.json"
        broken.write_text("{}")
        bad = PeerProcess(url, "bad", "--tokenizer", str(broken))
        try:
            codes = [await lead.wait(240), await follow.wait(240)]
            assert codes == [0, 0], (lead.stderr(), follow.stderr())
            assert lead.hashes == follow.hashes and len(lead.hashes) == 3
            model = next(d for d in lead.lines if d.get("event") == "model")
            assert model["vocab_size"] == 320, model
            assert await bad.wait(120) == 1
            assert "--tokenizer" in bad.stderr() and "hint:" in bad.stderr()
            assert not other.hashes, "a peer with another tokenizer trained the run"
            assert f"tokenizer is {sha[:12]}" in other.stderr() or any(
                f"tokenizer is {sha[:12]}" in json.dumps(d) for d in other.lines
            ), (other.stderr(), other.lines)
        finally:
            for proc in (lead, follow, other, bad):
                proc.close()
