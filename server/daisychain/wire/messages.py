"""Every JSON control message on a data channel, declared once, parsed and validated here.

Normative description: docs/PROTOCOL.md, "Control messages". A text message on a data channel is
one JSON object with a ``type`` field; ``parse`` turns it into one of the records below or raises
``MessageError`` (code + hint) which the receiver answers with an ``error`` message. Unknown
fields are ignored (forward compatibility); unknown types and missing or mistyped fields are
errors, never silently dropped. The sender of a message is the channel it arrived on: no message
carries a ``from`` field, so identity cannot be forged.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Literal, cast, get_args

from daisychain import datanames
from daisychain.p2p.shares import MAX_GLOBAL_BATCH
from daisychain.p2p.versions import CONTRACT_VERSION, DATA_PROTOCOL_VERSION
from daisychain.wire.fields import PEER_ID_RE, Fields

MAX_MESSAGE_BYTES = 16 * 1024
MAX_ROSTER = 64
MAX_SEQ_S = 1e6  # seconds per sequence a peer may report (about 11 days: anything is allowed)
RUN_ID_RE = re.compile(r"[0-9a-f]{16}")
HASH_RE = re.compile(r"[0-9a-f]{64}")
STATEMENT_RE = re.compile(r"[0-9a-f]*")
U32_MAX = 2**32 - 1

ErrorCode = Literal[
    "bad-json",
    "bad-message",
    "unknown-type",
    "too-large",
    "version-mismatch",
    "bad-frame",
    "wrong-run",
    "incompatible",
]
ERROR_CODES: tuple[str, ...] = get_args(ErrorCode)
SharesBy = Literal["speed", "equal"]  # config.shares_by (docs/PROTOCOL.md, "Gradient chunks")
SHARES_BY: tuple[str, ...] = get_args(SharesBy)
# config.sync: how the group combines its work (docs/PROTOCOL.md, "Outer runs"). Any short string
# is well formed; whether this peer trains that mode is runconfig's decision (`incompatible`), so a
# mode a later version adds is refused with a rule and a hint rather than as a malformed message.
SYNC_STEP = "step"
SYNC_OUTER = "outer"
OUTER_CUT_DEFAULT = "share"  # config.outer.cut when absent
MAX_SYNC_CHARS = 16
# config.audit (docs/TRUST.md, "Config and versions"): its shape here, its ranges runconfig's.
# "refuse" is written only when not that; any short string is well formed (rule audit-private).
AUDIT_PRIVATE_DEFAULT = "refuse"
MAX_AUDIT_PRIVATE_CHARS = 16
# Commit, then audit (docs/TRUST.md, "Messages"; data-channel version 7: declared and checked
# here, not yet sent by any machine). A statement travels as lowercase hex: the shortest is a
# reduced commit (62-byte head, chunk, digest: 95 bytes), the longest a contribution commit of a
# 64-peer roster (head, flags, prev, nonce_hash, data, 64 chunk digests: 2207 bytes); the
# numbers are daisychain.p2p.statements' layout (tests/p2p/test_audit_wire.py holds them to
# it). A signature is Ed25519's 64 bytes.
SIG_RE = re.compile(r"[0-9a-f]{128}")
MIN_STATEMENT_BYTES = 95
MAX_STATEMENT_BYTES = 2207
MAX_CARRY = 64
COMMIT_PIECES = ("contribution", "reduced")
AUDIT_ITEMS = ("contribution", "reduced")
PROOF_KINDS = ("equivocation", "bad-reveal")


class MessageError(ValueError):
    """A control message that cannot be accepted; becomes an ``error`` reply."""

    def __init__(self, code: ErrorCode, message: str, hint: str) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Hello:
    """First message on every channel, from both ends: the version handshake. ``version`` is
    the data-channel protocol's, ``contract`` the numerical contract's (docs/NUMERICS.md): a
    peer computing other bits could only fork the run, so both must equal this peer's."""

    version: int
    name: str
    contract: int = CONTRACT_VERSION
    type: Literal["hello"] = "hello"


