"""Control-message cases of commit, then audit (docs/TRUST.md, "Messages"; data-channel version 7).

Part of the ``wire`` set (``vectorgen.wire`` writes them into ``p2p_wire/messages.json`` beside
the version-6 cases): ``commit`` (both pieces), ``reveal``, ``audit``, ``proof``,
``roster.carry``, the ``repair`` pieces ``commit`` and ``reduced-commit`` and ``config.audit``,
each accepted in its valid forms and refused by every rule of ``messages.parse`` fed one wrong
field (hex lengths and case, list lengths, indices, missing and mistyped fields, the size cap).
Unknown fields are ignored here as in every other message, so an extra field is a valid case.
"""

from __future__ import annotations

import json
from typing import Any

from daisychain.wire import messages

RUN = "0123456789abcdef"
H1 = "1f" * 32  # a digest
H2 = "0123456789abcdef" * 4
SIG = "5e" * 64  # a signature's 128 hex digits
UPPER = "AB" * 32
# Statements as the layout makes them: the shortest (a reduced commit) and the longest (a
# contribution commit of 64 peers); their bytes are opaque to the wire (the machine parses them).
SHORT = "a5" * messages.MIN_STATEMENT_BYTES
LONG = "c3" * messages.MAX_STATEMENT_BYTES
_DROP = object()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if value is _DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def valid() -> dict[str, dict[str, Any]]:
    """One valid message of each new type (``valid-<type>`` in the file)."""
    attempt = {"run": RUN, "step": 3, "round": 1}
    return {
        "commit": {"type": "commit", **attempt, "peer": "BBBBBBBBBBBB", "roster": H1,
                   "piece": "contribution", "prev": H2, "chunks": [H1, "", H2], "data": H2,
                   "nonce_hash": H1, "sig": SIG},
        "reveal": {"type": "reveal", **attempt, "nonce": H1, "seen": H2, "sig": SIG},
        "audit": {"type": "audit", **attempt, "item": "contribution", "index": 2, "of": H1,
                  "digests": [H2, "", H1], "data": H2, "sig": SIG},
        "proof": {"type": "proof", **attempt, "kind": "equivocation",
                  "first": {"statement": SHORT, "sig": SIG},
                  "second": {"statement": LONG, "sig": SIG}},
    }  # fmt: skip


