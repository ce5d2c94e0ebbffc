"""The shared cases of config equality: tests/vectors/config_equality.json.

A follower in a run refuses a second ``config`` from another peer that is not the run's own with
``wrong-run`` (docs/PROTOCOL.md, "Run phases"). Both machines decide "the same" on the canonical
encoding of the parsed record (``messages.encode``, which messages.js writes byte for byte), so
the rule is derived from the declarations instead of a list of fields kept by hand. These cases
pin it: a base config (an outer run resumed from step 1, so that every field but ``audit`` is
written: a version-6 follower refuses a run that audits, and audits refuse outer runs) and,
for every field of the ``Config`` record, recursively (enumerated from the dataclasses: a field
added there fails ``--write`` until ``OTHER`` gives it a value), a second config differing in
that one field, to a value that still parses, survives the round trip and that some peer could
train (``runconfig.parse`` with that config's own tokenizer and data; an audit field's as a
per-step run, ``ABSENT`` filling the rest of ``audit``): expected ``wrong-run``.
Beside them: the same config (and the same record spelled otherwise: keys reordered, defaults
written, a number respelled, an unknown field) accepted, and a signed zero refused.

Each case is the last step of a protocol trace (tests/vectors/README.md, "Protocol traces"):
follower B greets A and C, takes A's base config, then C sends the case's text. The file holds
the shared start (``trace``) and per case that step, recorded from the Python machine; a
replayer appends the step and replays (Python: tests/p2p/test_config_equality.py; Node:
tests/js/config_equality.test.mjs; Chromium: tests/browser/test_browser_protocol.py).

    python tests/config_vectors.py --write   # regenerate the file
    python tests/config_vectors.py --check   # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import sys
import typing
from pathlib import Path
from typing import Any

from daisychain.p2p import runconfig
from daisychain.wire import messages
from protocol_traces.jsonform import Json
from protocol_traces.scenarios import errors
from protocol_traces.script import OTHER_RUN, RUN, SEED, TOKENIZER, VOCAB, A, B, C, Script

FILE = Path(__file__).resolve().parent / "vectors" / "config_equality.json"
FORMAT = "daisychain-config-equality"
FORMAT_VERSION = 1
WRONG_RUN = "wrong-run"
ACCEPTED = "accepted"

# The base: tiny's architecture at a small sequence length and batch (so that preset "tiny" is a
# valid change), an outer run (so that outer.* are written) resumed from step 1 (so that
# resume_hash is read).
BASE = messages.Config(
    run=RUN, preset=None,
    model=messages.ModelSpec(vocab_size=VOCAB, width=64, layers=2, heads=4, seq_len=4, batch=1,
                             mlp_mult=4),
    optim=messages.OptimSpec(lr=0.003, warmup_steps=0, weight_decay=0.0, clip=1.0),
    steps=3, seed=SEED, data="builtin", tokenizer_sha256=TOKENIZER, resume_step=1,
    resume_hash=hashlib.sha256(b"daisychain config-equality resume").hexdigest(),
    global_batch=12, shares_by="speed", sync=messages.SYNC_OUTER,
    outer=messages.OuterSpec(steps=4, lr=0.7, momentum=0.9),
)  # fmt: skip

# Every field's other value (a dotted path into the record).
OTHER: dict[str, Any] = {
    "run": OTHER_RUN,
    "preset": "tiny",
    "model.vocab_size": VOCAB + 1,
    "model.width": 256,
    "model.layers": 3,
    "model.heads": 1,
    "model.seq_len": 8,
    "model.batch": 2,
    "model.mlp_mult": 2,
    "optim.lr": 0.001,
    "optim.warmup_steps": 1,
    "optim.weight_decay": 0.1,
    "optim.clip": 0.5,
    "steps": 4,
    "seed": SEED + 1,
    "data": "fineweb@" + "0123456789" * 4,
    "tokenizer_sha256": hashlib.sha256(b"daisychain config-equality tokenizer").hexdigest(),
    "resume_step": 2,
    "resume_hash": hashlib.sha256(b"daisychain config-equality other resume").hexdigest(),
    "global_batch": 13,
    "shares_by": "equal",
    "sync": messages.SYNC_STEP,  # a per-step run: its outer is not written, so it reads as None
    "outer.steps": 2,
    "outer.lr": 1.0,
    "outer.momentum": 0.5,
    "outer.overlap": 0.5,
    "outer.cut": "batch",
    "audit.one_in": 2,
    "audit.private": "unaudited",
}
# A field whose record the base does not have: audit. The base cannot have it (a version-6
# follower refuses a run that audits, so it would not take the base; and audits refuse outer
# runs), so an audit field is changed from absent to present, the rest of its record this.
ABSENT: dict[str, Any] = {"audit": messages.AuditSpec(one_in=16)}


def fields(record: type = messages.Config, prefix: str = "") -> list[str]:
    """Every leaf field of ``record`` as a dotted path, in declaration order: a field whose
    type is (or may be) another record is entered; ``type`` is the message kind, not a field."""
    hints = typing.get_type_hints(record)
    out: list[str] = []
    for f in dataclasses.fields(record):
        if f.name == "type":
            continue
        hint = hints[f.name]
        inner = [t for t in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(t)]
        if inner:
            assert len(inner) == 1, f"{prefix}{f.name}: one record type, not {inner}"
            out += fields(typing.cast(type, inner[0]), f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def get(record: Any, path: str) -> Any:
    for name in path.split("."):
        record = getattr(record, name)
    return record


def changed(record: Any, path: str, value: Any) -> Any:
    head, _, rest = path.partition(".")
    inner = getattr(record, head)
    if rest and inner is None:
        inner = ABSENT[head]
    new = changed(inner, rest, value) if rest else value
    return dataclasses.replace(record, **{head: new})


def variant(path: str) -> messages.Config:
    """``BASE`` with ``path`` changed to ``OTHER[path]``, as a peer receives it (encoded, then
    parsed); the change must survive that, and be a run some peer could train."""
    value = OTHER[path]
    cfg = messages.parse(messages.encode(changed(BASE, path, value)))
    assert isinstance(cfg, messages.Config)
    assert get(cfg, path) == value, f"{path}: {value!r} does not survive the round trip"
    assert messages.encode(cfg) != messages.encode(BASE), f"{path}: {value!r} is the base's"
    # Audits refuse outer runs (rule audit-outer): an audit field's value is one a per-step run
    # of the same config could train.
    trained = cfg if cfg.audit is None else dataclasses.replace(cfg, sync=messages.SYNC_STEP,
                                                                outer=None)  # fmt: skip
    try:  # a peer with this config's tokenizer, vocabulary and data
        runconfig.parse(
            trained, tokenizer_sha256=cfg.tokenizer_sha256, vocab_size=cfg.model.vocab_size,
            data_sources=("builtin", cfg.data),
        )  # fmt: skip
    except runconfig.Incompatible as exc:
        raise AssertionError(f"{path}: {value!r} is no run a peer trains: {exc.message}") from None
    return cfg


def respelled() -> str:
    """The base config's record in other JSON text: keys in reverse order, the defaults
    ``overlap`` and ``cut`` written, 0.003 as 3e-3, spaces, and a field no version knows."""
    obj = json.loads(messages.encode(BASE))
    obj["outer"] |= {"overlap": 0.0, "cut": messages.OUTER_CUT_DEFAULT}
    obj["note"] = "ignored"
    text = json.dumps(dict(reversed(obj.items())))
    assert text.count('"lr": 0.003') == 1
    text = text.replace('"lr": 0.003', '"lr": 3e-3')
    assert messages.parse(text) == BASE
    return text


def signed_zero() -> str:
    cfg = changed(BASE, "optim.weight_decay", -0.0)
    assert cfg == BASE, "dataclass == takes -0.0 for 0.0"
    return messages.encode(cfg)


def start() -> Script:
    """Follower B greets A and C, then takes A's base config (it asks A for the checkpoint)."""
    s = Script("config-equality", "B in A's run gets a second config from C.", B)
    s.connect(A, C)
    out = s.send(A, BASE)
    assert not errors(out) and s.machine.config == BASE, out
    return s