@dataclass(frozen=True)
class ModelSpec:
    """The architecture (daisychain.model.config.ModelConfig minus norm_eps, which is fixed)."""

    vocab_size: int
    width: int
    layers: int
    heads: int
    seq_len: int
    batch: int
    mlp_mult: int


MODEL_FIELDS = ("vocab_size", "width", "layers", "heads", "seq_len", "batch", "mlp_mult")


@dataclass(frozen=True)
class OptimSpec:
    lr: float
    warmup_steps: int
    weight_decay: float
    clip: float


@dataclass(frozen=True)
class OuterSpec:
    """config.outer of a ``sync: "outer"`` run: ``steps`` batch indices per outer round (H), the
    outer Nesterov ``lr`` and ``momentum`` (docs/OUTER.md, "The outer step"), and ``overlap``:
    the fraction of a peer's inner steps that run while its round's exchange does (docs/OUTER.md,
    "Overlap"; written only when not 0, so a config without it keeps its bytes)."""

    steps: int
    lr: float
    momentum: float
    overlap: float = 0.0
    # How a peer's round is cut into inner steps (docs/PROTOCOL.md, "A round at a peer"):
    # "share" (written only when not that) or "batch".
    cut: str = "share"


@dataclass(frozen=True)
class AuditSpec:
    """config.audit of a run that audits (docs/TRUST.md, "Config and versions"): one attempt in
    ``one_in`` is audited; ``private`` says whether a peer training on private text is refused
    (``"refuse"``, written only when not that) or takes part unaudited (``"unaudited"``)."""

    one_in: int
    private: str = AUDIT_PRIVATE_DEFAULT


@dataclass(frozen=True)
class Config:
    """Leader -> all: the run's configuration. ``resume_step`` > 0: start from the leader's
    checkpoint (every peer asks for it with ``sync-request``) instead of a fresh init."""

    run: str
    preset: str | None
    model: ModelSpec
    optim: OptimSpec
    steps: int
    seed: int
    data: str
    tokenizer_sha256: str
    resume_step: int
    resume_hash: str | None
    global_batch: int  # sequences per step, shared out by the roster (docs/PROTOCOL.md)
    # How every leader of the run splits them: "speed" (by measured seconds per sequence) or
    # "equal" (the same count each, so the hashes depend on the config and the rosters alone).
    shares_by: SharesBy
    # "step" (the default): one exchange per optimizer step. "outer": one protocol step is one
    # outer round of ``outer.steps`` inner steps (docs/PROTOCOL.md, "Outer runs"). Both are
    # written only for an outer run, so a per-step config is the bytes it was before they existed.
    sync: str = SYNC_STEP
    outer: OuterSpec | None = None
    # Commit, then audit (data-channel version 7): written after ``outer`` only when audits are
    # on, so every config without audits keeps its bytes. A version-6 machine refuses a config
    # that has it (it cannot audit yet).
    audit: AuditSpec | None = None
    type: Literal["config"] = "config"


@dataclass(frozen=True)
class Ready:
    """Peer -> leader: my state is at ``step`` with ``hash``; I have open channels to ``peers``;
    I compute one sequence in ``seq_s`` seconds (0: not measured yet); ``private_data``: my
    gradients are of text only this device holds (docs/PROTOCOL.md, "Private data")."""

    run: str
    step: int
    hash: str
    peers: list[str]
    seq_s: float
    private_data: bool = False  # written only when true (see OMITTED_WHEN_FALSE)
    type: Literal["ready"] = "ready"


@dataclass(frozen=True)
class SyncRequest:
    """Peer -> leader: send me your state (checkpoint frame) at the next step boundary;
    ``private_data`` as in ``Ready`` (a peer that joins a running run says it here)."""

    run: str
    private_data: bool = False  # written only when true (see OMITTED_WHEN_FALSE)
    type: Literal["sync-request"] = "sync-request"


