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


Piece = Literal["contribution", "reduced"]


@dataclass(frozen=True)
class Repair:
    """Peer -> peer: send again the ``piece`` (contribution or reduced) of ``chunk``."""

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
)

TYPES = (
    "hello", "config", "ready", "sync-request", "roster", "hash", "missing", "repair", "save",
    "leave", "stop", "error",
)  # fmt: skip


# Optional flags a message carries only when true: absent reads as false, so a peer without
# private data writes exactly the bytes it wrote before the flag existed (and the conformance
# traces, which pin those bytes, stay as they are).
OMITTED_WHEN_FALSE = frozenset({"private_data"})


def encode(message: Message) -> str:
    obj = {k: v for k, v in asdict(message).items() if not (k in OMITTED_WHEN_FALSE and v is False)}
    if isinstance(message, Config) and message.sync == SYNC_STEP:
        # A per-step run writes neither field: every existing trace and vector keeps its bytes.
        del obj["sync"], obj["outer"]
    elif isinstance(message, Config) and message.outer is not None:
        # Likewise an outer run without overlap, and one cut by shares.
        if not message.outer.overlap:
            del obj["outer"]["overlap"]
        if message.outer.cut == OUTER_CUT_DEFAULT:
            del obj["outer"]["cut"]
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
        piece = cast(Piece, f.choice("piece", ("contribution", "reduced")))
        return Repair(
            run=f.run(),
            step=f.integer("step", 1, U32_MAX),
            round=f.integer("round", 0, 255),
            piece=piece,
            chunk=f.integer("chunk", 0, MAX_ROSTER - 1),
        )
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
