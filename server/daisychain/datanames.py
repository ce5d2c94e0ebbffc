"""The names a run gives its training text (``config.data``; docs/PROTOCOL.md, "Training data").

A name says exactly which text a run trains on, so that a peer can tell whether it can read it
(its server serves that text, at that revision) before it computes anything:

- ``builtin``: the corpus shipped with DaisyChain;
- ``fineweb@REV``: FineWeb-Edu ``sample/10BT`` at the dataset commit ``REV`` (40 lowercase hex);
- ``hf:REPO@REV:SPLIT:COLUMN``: any Hugging Face dataset stored as parquet, at commit ``REV``:
  the files of split ``SPLIT`` (``server/hubdataset.py`` says which files that is) and their
  text column ``COLUMN``;
- ``local:LABEL@DIGEST``: text files a server was started on (``daisychain serve --text DIR``):
  ``DIGEST`` is 40 hex digits of the sha256 of the documents, so two servers serve the same name
  only if they hold the same text; ``LABEL`` is the folder's name, for people.

Every dataset name has a 40-hex **revision** (``REV`` or ``DIGEST``): it is what a peer's
addressed ``/data`` request names, and what a server checks against the text it reads. Names
are at most ``MAX_LENGTH`` characters (the ``config`` message's bound). Pure; mirrored for the
browser by ``static/js/datanames.js``; ``tests/vectors/datanames/cases.json`` holds the cases
both must agree on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

MAX_LENGTH = 200
BUILTIN = "builtin"
FINEWEB_PREFIX = "fineweb@"
HUB_PREFIX = "hf:"
LOCAL_PREFIX = "local:"

REVISION_RE = re.compile(r"[0-9a-f]{40}")
# ASCII only (\w is [A-Za-z0-9_] here, as in JavaScript). A Hub repository id: owner/name,
# each a letter or digit then letters, digits, '.', '_', '-'.
REPO_RE = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}", re.ASCII)
# A split: one or more path segments ("train", "sample/10BT"), no "..", no empty segment.
SPLIT_RE = re.compile(r"[A-Za-z0-9][\w.-]*(?:/[A-Za-z0-9][\w.-]*)*", re.ASCII)
COLUMN_RE = re.compile(r"[A-Za-z_][\w.-]{0,63}", re.ASCII)
LABEL_RE = re.compile(r"[A-Za-z0-9][\w.-]{0,47}", re.ASCII)

_HUB_RE = re.compile(
    rf"hf:(?P<repo>{REPO_RE.pattern})@(?P<rev>[0-9a-f]{{40}}):(?P<split>{SPLIT_RE.pattern})"
    rf":(?P<column>{COLUMN_RE.pattern})",
    re.ASCII,
)
_LOCAL_RE = re.compile(rf"local:(?P<label>{LABEL_RE.pattern})@(?P<rev>[0-9a-f]{{40}})", re.ASCII)

Kind = Literal["fineweb", "hub", "local"]


@dataclass(frozen=True)
class DataName:
    """A parsed dataset name (never ``builtin``)."""

    kind: Kind
    revision: str
    repo: str = ""
    split: str = ""
    column: str = ""
    label: str = ""

    @property
    def source(self) -> str:
        """The ``source`` field of the server's answers for this text: ``"fineweb"`` for
        FineWeb-Edu, ``"dataset"`` for any other."""
        return "fineweb" if self.kind == "fineweb" else "dataset"


def fineweb(revision: str) -> str:
    """The name of FineWeb-Edu ``sample/10BT`` at ``revision``."""
    _check(REVISION_RE, revision, "revision", "a 40-hex commit")
    return FINEWEB_PREFIX + revision


def hub(repo: str, revision: str, split: str, column: str) -> str:
    """The name of a Hub dataset's ``split`` at ``revision``, read from ``column``."""
    _check(REPO_RE, repo, "repository", "owner/name")
    _check(REVISION_RE, revision, "revision", "a 40-hex commit")
    _check(SPLIT_RE, split, "split", "path segments of letters, digits, '.', '_' and '-'")
    _check(COLUMN_RE, column, "text column", "a letter or '_' then letters, digits, '.', '_', '-'")
    name = f"{HUB_PREFIX}{repo}@{revision}:{split}:{column}"
    if len(name) > MAX_LENGTH:
        raise ValueError(f"the data name {name[:48]}... is longer than {MAX_LENGTH} characters")
    return name


def local(label: str, digest: str) -> str:
    """The name of a server's own text files, ``digest`` their 40-hex content digest."""
    _check(LABEL_RE, label, "label", "letters, digits, '.', '_' and '-' (at most 48)")
    _check(REVISION_RE, digest, "digest", "40 hex digits")
    return f"{LOCAL_PREFIX}{label}@{digest}"


def parse(data: str) -> DataName | None:
    """``None`` for ``builtin``, the parts of a dataset name, or ``ValueError`` naming what is
    wrong with it."""
    if data == BUILTIN:
        return None
    if len(data) > MAX_LENGTH:
        raise ValueError(f"data name longer than {MAX_LENGTH} characters")
    if data.startswith(FINEWEB_PREFIX) and REVISION_RE.fullmatch(data[len(FINEWEB_PREFIX) :]):
        return DataName("fineweb", data[len(FINEWEB_PREFIX) :])
    if (m := _HUB_RE.fullmatch(data)) is not None and ".." not in m["split"]:
        return DataName("hub", m["rev"], repo=m["repo"], split=m["split"], column=m["column"])
    if (m := _LOCAL_RE.fullmatch(data)) is not None:
        return DataName("local", m["rev"], label=m["label"])
    raise ValueError(f"unknown data source {data[:64]!r}")


def describe(data: str) -> str:
    """The text a name stands for, for people (``parse``'s rules; ``data`` must parse)."""
    name = parse(data)
    if name is None:
        return "the built-in corpus"
    if name.kind == "fineweb":
        return f"FineWeb-Edu at revision {name.revision[:12]}"
    if name.kind == "hub":
        return f"{name.repo} ({name.split}, column {name.column}) at revision {name.revision[:12]}"
    return f"the text files {name.label!r} ({name.revision[:12]})"


def _check(pattern: re.Pattern[str], value: str, what: str, form: str) -> None:
    if not pattern.fullmatch(value) or ".." in value:
        raise ValueError(f"{what} {value[:64]!r} is not {form}")