@dataclass(frozen=True)
class Roster:
    """Leader -> all: step ``step`` (1-based) is computed by ``peers``, in this order; peer
    ``k`` computes ``shares[k]`` of the run's ``global_batch`` sequences."""

    run: str
    step: int
    round: int
    peers: list[str]
    shares: list[int]
    # (round, peer) of every dropped peer whose contribution commit of this step the leader
    # holds: audited in this attempt whatever its draw (docs/TRUST.md, "Leaving, withholding,
    # carried audits"; version 7). Written only when not empty.
    carry: list[tuple[int, str]] = field(default_factory=list)
    type: Literal["roster"] = "roster"


@dataclass(frozen=True)
class StepHash:
    """Peer -> all: after applying ``step`` my state hash is ``hash`` (the sync guard); my
    kernel probe (``daisychain.gpu.probe``) through the ``backend`` that computed it is
    ``probe``, which must equal every other device's; I compute one sequence in ``seq_s``
    seconds (what the leader's shares are made of)."""

    run: str
    step: int
    round: int
    hash: str
    loss: float
    probe: str
    backend: str
    seq_s: float
    type: Literal["hash"] = "hash"


@dataclass(frozen=True)
class Missing:
    """Peer -> leader: step/round timed out; these roster peers' pieces never arrived."""

    run: str
    step: int
    round: int
    peers: list[str]
    type: Literal["missing"] = "missing"


# "commit" and "reduced-commit" (version 7) ask for the commit statement of rank ``chunk``, or
# the reduced commit of chunk ``chunk``, as held (docs/TRUST.md, "One attempt, step by step").
Piece = Literal["contribution", "reduced", "commit", "reduced-commit"]
PIECES: tuple[str, ...] = get_args(Piece)


@dataclass(frozen=True)
class Repair:
    """Peer -> peer: send again the ``piece`` (contribution or reduced, or in version 7 a
    commit or reduced commit) of ``chunk``."""

    run: str
    step: int
    round: int
    piece: Piece
    chunk: int
    type: Literal["repair"] = "repair"


@dataclass(frozen=True)
class Save:
    """Leader -> all: save a checkpoint of the state after ``step``."""

    run: str
    step: int
    type: Literal["save"] = "save"


@dataclass(frozen=True)
class Leave:
    """Peer -> all: I am leaving the run (drop me from the next roster)."""

    reason: str
    type: Literal["leave"] = "leave"


@dataclass(frozen=True, kw_only=True)
class ContributionCommit:
    """Author -> all (version 7): the signed digests of the contribution ``peer`` computed for
    attempt (step, round) of the roster whose digest is ``roster``, before anyone knows whether
    it will be audited: ``prev`` the state hash it computed from, ``chunks`` one digest per
    roster peer (``""``: an empty chunk or a share of 0), ``data`` the data digest (``""``:
    none), ``nonce_hash`` the hash of its nonce for the draw; ``sig`` its signature over the
    statement (docs/TRUST.md, "Keys and statements")."""

    run: str
    step: int
    round: int
    peer: str
    roster: str
    piece: Literal["contribution"] = "contribution"
    prev: str
    chunks: list[str]
    data: str
    nonce_hash: str
    private_data: bool = False  # written only when true (see OMITTED_WHEN_FALSE)
    sig: str
    type: Literal["commit"] = "commit"


@dataclass(frozen=True, kw_only=True)
class ReducedCommit:
    """Owner -> all (version 7): the signed digest of the reduced chunk ``chunk``."""

    run: str
    step: int
    round: int
    peer: str
    roster: str
    piece: Literal["reduced"] = "reduced"
    chunk: int
    digest: str
    sig: str
    type: Literal["commit"] = "commit"