def texts(v: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(name, raw text) of every case but the ``valid-<type>`` ones; ``v`` is the file's valid
    message of every type (the version-6 ones too: roster, repair and config grow here)."""
    cm, rv, au, pr = v["commit"], v["reveal"], v["audit"], v["proof"]
    red = _with(cm, piece="reduced", chunk=2, digest=H2, prev=_DROP, chunks=_DROP, data=_DROP,
                nonce_hash=_DROP)  # fmt: skip
    au_red = _with(au, item="reduced", index=5, digests=[H1], data="")
    ro, rp, cfg = v["roster"], v["repair"], v["config"]
    audit_on = _with(cfg, audit={"one_in": 16})
    cases = [
        # Accepted.
        ("valid-commit-reduced", red),
        ("valid-commit-private-data", _with(cm, private_data=True, data="")),
        ("valid-commit-private-data-false", _with(cm, private_data=False)),
        ("valid-commit-64-chunks", _with(cm, chunks=[H1] * 32 + [""] * 32)),
        ("valid-commit-one-chunk", _with(cm, chunks=[""])),
        ("valid-commit-unknown-field-ignored", _with(cm, note="ignored", sig_hex=1)),
        ("valid-commit-reduced-chunk-63", _with(red, chunk=63)),
        ("valid-commit-reduced-keeps-only-its-fields", _with(red, prev=H1, chunks=[H1])),
        ("valid-reveal-round-255", _with(rv, round=255)),
        ("valid-audit-reduced", au_red),
        ("valid-audit-quoted", _with(au, statement=LONG, statement_sig=SIG)),
        ("valid-audit-quoted-shortest", _with(au_red, statement=SHORT, statement_sig=SIG)),
        ("valid-audit-index-63", _with(au, index=63)),
        ("valid-audit-data-none", _with(au, data="")),
        ("valid-proof-bad-reveal", _with(pr, kind="bad-reveal")),
        ("valid-roster-carry", _with(ro, carry=[[0, "c"], [1, "d"]])),
        ("valid-roster-carry-empty", _with(ro, carry=[])),
        ("valid-roster-carry-64", _with(ro, carry=[[r % 256, f"p{r}"] for r in range(64)])),
        ("valid-repair-commit", _with(rp, piece="commit", chunk=63)),
        ("valid-repair-reduced-commit", _with(rp, piece="reduced-commit", chunk=0)),
        ("valid-config-audit", audit_on),
        ("valid-config-audit-unaudited", _with(cfg, audit={"one_in": 1, "private": "unaudited"})),
        ("valid-config-audit-refuse-written", _with(cfg, audit={"one_in": 16,
                                                                "private": "refuse"})),
        # Well formed; runconfig refuses them (audit-rate, audit-private).
        ("valid-config-audit-one-in-zero", _with(cfg, audit={"one_in": 0})),
        ("valid-config-audit-private-unknown", _with(cfg, audit={"one_in": 16,
                                                                 "private": "maybe"})),
        # Refused: commit, one field each.
        ("commit-run-upper", _with(cm, run=RUN.upper())),
        ("commit-step-zero", _with(cm, step=0)),
        ("commit-round-256", _with(cm, round=256)),
        ("commit-peer-missing", _with(cm, peer=_DROP)),
        ("commit-peer-bad-id", _with(cm, peer="B B")),
        ("commit-peer-long", _with(cm, peer="B" * 33)),
        ("commit-roster-63-hex", _with(cm, roster=H1[:63])),
        ("commit-roster-65-hex", _with(cm, roster=H1 + "0")),
        ("commit-roster-upper", _with(cm, roster=UPPER)),
        ("commit-piece-missing", _with(cm, piece=_DROP)),
        ("commit-piece-unknown", _with(cm, piece="checkpoint")),
        ("commit-piece-repair-name", _with(cm, piece="reduced-commit")),
        ("commit-prev-missing", _with(cm, prev=_DROP)),
        ("commit-prev-empty", _with(cm, prev="")),
        ("commit-chunks-missing", _with(cm, chunks=_DROP)),
        ("commit-chunks-none", _with(cm, chunks=[])),
        ("commit-chunks-65", _with(cm, chunks=[H1] * 65)),
        ("commit-chunks-upper", _with(cm, chunks=[H1, UPPER])),
        ("commit-chunks-63-hex", _with(cm, chunks=[H1[:63]])),
        ("commit-chunks-null-entry", _with(cm, chunks=[H1, None])),
        ("commit-chunks-string", _with(cm, chunks=H1)),
        ("commit-data-missing", _with(cm, data=_DROP)),
        ("commit-data-upper", _with(cm, data=UPPER)),
        ("commit-data-null", _with(cm, data=None)),
        ("commit-nonce-hash-short", _with(cm, nonce_hash=H1[:62])),
        ("commit-private-data-string", _with(cm, private_data="true")),
        ("commit-sig-missing", _with(cm, sig=_DROP)),
        ("commit-sig-127-hex", _with(cm, sig=SIG[:127])),
        ("commit-sig-129-hex", _with(cm, sig=SIG + "0")),
        ("commit-sig-upper", _with(cm, sig=SIG.upper())),
        ("commit-sig-number", _with(cm, sig=5)),
        ("commit-reduced-chunk-64", _with(red, chunk=64)),
        ("commit-reduced-chunk-negative", _with(red, chunk=-1)),
        ("commit-reduced-chunk-float", _with(red, chunk=2.0)),
        ("commit-reduced-chunk-missing", _with(red, chunk=_DROP)),
        ("commit-reduced-digest-empty", _with(red, digest="")),
        ("commit-reduced-digest-upper", _with(red, digest=UPPER)),
        ("commit-reduced-sig-missing", _with(red, sig=_DROP)),
        ("commit-too-large", _with(cm, pad="x" * messages.MAX_MESSAGE_BYTES)),
        # Refused: reveal.
        ("reveal-step-missing", _with(rv, step=_DROP)),
        ("reveal-nonce-missing", _with(rv, nonce=_DROP)),
        ("reveal-nonce-63-hex", _with(rv, nonce=H1[:63])),
        ("reveal-seen-upper", _with(rv, seen=UPPER)),
        ("reveal-seen-empty", _with(rv, seen="")),
        ("reveal-sig-129-hex", _with(rv, sig=SIG + "a")),
        # Refused: audit.
        ("audit-item-missing", _with(au, item=_DROP)),
        ("audit-item-unknown", _with(au, item="reduction")),
        ("audit-index-64", _with(au, index=64)),
        ("audit-index-negative", _with(au, index=-1)),
        ("audit-index-bool", _with(au, index=True)),
        ("audit-of-63-hex", _with(au, of=H1[:63])),
        ("audit-of-upper", _with(au, of=UPPER)),
        ("audit-digests-missing", _with(au, digests=_DROP)),
        ("audit-digests-none", _with(au, digests=[])),
        ("audit-digests-65", _with(au, digests=[""] * 65)),
        ("audit-digests-upper", _with(au, digests=[UPPER])),
        ("audit-reduced-digests-two", _with(au_red, digests=[H1, H2])),
        ("audit-reduced-digests-empty-string", _with(au_red, digests=[""])),
        ("audit-reduced-digests-upper", _with(au_red, digests=[UPPER])),
        ("audit-data-upper", _with(au, data=UPPER)),
        ("audit-data-missing", _with(au, data=_DROP)),
        ("audit-statement-without-sig", _with(au, statement=SHORT)),
        ("audit-sig-without-statement", _with(au, statement_sig=SIG)),
        ("audit-statement-null", _with(au, statement=None, statement_sig=SIG)),
        ("audit-statement-odd", _with(au, statement=SHORT + "a", statement_sig=SIG)),
        ("audit-statement-94-bytes", _with(au, statement=SHORT[:-2], statement_sig=SIG)),
        ("audit-statement-2208-bytes", _with(au, statement=LONG + "00", statement_sig=SIG)),
        ("audit-statement-upper", _with(au, statement=SHORT.upper(), statement_sig=SIG)),
        ("audit-statement-not-hex", _with(au, statement="g" + SHORT[1:], statement_sig=SIG)),
        ("audit-statement-sig-short", _with(au, statement=SHORT, statement_sig=SIG[:126])),
        ("audit-sig-missing", _with(au, sig=_DROP)),
        # Refused: proof.
        ("proof-kind-missing", _with(pr, kind=_DROP)),
        ("proof-kind-unknown", _with(pr, kind="lie")),
        ("proof-first-missing", _with(pr, first=_DROP)),
        ("proof-first-list", _with(pr, first=[SHORT, SIG])),
        ("proof-first-statement-missing", _with(pr, first={"sig": SIG})),
        ("proof-first-statement-short", _with(pr, first={"statement": SHORT[:-2], "sig": SIG})),
        ("proof-second-statement-long", _with(pr, second={"statement": LONG + "00",
                                                           "sig": SIG})),
        ("proof-second-sig-upper", _with(pr, second={"statement": SHORT, "sig": SIG.upper()})),
        ("proof-second-sig-missing", _with(pr, second={"statement": SHORT})),
        ("proof-round-missing", _with(pr, round=_DROP)),
        # Refused: roster.carry.
        ("roster-carry-null", _with(ro, carry=None)),
        ("roster-carry-object", _with(ro, carry={"0": "c"})),
        ("roster-carry-65", _with(ro, carry=[[0, f"p{r}"] for r in range(65)])),
        ("roster-carry-round-256", _with(ro, carry=[[256, "c"]])),
        ("roster-carry-round-negative", _with(ro, carry=[[-1, "c"]])),
        ("roster-carry-round-bool", _with(ro, carry=[[True, "c"]])),
        ("roster-carry-round-float", _with(ro, carry=[[0.0, "c"]])),
        ("roster-carry-bad-peer", _with(ro, carry=[[0, "c d"]])),
        ("roster-carry-triple", _with(ro, carry=[[0, "c", 1]])),
        ("roster-carry-flat", _with(ro, carry=[0, "c"])),
        ("roster-carry-duplicate", _with(ro, carry=[[0, "c"], [0, "c"]])),
        # Refused: repair's new pieces.
        ("repair-piece-commit-chunk-64", _with(rp, piece="commit", chunk=64)),
        ("repair-piece-commit-case", _with(rp, piece="Commit")),
        ("repair-piece-reduced-commit-missing-chunk", _with(rp, piece="reduced-commit",
                                                            chunk=_DROP)),
        # Refused: config.audit's shape (its ranges are runconfig's, tests/js/audit_config).
        ("config-audit-null", _with(cfg, audit=None)),
        ("config-audit-list", _with(cfg, audit=[16])),
        ("config-audit-number", _with(cfg, audit=16)),
        ("config-audit-one-in-missing", _with(cfg, audit={"private": "refuse"})),
        ("config-audit-one-in-float", _with(cfg, audit={"one_in": 16.0})),
        ("config-audit-one-in-string", _with(cfg, audit={"one_in": "16"})),
        ("config-audit-one-in-negative", _with(cfg, audit={"one_in": -1})),
        ("config-audit-one-in-u32-overflow", _with(cfg, audit={"one_in": 2**32})),
        ("config-audit-private-number", _with(cfg, audit={"one_in": 16, "private": 1})),
        ("config-audit-private-null", _with(cfg, audit={"one_in": 16, "private": None})),
        ("config-audit-private-17-chars", _with(cfg, audit={"one_in": 16, "private": "u" * 17})),
    ]  # fmt: skip
    return [(name, _dumps(obj)) for name, obj in cases]
