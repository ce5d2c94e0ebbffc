"""The audit round's shared vectors: tests/vectors/audit/rounds.json (docs/TRUST.md, "The audit
round").

Every case is a scenario of tests/audit_round_scenarios.py, run once more with each peer's
``AuditRound`` wrapped so that every event it was fed (its own commits, statements received,
proofs, recomputations, cancel) and everything it answered (its decisions as one line each, or
the refusal's code) is written down, with the round's state after each event. A replay feeds
the same events to a fresh round made from the same setup and must answer the same lines:
``tests/p2p/test_audit_round.py`` replays them in Python and ``tests/js/audit_round.test.mjs``
through ``static/js/p2p/machine/audit.js``. Signatures are Ed25519 (deterministic), so the
twins' statements and signatures are byte for byte the same.

    python tests/audit_round_vectors.py --write   # regenerate the file
    python tests/audit_round_vectors.py --check   # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import audit_round_scenarios as rounds
from daisychain.p2p import statements as st
from daisychain.p2p.machine import audit

FILE = Path(__file__).resolve().parent / "vectors" / "audit" / "rounds.json"
FORMAT_VERSION = 1
EVENTS = ("commit_contribution", "commit_reduced", "receive", "receive_proof", "recomputed",
          "cancel")  # fmt: skip

# Scenarios that check what no event trace shows: a round's own guards against the shell's
# mistakes (ValueError) and the phase guard, called directly.
NOT_RECORDED = (
    rounds.scenario_cancelled,
    rounds.scenario_own_commit_checked,
    rounds.scenario_setup_checked,
)

# The scenarios written down, with the peers whose rounds are kept (every peer of the
# scenario's last network when None).
CASES: list[tuple[Callable[[Any], None], tuple[str, ...] | None]] = [
    (rounds.scenario_honest_not_audited, None),
    (rounds.scenario_honest_audited, None),
    (rounds.scenario_caught_liar, None),
    (rounds.scenario_liar_leader, None),
    (rounds.scenario_reduction_liar, None),
    (rounds.scenario_false_accusation, None),
    (rounds.scenario_equivocation, None),
    (rounds.scenario_bad_reveal, None),
    (rounds.scenario_withheld_reveal, ("A",)),
    (rounds.scenario_withheld_audit, None),
    (rounds.scenario_dispute_waits_for_every_result, None),
    (rounds.scenario_no_reveal_before_every_commit, ("A",)),
    (rounds.scenario_private_unaudited, ("A",)),
    (rounds.scenario_carried, None),
    (rounds.scenario_carried_late, None),
    *((s, ("A",)) for s in rounds.REFUSALS if s not in NOT_RECORDED),
]


def hx(b: bytes) -> str:
    return b.hex()


def signed(s: audit.Signed) -> dict[str, str]:
    return {"statement": hx(s.statement), "sig": hx(s.sig)}


def line(d: audit.Decision) -> str:
    """A decision as one line: what the replay compares."""
    if isinstance(d, audit.Send):
        extra = f" audited {hx(d.audited.statement)} {hx(d.audited.sig)}" if d.audited else ""
        return f"send {hx(d.signed.statement)} {hx(d.signed.sig)}{extra}"
    if isinstance(d, audit.Recompute):
        shares = ",".join(map(str, d.shares))
        return (f"recompute {hx(d.of)} {int(d.item)} {d.index} {d.author} {d.round} {d.rank} "
                f"{shares} {d.why}")  # fmt: skip
    if isinstance(d, audit.AskStatements):
        return f"ask {d.peer}"
    if isinstance(d, audit.SendProof):
        return (f"proof {d.kind} {hx(d.first.statement)} {hx(d.first.sig)} "
                f"{hx(d.second.statement)} {hx(d.second.sig)}")  # fmt: skip
    if isinstance(d, audit.Concluded):
        return f"concluded {int(d.item)} {d.index} {d.author} {d.auditor} {d.result}"
    if isinstance(d, audit.Proven):
        return f"proven {d.peer} {d.kind} {d.by}"
    return f"refuse {d.peer} {d.code}"


def state(r: audit.AuditRound) -> dict[str, Any]:
    return {
        "phase": r.phase.value,
        "waiting_for": sorted(r.waiting_for()),
        "proven": sorted(f"{p.peer} {p.kind} {p.by}" for p in r.proven.values()),
        "may_apply": r.may_apply,
        "seed": hx(r.seed) if r.seed is not None else "",
    }


def event(name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> dict[str, Any]:
    if name == "commit_contribution":
        chunks, data = args
        return {"event": "commit", "chunks": [hx(c) for c in chunks], "data": hx(data),
                "private": kw["private_data"], "now": kw["now"]}  # fmt: skip
    if name == "commit_reduced":
        return {"event": "commit-reduced", "digest": hx(args[0]), "now": args[1]}
    if name == "receive":
        s, sender, now = args
        return {"event": "receive", **signed(s), "sender": sender, "now": now,
                "relayed": kw.get("relayed", False)}  # fmt: skip
    if name == "receive_proof":
        kind, first, second, sender, now = args
        return {"event": "proof", "kind": kind, "first": signed(first),
                "second": signed(second), "sender": sender, "now": now}  # fmt: skip
    if name == "recomputed":
        of, digests, data, now = args
        return {"event": "recomputed", "of": hx(of), "digests": [hx(d) for d in digests],
                "data": hx(data), "now": now}  # fmt: skip
    return {"event": "cancel", "now": args[0]}


class Recorded:
    """An ``AuditRound`` whose events and answers are written to ``log``."""

    def __init__(self, inner: audit.AuditRound, log: list[dict[str, Any]]) -> None:
        self.__dict__["_inner"], self.__dict__["_log"] = inner, log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in EVENTS:
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            entry = event(name, args, kw)
            try:
                out = attr(*args, **kw)
            except audit.AuditRefused as e:
                entry["answer"] = {"refused": e.code}
                raise
            except ValueError:
                entry["answer"] = {"error": "ValueError"}
                raise
            finally:
                if "answer" in entry:
                    entry["state"] = state(self._inner)
                    self._log.append(entry)
            entry["answer"] = {"decisions": [line(d) for d in out or ()]}
            entry["state"] = state(self._inner)
            self._log.append(entry)
            return out

        return call


def setup(r: audit.AuditRound) -> dict[str, Any]:
    return {
        "run": r.run,
        "step": r.step,
        "round": r.round,
        "peers": list(r.peers),
        "shares": list(r.shares),
        "blocks": r.blocks,
        "me": r.me,
        "secret": "",  # filled in by record(): the round keeps only its signing key
        "prev": hx(r.prev),
        "one_in": r.one_in,
        "keys": {p: hx(k) for p, k in sorted(r.keys.items())},
        "private": r.policy,
        "carry": [
            {"round": c.round, "peer": c.peer, "peers": list(c.peers), "shares": list(c.shares)}
            for c in r.carry
        ],
    }


def record(scenario: Callable[[Any], None], keep: tuple[str, ...] | None) -> dict[str, Any]:
    nets: list[Any] = []
    original = rounds.Net.__post_init__

    def post_init(net: Any) -> None:
        original(net)
        net.logs = {p: [] for p in net.peers}
        net.inner = dict(net.rounds)
        net.rounds = {p: Recorded(r, net.logs[p]) for p, r in net.rounds.items()}
        nets.append(net)

    rounds.Net.__post_init__ = post_init  # type: ignore[method-assign]
    try:
        scenario(audit)
    finally:
        rounds.Net.__post_init__ = original  # type: ignore[method-assign]
    net = nets[-1]
    peers = []
    for p in keep or net.peers:
        s = setup(net.inner[p])
        s["secret"] = hx(net.secrets[p])
        peers.append({"setup": s, "events": net.logs[p]})
    return {"scenario": scenario.__name__.removeprefix("scenario_"), "peers": peers}


def cases() -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "absent": hx(st.ABSENT),
        "cases": [record(s, keep) for s, keep in CASES],
    }


def text() -> str:
    return json.dumps(cases(), indent=1, ensure_ascii=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true")
    group.add_argument("--check", action="store_true")
    args = parser.parse_args()
    data = text()
    if args.write:
        FILE.write_text(data, encoding="utf-8")
        return 0
    if not FILE.exists() or FILE.read_text(encoding="utf-8") != data:
        print(
            "stale: rounds.json: run python tests/audit_round_vectors.py --write", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