@dataclass(frozen=True, kw_only=True)
class Reveal:
    """Peer -> all (version 7): my ``nonce`` for the draw, and ``seen``, the digest of every
    statement of the attempt I hold."""

    run: str
    step: int
    round: int
    nonce: str
    seen: str
    sig: str
    type: Literal["reveal"] = "reveal"


@dataclass(frozen=True, kw_only=True)
class AuditResult:
    """Auditor -> all (version 7): my recomputation of ``item`` ``index`` of the attempt,
    audited statement ``of`` (its SHA-256): ``digests`` as in a commit (a reduction: one),
    ``data`` the data digest. ``statement`` and ``statement_sig`` (hex), written only when the
    result differs or the item is carried, make it a self-contained accusation."""

    run: str
    step: int
    round: int
    item: Literal["contribution", "reduced"]
    index: int
    of: str
    digests: list[str]
    data: str
    statement: str | None = None
    statement_sig: str | None = None
    sig: str
    type: Literal["audit"] = "audit"


@dataclass(frozen=True)
class Signed:
    """One statement (hex) and its author's signature, as a proof carries it."""

    statement: str
    sig: str


@dataclass(frozen=True, kw_only=True)
class Proof:
    """Any -> all (version 7): two signed statements of one author that contradict each other
    (``equivocation``: two statements of one kind, attempt and index; ``bad-reveal``: a commit
    and a reveal whose nonce does not match its hash)."""

    run: str
    step: int
    round: int
    kind: Literal["equivocation", "bad-reveal"]
    first: Signed
    second: Signed
    type: Literal["proof"] = "proof"


StopReason = Literal["done", "fork", "error", "leader-request"]


@dataclass(frozen=True)
class Stop:
    """Any -> all: the run is over. ``fork`` carries the hashes each peer reported."""

    run: str
    reason: StopReason
    step: int
    message: str
    hashes: dict[str, str] = field(default_factory=dict)
    type: Literal["stop"] = "stop"


@dataclass(frozen=True)
class Error:
    """Any -> peer: your last message or frame was refused (the channel may close next)."""

    code: ErrorCode
    message: str
    hint: str
    type: Literal["error"] = "error"


Message = (
    Hello
    | Config
    | Ready
    | SyncRequest
    | Roster
    | StepHash
    | Missing
    | Repair
    | Save
    | Leave
    | Stop
    | Error
    | ContributionCommit
    | ReducedCommit
    | Reveal
    | AuditResult
    | Proof
)

TYPES = (
    "hello", "config", "ready", "sync-request", "roster", "hash", "missing", "repair", "save",
    "leave", "stop", "error", "commit", "reveal", "audit", "proof",
)  # fmt: skip
# The types and repair pieces of commit, then audit (docs/TRUST.md): declared and checked here
# (version 7); a version-6 machine does not use them and refuses them from a peer.
AUDIT_TYPES = ("commit", "reveal", "audit", "proof")
AUDIT_PIECES = ("commit", "reduced-commit")


# Optional flags a message carries only when true: absent reads as false, so a peer without
# private data writes exactly the bytes it wrote before the flag existed (and the conformance
# traces, which pin those bytes, stay as they are).
OMITTED_WHEN_FALSE = frozenset({"private_data"})
# Likewise fields written only when there is something to say: an audit's copy of the audited
# statement, a roster's carried audits.
OMITTED_WHEN_NONE = frozenset({"statement", "statement_sig"})
OMITTED_WHEN_EMPTY = frozenset({"carry"})


def _written(key: str, value: object) -> bool:
    return not (
        (key in OMITTED_WHEN_FALSE and value is False)
        or (key in OMITTED_WHEN_NONE and value is None)
        or (key in OMITTED_WHEN_EMPTY and not value)
    )


