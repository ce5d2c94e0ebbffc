"""What a protocol machine is given at birth: who it is and its timers."""

from __future__ import annotations

from dataclasses import dataclass, field

from daisychain.p2p.runconfig import Limits


@dataclass(frozen=True)
class Timers:
    """Protocol timers in seconds (shortened in tests)."""

    step_timeout_s: float = 60.0  # leader: a roster step not complete by then is re-decided
    repair_after_s: float = 10.0  # a piece still missing after this is requested again
    hello_timeout_s: float = 20.0  # a channel without a valid hello by then is closed
    # A stopping peer keeps its channels open until every peer acknowledged the stop (its own
    # `stop`, its channel closing, or the server's peer-left), at most this long.
    linger_s: float = 10.0


@dataclass(frozen=True)
class Settings:
    id: str  # this peer's server-assigned id
    name: str  # shown to other peers in hello (at most 40 characters are sent)
    tokenizer_sha256: str
    vocab_size: int
    backend: str  # the compute backend's name, published with every hash
    reference_probe: str  # every device's kernel probe must equal this
    timers: Timers = Timers()
    can_save: bool = False  # this peer has a checkpoint path
    save_every: int = 0  # also save every this many steps (0: only when asked and at the end)
    limits: Limits = field(
        default_factory=Limits
    )  # what a leader may impose on this peer (runconfig.parse)
    # The config.data names this peer can read (runconfig.parse's "data" rule): the built-in
    # corpus always, "fineweb@REV" when its server reads FineWeb-Edu at that revision.
    data_sources: tuple[str, ...] = ("builtin",)