def case(name: str, field: str | None, text: str, expect: str) -> Json:
    s = start()
    steps = len(s.steps)
    s.at(1.0)
    out = s.text(C, text)
    refused = [(p, m.code) for p, m in errors(out)]
    assert refused == ([(C, WRONG_RUN)] if expect == WRONG_RUN else []), f"{name}: {out}"
    [step] = s.steps[steps:]
    return {"name": name, "field": field, "expect": expect, "step": step}


def build() -> Json:
    paths = fields()
    missing = [p for p in paths if p not in OTHER]
    assert not missing, f"config fields without a case: {missing}; give each a value in OTHER"
    stale = [p for p in OTHER if p not in paths]
    assert not stale, f"OTHER names fields the config no longer has: {stale}"
    base = messages.encode(BASE)
    cases = [
        case("identical", None, base, ACCEPTED),
        case("identical record, other JSON text", None, respelled(), ACCEPTED),
        *(case(p, p, messages.encode(variant(p)), WRONG_RUN) for p in paths),
        case("optim.weight_decay -0.0 (0.0 in the run)", "optim.weight_decay", signed_zero(),
             WRONG_RUN),
    ]  # fmt: skip
    trace = start().trace()
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "generated_by": "python tests/config_vectors.py --write",
        "description": "A second config from another peer is the run's own only when its "
        "parsed record encodes to the same bytes; a config differing in any one field is "
        "wrong-run. Append a case's step to trace's steps and replay.",
        "fields": paths, "base": base, "trace": trace, "cases": cases,
    }  # fmt: skip


def text() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help=f"write {FILE.name}")
    group.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    logging.getLogger("daisychain").setLevel(logging.ERROR)  # not each refusal's warning
    fresh = text()
    if args.write:
        FILE.write_text(fresh, encoding="utf-8")
        print(f"wrote {FILE} ({len(json.loads(fresh)['cases'])} cases)")
        return 0
    if not FILE.exists() or FILE.read_text(encoding="utf-8") != fresh:
        print(f"{FILE} is stale: run python tests/config_vectors.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