def encode(message: Message) -> str:
    obj = {k: v for k, v in asdict(message).items() if _written(k, v)}
    if isinstance(message, Config) and message.sync == SYNC_STEP:
        # A per-step run writes neither field: every existing trace and vector keeps its bytes.
        del obj["sync"], obj["outer"]
    elif isinstance(message, Config) and message.outer is not None:
        # Likewise an outer run without overlap, and one cut by shares.
        if not message.outer.overlap:
            del obj["outer"]["overlap"]
        if message.outer.cut == OUTER_CUT_DEFAULT:
            del obj["outer"]["cut"]
    if isinstance(message, Config):
        # Audits off writes nothing; audits on writes `private` only when not the default.
        if message.audit is None:
            del obj["audit"]
        elif message.audit.private == AUDIT_PRIVATE_DEFAULT:
            del obj["audit"]["private"]
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def error_from(exc: MessageError) -> Error:
    return Error(code=exc.code, message=exc.message[:200], hint=exc.hint)


# ---------------------------------------------------------------------------------------------
# Parsing: the one place where control JSON from a peer is trusted to have a shape.


def parse(raw: str) -> Message:
    if len(raw) > MAX_MESSAGE_BYTES or len(raw.encode("utf-8")) > MAX_MESSAGE_BYTES:
        raise MessageError(
            "too-large",
            f"control message larger than {MAX_MESSAGE_BYTES} bytes",
            "send bulk data as binary frames",
        )
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        raise MessageError(
            "bad-json", "control message is not valid JSON", "send one JSON object"
        ) from None
    if not isinstance(obj, dict):
        raise MessageError("bad-message", "control message is not a JSON object", "see PROTOCOL.md")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in TYPES:
        shown = kind[:32] if isinstance(kind, str) else None
        raise MessageError(
            "unknown-type",
            f"unknown control message type {shown!r}",
            f"control messages are: {', '.join(TYPES)} (docs/PROTOCOL.md)",
        )
    f = _Fields(obj, kind)
    if kind == "hello":
        version = f.integer("version", 0, U32_MAX)
        if version != DATA_PROTOCOL_VERSION:
            raise MessageError(
                "version-mismatch",
                f"data-channel protocol version {version}, this peer speaks "
                f"{DATA_PROTOCOL_VERSION}",
                "every peer of a run must run the same DaisyChain version; upgrade the older one",
            )
        contract = f.integer("contract", 0, U32_MAX)
        if contract != CONTRACT_VERSION:
            raise MessageError(
                "version-mismatch",
                f"numerical contract version {contract}, this peer implements {CONTRACT_VERSION}",
                "every peer of a run must run the same DaisyChain version; upgrade the older one",
            )
        return Hello(version=version, name=f.text("name", 40), contract=contract)
    if kind == "config":
        # Shape only: every field present, of its JSON type, integers within 32 bits, numbers
        # finite. Whether this peer can and will train it (ranges, invariants, caps) is
        # runconfig.parse's decision, answered with `incompatible` (docs/PROTOCOL.md, "Config
        # validation").
        m = _Fields(f.obj("model"), "config.model")
        o = _Fields(f.obj("optim"), "config.optim")
        preset = obj.get("preset")
        if preset is not None and not (isinstance(preset, str) and len(preset) <= 32):
            raise f.bad("preset", "a string of at most 32 characters or null")
        resume_step = f.integer("resume_step", 0, U32_MAX)
        resume_hash = f.hash("resume_hash") if resume_step > 0 else None
        sync = f.text("sync", MAX_SYNC_CHARS) if "sync" in obj else SYNC_STEP
        return Config(
            run=f.run(),
            preset=preset,
            model=ModelSpec(**{name: m.integer(name, 0, U32_MAX) for name in MODEL_FIELDS}),
            optim=OptimSpec(
                lr=o.number("lr", -math.inf, math.inf),
                warmup_steps=o.integer("warmup_steps", 0, U32_MAX),
                weight_decay=o.number("weight_decay", -math.inf, math.inf),
                clip=o.number("clip", -math.inf, math.inf),
            ),
            steps=f.integer("steps", 0, U32_MAX),
            seed=f.integer("seed", 0, U32_MAX),
            data=f.text("data", datanames.MAX_LENGTH),  # a data name (daisychain.datanames)
            tokenizer_sha256=f.hash("tokenizer_sha256"),
            resume_step=resume_step,
            resume_hash=resume_hash,
            global_batch=f.integer("global_batch", 0, U32_MAX),
            shares_by=cast(SharesBy, f.choice("shares_by", SHARES_BY)),
            sync=sync,
            outer=_outer_spec(f) if sync == SYNC_OUTER else None,
            audit=_audit_spec(f) if "audit" in obj else None,
        )
    if kind == "ready":
        return Ready(
            run=f.run(),
            step=f.integer("step", 0, U32_MAX),
            hash=f.hash("hash"),
            peers=f.ids("peers", MAX_ROSTER),
            seq_s=f.number("seq_s", 0.0, MAX_SEQ_S),
            private_data=f.optional_flag("private_data"),
        )
    if kind == "sync-request":
        return SyncRequest(run=f.run(), private_data=f.optional_flag("private_data"))
    if kind == "roster":
        peers = f.ids("peers", MAX_ROSTER)
        if not peers:
            raise f.bad("peers", "a non-empty list of peer ids")
        return Roster(
            run=f.run(),
            step=f.integer("step", 1, U32_MAX),
            round=f.integer("round", 0, 255),
            peers=peers,
            shares=f.shares("shares", len(peers)),
            carry=f.carry("carry") if "carry" in obj else [],
        )
    if kind == "hash":
        return StepHash(
            run=f.run(),
            step=f.integer("step", 1, U32_MAX),
            round=f.integer("round", 0, 255),
            hash=f.hash("hash"),
            loss=f.number("loss", -math.inf, math.inf),
            probe=f.hash("probe"),
            backend=f.text("backend", 32),
            seq_s=f.number("seq_s", 0.0, MAX_SEQ_S),
        )
    if kind == "missing":
        return Missing(
            run=f.run(),
            step=f.integer("step", 1, U32_MAX),
            round=f.integer("round", 0, 255),
            peers=f.ids("peers", MAX_ROSTER),
        )
    if kind == "repair":
        piece = cast(Piece, f.choice("piece", PIECES))
        return Repair(
            run=f.run(),
            step=f.integer("step", 1, U32_MAX),
            round=f.integer("round", 0, 255),
            piece=piece,
            chunk=f.integer("chunk", 0, MAX_ROSTER - 1),
        )
    if kind in AUDIT_TYPES:
        return _audit_message(f, kind)
    if kind == "save":
        return Save(run=f.run(), step=f.integer("step", 0, U32_MAX))
    if kind == "leave":
        return Leave(reason=f.text("reason", 200))
    if kind == "stop":
        reason = f.choice("reason", ("done", "fork", "error", "leader-request"))
        hashes = f.obj("hashes")
        if len(hashes) > MAX_ROSTER or not all(
            isinstance(k, str) and PEER_ID_RE.fullmatch(k) and isinstance(v, str) and len(v) <= 64
            for k, v in hashes.items()
        ):
            raise f.bad("hashes", "an object mapping peer ids to hashes")
        return Stop(
            run=f.run(),
            reason=cast(StopReason, reason),  # checked by choice()
            step=f.integer("step", 0, U32_MAX),
            message=f.text("message", 1000),
            hashes=dict(hashes),
        )
    assert kind == "error", f"TYPES and parse disagree on {kind!r}"
    # An error code this version does not know is still an error: keep it as "bad-message".
    code = f.text("code", 32)
    known = cast(ErrorCode, code) if code in ERROR_CODES else "bad-message"
    return Error(code=known, message=f.text("message", 1000), hint=f.text("hint", 1000))


