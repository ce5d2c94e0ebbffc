"""Commit, then audit on the wire and in the config (docs/TRUST.md, "Messages" and "Config and
versions"), on the Python side: config.audit's rules in runconfig, each fed a wrong input; the
canonical bytes (audits off writes nothing, so every config keeps its bytes); the statement
sizes the wire allows, held to statements.py's layout; and the version-6 machine's refusals,
shown to fire by replaying their traces on a machine without them. Every message case (parsed,
or refused with code, message and hint) is in tests/vectors/p2p_wire/messages.json, checked by
tests/p2p/test_p2p_wire_vectors.py and tests/js/p2p_messages.test.mjs; runconfig's texts are
compared with the JavaScript mirror's by tests/js/audit_config.test.mjs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from daisychain.p2p import runconfig, statements
from daisychain.p2p.machine import Machine
from daisychain.wire import messages
from protocol_traces.playback import TraceMismatch, load, replay
from protocol_traces.script import TOKENIZER, VOCAB, config

TRACES = Path(__file__).resolve().parents[1] / "vectors" / "protocol"
SIG = "5e" * 64
H = "1f" * 32


def audited(one_in: int, private: str = "refuse", **changes: object) -> messages.Config:
    cfg = dataclasses.replace(config(3), audit=messages.AuditSpec(one_in, private))
    return dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]


def parse(cfg: messages.Config, **kw: object) -> runconfig.RunConfig:
    # Through the wire first: what a follower receives.
    received = messages.parse(messages.encode(cfg))
    assert isinstance(received, messages.Config)
    return runconfig.parse(received, tokenizer_sha256=TOKENIZER, vocab_size=VOCAB, **kw)  # type: ignore[arg-type]


def refused(cfg: messages.Config, **kw: object) -> runconfig.Incompatible:
    with pytest.raises(runconfig.Incompatible) as info:
        parse(cfg, **kw)
    assert info.value.code == "incompatible" and info.value.hint
    return info.value


def test_audits_off_writes_nothing_and_audits_on_writes_after_outer() -> None:
    plain = messages.encode(config(3))
    assert "audit" not in plain
    on = messages.encode(audited(16))
    assert on == plain[: -len(',"type":"config"}')] + ',"audit":{"one_in":16},"type":"config"}'
    unaudited = messages.encode(audited(4, "unaudited"))
    assert unaudited.endswith('"audit":{"one_in":4,"private":"unaudited"},"type":"config"}')
    outer = dataclasses.replace(
        audited(16), sync=messages.SYNC_OUTER, outer=messages.OuterSpec(4, 0.7, 0.9)
    )
    assert messages.encode(outer).endswith(
        '"outer":{"steps":4,"lr":0.7,"momentum":0.9},"audit":{"one_in":16},"type":"config"}'
    )
    # "refuse" written out reads as the default and is written as it
    text = on.replace('{"one_in":16}', '{"one_in":16,"private":"refuse"}')
    assert messages.encode(messages.parse(text)) == on


def test_every_config_vector_keeps_its_bytes() -> None:
    """The stored configs of the shared vectors re-encode to themselves: absent reads as off."""
    wire = json.loads((TRACES.parent / "p2p_wire" / "messages.json").read_text(encoding="utf-8"))
    configs = [c for c in wire["cases"] if c["name"].startswith("valid-config") and "encoded" in c]
    assert len(configs) >= 10
    for case in configs:
        parsed = messages.parse(case["encoded"])
        assert messages.encode(parsed) == case["encoded"], case["name"]
        assert (parsed.audit is None) == ("audit" not in case["raw"]), case["name"]  # type: ignore[union-attr]


def test_an_audited_per_step_run_is_accepted() -> None:
    run = parse(audited(16))
    assert run.message.audit == messages.AuditSpec(16)
    parse(audited(1))
    parse(audited(runconfig.MAX_AUDIT_ONE_IN, "unaudited"), private_data=True)
    parse(audited(8), min_audit=8)
    parse(audited(2), min_audit=8)
    parse(config(3))  # audits off: any follower without a minimum


@pytest.mark.parametrize("one_in", [0, runconfig.MAX_AUDIT_ONE_IN + 1, messages.U32_MAX])
def test_audit_rate_refuses_a_rate_outside_its_range(one_in: int) -> None:
    exc = refused(audited(one_in))
    assert exc.rule == "audit-rate"
    assert exc.message == f"audit.one_in {one_in} outside [1, 65536]"


@pytest.mark.parametrize("private", ["", "Refuse", "accept", "unaudited "])
def test_audit_private_refuses_another_value(private: str) -> None:
    exc = refused(audited(16, private))
    assert exc.rule == "audit-private"
    assert exc.message == f"audit.private {private!r} is not one of refuse, unaudited"


def test_audit_outer_refuses_an_audited_outer_run() -> None:
    cfg = dataclasses.replace(
        audited(16), sync=messages.SYNC_OUTER, outer=messages.OuterSpec(4, 0.7, 0.9)
    )
    assert refused(cfg).rule == "audit-outer"
    parse(dataclasses.replace(cfg, audit=None))  # the same run without audits trains


def test_private_data_refuses_a_run_that_refuses_private_text() -> None:
    exc = refused(audited(16), private_data=True)
    assert exc.rule == "private-data"
    assert exc.hint == "turn Private text off, or ask the leader to accept private data unaudited"
    parse(audited(16, "unaudited"), private_data=True)
    parse(config(3), private_data=True)  # audits off: private text is the run's business


def test_min_audit_refuses_a_run_that_audits_less() -> None:
    exc = refused(audited(16), min_audit=8)
    assert exc.rule == "min-audit"
    assert exc.message == "the run audits one attempt in 16; this peer needs at least one in 8"
    off = refused(config(3), min_audit=1)
    assert off.message == "the run audits no attempt; this peer needs at least one in 1"


def test_the_rules_come_in_the_documented_order() -> None:
    outer: dict[str, object] = {"sync": messages.SYNC_OUTER,
                                "outer": messages.OuterSpec(4, 0.7, 0.9)}  # fmt: skip
    assert refused(audited(0, "x", **outer), private_data=True).rule == "audit-rate"
    assert refused(audited(16, "x", **outer), private_data=True).rule == "audit-private"
    assert refused(audited(16, "refuse", **outer), private_data=True, min_audit=1).rule == (
        "audit-outer"
    )
    assert refused(audited(16), private_data=True, min_audit=1).rule == "private-data"
    # after the outer rules, before the optimizer's
    bad_outer = messages.OuterSpec(0, 0.7, 0.9)
    assert refused(audited(0, sync=messages.SYNC_OUTER, outer=bad_outer)).rule == "outer-steps"
    bad_lr = dataclasses.replace(audited(0), optim=messages.OptimSpec(5.0, 0, 0.0, 1.0))
    assert refused(bad_lr).rule == "audit-rate"


@pytest.mark.parametrize("wrong", [-1, runconfig.MAX_AUDIT_ONE_IN + 1, 1.5, True, "8"])
def test_a_wrong_minimum_is_a_programming_error(wrong: object) -> None:
    with pytest.raises(ValueError, match="min_audit must be an integer in"):
        parse(config(3), min_audit=wrong)


def test_statement_sizes_are_the_statement_layouts() -> None:
    shortest = statements.HEADER + 1 + statements.DIGEST  # a reduced commit
    longest = statements.HEADER + 1 + 3 * statements.DIGEST + statements.MAX_ROSTER * 32
    assert (shortest, longest) == (messages.MIN_STATEMENT_BYTES, messages.MAX_STATEMENT_BYTES)
    head = statements.Head("0123456789abcdef", 1, 0, "AAAAAAAAAAAA", bytes(32))
    made = statements.encode(statements.Reduced(head, 0, bytes(32)))
    assert len(made) == messages.MIN_STATEMENT_BYTES
    audit = {"type": "audit", "run": head.run, "step": 1, "round": 0, "item": "reduced",
             "index": 0, "of": H, "digests": [H], "data": "", "statement": made.hex(),
             "statement_sig": SIG, "sig": SIG}  # fmt: skip
    assert messages.parse(json.dumps(audit)).statement == made.hex()  # type: ignore[union-attr]


def test_the_largest_messages_fit_the_size_cap() -> None:
    """commit at 64 peers, an audit quoting the longest statement with 64 digests, a proof of
    two longest statements: each well under 16 KiB."""
    run, step, rnd = "0123456789abcdef", 2**32 - 1, 255
    longest = "ab" * messages.MAX_STATEMENT_BYTES
    records: list[messages.Message] = [
        messages.ContributionCommit(run=run, step=step, round=rnd, peer="p" * 32, roster=H,
                                    prev=H, chunks=[H] * 64, data=H, nonce_hash=H,
                                    private_data=True, sig=SIG),
        messages.AuditResult(run=run, step=step, round=rnd, item="contribution", index=63, of=H,
                             digests=[H] * 64, data=H, statement=longest, statement_sig=SIG,
                             sig=SIG),
        messages.Proof(run=run, step=step, round=rnd, kind="equivocation",
                       first=messages.Signed(longest, SIG), second=messages.Signed(longest, SIG)),
        messages.Roster(run, 1, 255, [f"p{i:031d}" for i in range(64)], [64] * 64,
                        [(255, f"q{i:031d}") for i in range(64)]),
    ]  # fmt: skip
    for m in records:
        text = messages.encode(m)
        assert len(text) < messages.MAX_MESSAGE_BYTES * 0.75, (m.type, len(text))
        assert messages.parse(text) == m


def test_version_seven_records_are_written_in_declaration_order() -> None:
    reduced = messages.ReducedCommit(run="0123456789abcdef", step=1, round=0, peer="A",
                                     roster=H, chunk=3, digest=H, sig=SIG)  # fmt: skip
    assert list(json.loads(messages.encode(reduced))) == [
        "run", "step", "round", "peer", "roster", "piece", "chunk", "digest", "sig", "type",
    ]  # fmt: skip
    bare = messages.AuditResult(run="0123456789abcdef", step=1, round=0, item="reduced",
                                index=0, of=H, digests=[H], data="", sig=SIG)  # fmt: skip
    assert "statement" not in messages.encode(bare)
    roster = messages.Roster("0123456789abcdef", 1, 0, ["a"], [12])
    assert "carry" not in messages.encode(roster)


# ---------------------------------------------------------------------------------------------
# The version-6 machine's refusals: each trace fails on a machine without its rule.


def _trace(name: str) -> dict[str, object]:
    return load(TRACES / f"{name}.json")


def test_the_version_boundary_traces_replay() -> None:
    for name in ("v6-audit-config", "v6-audit-messages", "v6-audit-repair"):
        assert replay(_trace(name)) > 0


def test_a_machine_that_takes_an_audited_config_fails_its_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def without_the_boundary(self: Machine, cfg: messages.Config) -> runconfig.RunConfig:
        s = self.settings
        return runconfig.parse(cfg, tokenizer_sha256=s.tokenizer_sha256,
                               vocab_size=s.vocab_size, limits=s.limits,
                               data_sources=s.data_sources)  # fmt: skip

    monkeypatch.setattr(Machine, "_parse", without_the_boundary)
    taken = r"(?s)v6-audit-config: step \d+ .*expected .*'incompatible'.*got .*'ready'"
    with pytest.raises(TraceMismatch, match=taken):
        replay(_trace("v6-audit-config"))


def test_a_machine_that_ignores_version_seven_messages_fails_their_traces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Machine, "_refuse_audit_message", lambda self, peer, m: None)
    for name in ("v6-audit-messages", "v6-audit-repair"):
        with pytest.raises(TraceMismatch, match=rf"{name}: step \d+ \(message at 0"):
            replay(_trace(name))
