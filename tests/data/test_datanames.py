"""Data names (``daisychain.datanames``; docs/PROTOCOL.md, "Training data"): the committed
vectors are what the reference writes (``tests/js/datanames.test.mjs`` replays them in
JavaScript), the constructors build only names ``parse`` gives back part for part, and the
vector check names a case when the rules drift (a planted non-ASCII ``\\w``, a looser bound).
"""

from __future__ import annotations

import re

import pytest

from daisychain import datanames
from vectorgen import datanames as vectors
from vectorgen.files import SOURCE_DIR, Stale

REV = "0123456789abcdef0123456789abcdef01234567"


def test_committed_file_is_what_write_produces() -> None:
    vectors.check(SOURCE_DIR)


def test_constructors_round_trip_through_parse() -> None:
    name = datanames.hub("me/notes", REV, "sample/10BT", "content")
    assert name == f"hf:me/notes@{REV}:sample/10BT:content"
    parsed = datanames.parse(name)
    assert parsed == datanames.DataName(
        "hub", REV, repo="me/notes", split="sample/10BT", column="content"
    )
    assert parsed.source == "dataset"
    local = datanames.parse(datanames.local("notes", REV))
    assert local is not None and (local.kind, local.label, local.source) == (
        "local", "notes", "dataset",
    )  # fmt: skip
    fineweb = datanames.parse(datanames.fineweb(REV))
    assert fineweb is not None and (fineweb.kind, fineweb.source) == ("fineweb", "fineweb")
    assert datanames.parse("builtin") is None


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: datanames.hub("notes", REV, "train", "text"), "repository 'notes'"),
        (lambda: datanames.hub("me/notes", "main", "train", "text"), "revision 'main'"),
        (lambda: datanames.hub("me/notes", REV, "../x", "text"), "split '../x'"),
        (lambda: datanames.hub("me/notes", REV, "train", "9col"), "text column '9col'"),
        (lambda: datanames.hub("me/caf\u00e9", REV, "train", "text"), "repository"),
        (lambda: datanames.hub("o" * 90 + "/" + "n" * 90, REV, "train", "t"), "longer than 200"),
        (lambda: datanames.local("my notes", REV), "label 'my notes'"),
        (lambda: datanames.fineweb(REV.upper()), "40-hex"),
    ],
)
def test_constructors_refuse_bad_parts(build: object, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        build()  # type: ignore[operator]


def test_the_vector_check_fires_on_a_non_ascii_word_class(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without re.ASCII, Python's \w takes 'é' and JavaScript's does not: the two would disagree
    # on which runs a peer can train. The committed cases must catch that drift.
    loose = re.compile(datanames._HUB_RE.pattern)  # the same pattern, Unicode \w
    monkeypatch.setattr(datanames, "_HUB_RE", loose)
    with pytest.raises(Stale, match=r"datanames\.json"):
        vectors.check(SOURCE_DIR)


def test_the_vector_check_fires_on_a_looser_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datanames, "MAX_LENGTH", datanames.MAX_LENGTH + 1)
    with pytest.raises(Stale, match=r"datanames\.json"):
        vectors.check(SOURCE_DIR)