def _outer_spec(f: _Fields) -> OuterSpec:
    """config.outer's shape (present exactly when sync is "outer"); its ranges are runconfig's."""
    o = _Fields(f.obj("outer"), "config.outer")
    return OuterSpec(
        steps=o.integer("steps", 0, U32_MAX),
        lr=o.number("lr", -math.inf, math.inf),
        momentum=o.number("momentum", -math.inf, math.inf),
        overlap=o.number("overlap", -math.inf, math.inf) if "overlap" in o.obj_ else 0.0,
        cut=o.text("cut", 16) if "cut" in o.obj_ else OUTER_CUT_DEFAULT,
    )


def _audit_spec(f: _Fields) -> AuditSpec:
    """config.audit's shape (an object when present); its ranges are runconfig's."""
    a = _Fields(f.obj("audit"), "config.audit")
    return AuditSpec(
        one_in=a.integer("one_in", 0, U32_MAX),
        private=(
            a.text("private", MAX_AUDIT_PRIVATE_CHARS)
            if "private" in a.obj_
            else AUDIT_PRIVATE_DEFAULT
        ),
    )


def _audit_message(f: _Fields, kind: str) -> Message:
    """commit, reveal, audit and proof (docs/TRUST.md, "Messages"): shapes and sizes only. That
    a statement's fields match the roster, the state and the signature is the machine's check."""
    run = f.run()
    step = f.integer("step", 1, U32_MAX)
    rnd = f.integer("round", 0, 255)
    if kind == "commit":
        peer = f.matching("peer", PEER_ID_RE, "a peer id (1 to 32 of A-Z a-z 0-9 _ -)")
        roster = f.hash("roster")
        piece = f.choice("piece", COMMIT_PIECES)
        if piece == "reduced":
            return ReducedCommit(
                run=run, step=step, round=rnd, peer=peer, roster=roster,
                chunk=f.integer("chunk", 0, MAX_ROSTER - 1), digest=f.hash("digest"),
                sig=f.sig("sig"),
            )  # fmt: skip
        return ContributionCommit(
            run=run, step=step, round=rnd, peer=peer, roster=roster, prev=f.hash("prev"),
            chunks=f.digests("chunks"), data=f.digest_or_none("data"),
            nonce_hash=f.hash("nonce_hash"), private_data=f.optional_flag("private_data"),
            sig=f.sig("sig"),
        )  # fmt: skip
    if kind == "reveal":
        return Reveal(
            run=run, step=step, round=rnd, nonce=f.hash("nonce"), seen=f.hash("seen"),
            sig=f.sig("sig"),
        )  # fmt: skip
    if kind == "audit":
        item = cast(Literal["contribution", "reduced"], f.choice("item", AUDIT_ITEMS))
        index = f.integer("index", 0, MAX_ROSTER - 1)
        of = f.hash("of")
        # A reduction's result is one digest (of a non-empty chunk: empty ones are no item).
        digests = [f.hash_list("digests")] if item == "reduced" else f.digests("digests")
        data = f.digest_or_none("data")
        quoted = "statement" in f.obj_ or "statement_sig" in f.obj_
        return AuditResult(
            run=run, step=step, round=rnd, item=item, index=index, of=of, digests=digests,
            data=data, statement=f.statement("statement") if quoted else None,
            statement_sig=f.sig("statement_sig") if quoted else None, sig=f.sig("sig"),
        )  # fmt: skip
    assert kind == "proof", f"AUDIT_TYPES and _audit_message disagree on {kind!r}"
    proof_kind = cast(Literal["equivocation", "bad-reveal"], f.choice("kind", PROOF_KINDS))
    return Proof(
        run=run, step=step, round=rnd, kind=proof_kind, first=f.signed("first"),
        second=f.signed("second"),
    )  # fmt: skip


