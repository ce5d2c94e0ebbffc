"""The audit round of one attempt (``p2p.machine.audit``; docs/TRUST.md, "Commit, then audit"):
the scenarios of tests/audit_round_scenarios.py (whole rounds, every refusal), each rule of the
module removed once and seen to fail a scenario, and the shared vectors
(tests/vectors/audit/rounds.json) current and replayed.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from typing import Any

import pytest

import audit_round_scenarios as sc
from daisychain.p2p.machine import audit
from source_mutant import mutant


@pytest.mark.parametrize("scenario", sc.ROUNDS)
def test_round(scenario: Callable[[types.ModuleType], None]) -> None:
    scenario(audit)


@pytest.mark.parametrize("scenario", sc.REFUSALS)
def test_refusal(scenario: Callable[[types.ModuleType], None]) -> None:
    scenario(audit)


# -- planted bugs: each rule removed once, and a scenario above must fail


PLANTS = [
    (
        "signatures not verified",
        "if not auditkey.verify(key, signed.statement, signed.sig):",
        "if False:",
        sc.scenario_refuse_wrong_signature,
    ),
    (
        "a statement taken from a peer other than its author",
        "if author != sender and not relayed:",
        "if False:",
        sc.scenario_refuse_unasked_relay,
    ),
    (
        "the roster digest not compared",
        "if s.head.roster != context.digest:",
        "if False:",
        sc.scenario_refuse_wrong_roster,
    ),
    ("prev not compared", "if s.prev != self.prev:", "if False:", sc.scenario_refuse_wrong_prev),
    (
        "a chunk digest present for an empty chunk",
        "if (d == st.ABSENT) != absent:",
        "if False:",
        sc.scenario_refuse_layout_of_empty_chunks,
    ),
    (
        "a non-empty chunk without its digest",
        "if (d == st.ABSENT) != absent:",
        "if False:",
        sc.scenario_refuse_wrong_layout,
    ),
    (
        "the data digest rule dropped",
        "if (c.data == st.ABSENT) != (share == 0 or c.private):",
        "if False:",
        sc.scenario_refuse_wrong_layout,
    ),
    (
        "private data accepted in a run that refuses it",
        'if s.private and self.policy == "refuse":',
        "if False:",
        sc.scenario_refuse_private_when_refused,
    ),
    (
        "a reduced commit of a chunk its author does not own",
        "s.chunk not in self.chunks or context.peers[s.chunk] != author",
        "False",
        sc.scenario_refuse_reduced_of_another_chunk,
    ),
    (
        "another attempt's statement taken",
        "if (s.head.run, s.head.step) != (self.run, self.step):",
        "if False:",
        sc.scenario_refuse_other_attempt_and_stranger,
    ),
    (
        "an audit from a peer not assigned the item",
        "if item.auditor != a.head.author:",
        "if False:",
        sc.scenario_refuse_audit_from_unassigned,
    ),
    (
        "a held audit's refusal dropped",
        "out.append(Refuse(sender, e.code, str(e)))",
        "pass",
        sc.scenario_refuse_early_audit_from_unassigned,
    ),
    (
        "audit results held before the draw without a bound",
        "sum(sender == a.head.author for sender, _ in self._early_audits) >= MAX_ITEMS",
        "False",
        sc.scenario_refuse_audit_flood,
    ),
    (
        "a fork declared before the signature is checked",
        "        self._verify(signed, author)\n        if (s.head.run",
        "        if (s.head.run",
        sc.scenario_refuse_forged_fork,
    ),
    (
        "a reveal sent before every commit",
        "if self.phase is RoundPhase.COMMITTING and not self._missing_statements():",
        "if self.phase is RoundPhase.COMMITTING and self.rank in self.commits:",
        sc.scenario_no_reveal_before_every_commit,
    ),
    (
        "a draw without seen-agree",
        "if r.seen != self.seen:",
        "if False:",
        sc.scenario_equivocation,
    ),
    (
        "equivocation not looked for",
        "if held.statement == signed.statement:",
        "if True:",
        sc.scenario_equivocation,
    ),
    (
        "a nonce not checked against its hash",
        "if st.nonce_hash(r.nonce) != c.nonce_hash and",
        "if False and",
        sc.scenario_bad_reveal,
    ),
    (
        "a dispute settled by the accuser's word",
        "if item.own == item.accusation:",
        "if True:",
        sc.scenario_false_accusation,
    ),
    (
        "no check-yourself recomputation",
        'return [self._recompute(item, "check")]',
        "return []",
        sc.scenario_caught_liar,
    ),
    (
        "passed before every result",
        'all(i.result == "pass" for i in self.items.values())',
        "True",
        sc.scenario_withheld_audit,
    ),
    (
        "settled at the first verdict",
        "if all(i.result is not None or i.auditor in self.proven for i in self.items.values()):",
        "if True:",
        sc.scenario_dispute_waits_for_every_result,
    ),
    (
        "a proof taken without checking what it shows",
        "ok = self._slot(a) == self._slot(b) and first.statement != second.statement",
        "ok = True",
        sc.scenario_refuse_bad_proof,
    ),
    (
        "a proof's second statement of another step",
        "steps != {(self.run, self.step)}",
        "(a.head.run, a.head.step) != (self.run, self.step)",
        sc.scenario_refuse_bad_proof,
    ),
    (
        "a proof's second signature not checked",
        "self._verify(second, author)",
        "pass",
        sc.scenario_refuse_bad_proof,
    ),
    (
        "a carried statement not awaited before the reveal",
        "out |= {c.peer for i, c in enumerate(self.carry) if i not in self.carried}",
        "pass",
        sc.scenario_carried_late,
    ),
    (
        "a private contribution drawn",
        "private=private,",
        "private=None,",
        sc.scenario_private_unaudited,
    ),
]


def fails(scenario: Callable[[types.ModuleType], None], mod: types.ModuleType) -> bool:
    try:
        scenario(mod)
    except (Exception, pytest.fail.Exception):
        return True
    return False


@pytest.mark.parametrize(("what", "old", "new", "scenario"), PLANTS, ids=[p[0] for p in PLANTS])
def test_planted_bugs_fail(
    what: str, old: str, new: str, scenario: Callable[[types.ModuleType], None]
) -> None:
    assert not fails(scenario, audit), f"{scenario.__name__} fails without the plant"
    assert fails(scenario, mutant(audit, old, new)), f"{what}: {scenario.__name__} still passes"


# -- the shared vectors (tests/vectors/audit/rounds.json), replayed as the JavaScript twin does


def test_rounds_json_is_what_the_generator_writes() -> None:
    import audit_round_vectors

    stored = audit_round_vectors.FILE.read_text(encoding="utf-8")
    assert stored == audit_round_vectors.text(), (
        "tests/vectors/audit/rounds.json is stale: python tests/audit_round_vectors.py --write"
    )


def replay_peer(peer: dict[str, Any]) -> None:
    """A fresh round from the setup, fed every event: the same answers and states."""
    import audit_round_vectors as arv

    s = peer["setup"]
    b = bytes.fromhex
    r = audit.AuditRound(
        run=s["run"], step=s["step"], round_=s["round"], peers=s["peers"], shares=s["shares"],
        blocks=s["blocks"], me=s["me"], secret=b(s["secret"]), prev=b(s["prev"]),
        one_in=s["one_in"], keys={p: b(k) for p, k in s["keys"].items()}, private=s["private"],
        carry=[audit.Carried(c["round"], c["peer"], tuple(c["peers"]), tuple(c["shares"]))
               for c in s["carry"]],
    )  # fmt: skip

    def signed(x: dict[str, str]) -> audit.Signed:
        return audit.Signed(b(x["statement"]), b(x["sig"]))

    for i, e in enumerate(peer["events"]):
        kind = e["event"]
        try:
            if kind == "commit":
                out = r.commit_contribution([b(c) for c in e["chunks"]], b(e["data"]),
                                            private_data=e["private"], now=e["now"])  # fmt: skip
            elif kind == "commit-reduced":
                out = r.commit_reduced(b(e["digest"]), e["now"])
            elif kind == "receive":
                out = r.receive(signed(e), e["sender"], e["now"], relayed=e["relayed"])
            elif kind == "proof":
                out = r.receive_proof(e["kind"], signed(e["first"]), signed(e["second"]),
                                      e["sender"], e["now"])  # fmt: skip
            elif kind == "recomputed":
                out = r.recomputed(b(e["of"]), [b(d) for d in e["digests"]], b(e["data"]), e["now"])
            else:
                r.cancel(e["now"])
                out = []
            answer: dict[str, Any] = {"decisions": [arv.line(d) for d in out]}
        except audit.AuditRefused as err:
            answer = {"refused": err.code}
        except ValueError:
            answer = {"error": "ValueError"}
        assert answer == e["answer"], f"{s['me']} event {i} ({kind})"
        assert arv.state(r) == e["state"], f"{s['me']} event {i} ({kind})"


def test_rounds_json_replays() -> None:
    import audit_round_vectors

    stored = json.loads(audit_round_vectors.FILE.read_text(encoding="utf-8"))
    assert len(stored["cases"]) >= 31
    for case in stored["cases"]:
        for peer in case["peers"]:
            replay_peer(peer)