class _Fields(Fields):
    """Shared field checks (``daisychain.wire.fields``) with this protocol's error and hint."""

    def bad(self, name: str, expected: str) -> MessageError:
        return MessageError(
            "bad-message",
            f"{self.kind}.{name} must be {expected}",
            "see the control message declarations in docs/PROTOCOL.md",
        )

    def run(self) -> str:
        return self.matching("run", RUN_ID_RE, "16 lowercase hex digits")

    def hash(self, name: str) -> str:
        return self.matching(name, HASH_RE, "64 lowercase hex digits (SHA-256)")

    def sig(self, name: str) -> str:
        return self.matching(name, SIG_RE, "128 lowercase hex digits (an Ed25519 signature)")

    def digest_or_none(self, name: str) -> str:
        value = self.obj_.get(name)
        if not (value == "" or (isinstance(value, str) and HASH_RE.fullmatch(value))):
            raise self.bad(name, 'a digest (64 lowercase hex digits) or "" for none')
        return value

    def digests(self, name: str) -> list[str]:
        """A commit's chunk digests: one per roster peer, each 64 hex digits or "" (none)."""
        value = self.obj_.get(name)
        if (
            not isinstance(value, list)
            or not 1 <= len(value) <= MAX_ROSTER
            or not all(v == "" or (isinstance(v, str) and HASH_RE.fullmatch(v)) for v in value)
        ):
            raise self.bad(
                name,
                f'a list of 1 to {MAX_ROSTER} digests (64 lowercase hex digits, or "" for none)',
            )
        return list(value)

    def hash_list(self, name: str) -> str:
        """A list holding exactly one digest (a reduction's result)."""
        value = self.obj_.get(name)
        if not (
            isinstance(value, list)
            and len(value) == 1
            and isinstance(value[0], str)
            and HASH_RE.fullmatch(value[0])
        ):
            raise self.bad(name, "a list of one digest (64 lowercase hex digits)")
        return value[0]

    def statement(self, name: str) -> str:
        value = self.obj_.get(name)
        lo, hi = 2 * MIN_STATEMENT_BYTES, 2 * MAX_STATEMENT_BYTES
        if not (
            isinstance(value, str)
            and lo <= len(value) <= hi
            and len(value) % 2 == 0
            and STATEMENT_RE.fullmatch(value)
        ):
            raise self.bad(
                name,
                f"a statement: an even number of lowercase hex digits, {lo} to {hi} "
                f"({MIN_STATEMENT_BYTES} to {MAX_STATEMENT_BYTES} bytes)",
            )
        return value

    def signed(self, name: str) -> Signed:
        s = _Fields(self.obj(name), f"{self.kind}.{name}")
        return Signed(statement=s.statement("statement"), sig=s.sig("sig"))

    def carry(self, name: str) -> list[tuple[int, str]]:
        value = self.obj_.get(name)
        entries = value if isinstance(value, list) else []
        ok = isinstance(value, list) and len(entries) <= MAX_CARRY
        pairs: list[tuple[int, str]] = []
        for entry in entries if ok else []:
            if not (
                isinstance(entry, list)
                and len(entry) == 2
                and isinstance(entry[0], int)
                and not isinstance(entry[0], bool)
                and 0 <= entry[0] <= 255
                and isinstance(entry[1], str)
                and PEER_ID_RE.fullmatch(entry[1])
            ):
                ok = False
                break
            pairs.append((entry[0], entry[1]))
        if not ok or len(set(pairs)) != len(pairs):
            raise self.bad(
                name, f"a list of at most {MAX_CARRY} distinct [round, peer] pairs (round 0 to 255)"
            )
        return pairs

    def shares(self, name: str, count: int) -> list[int]:
        """One share per roster peer, each an integer in [0, MAX_GLOBAL_BATCH] (whether they
        sum to the run's global batch is the machine's check: it knows the config)."""
        value = self.obj_.get(name)
        if (
            not isinstance(value, list)
            or len(value) != count
            or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_GLOBAL_BATCH
                for v in value
            )
        ):
            raise self.bad(name, f"a list of {count} integers in [0, {MAX_GLOBAL_BATCH}]")
        return list(value)
