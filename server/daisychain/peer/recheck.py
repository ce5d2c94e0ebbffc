"""The backend choice, checked again during the run (``--backend auto``).

The choice at start is a measurement on one moment of the machine, and a busy moment can decide
a whole run (a peer started beside two loading browsers can measure numpy ten times slower than
on a quiet machine, and pick an emulated GPU). So the run measures again: when its own step has
slowed down (seconds per sequence well above the best it has seen on this backend) and, less
often, on a timer even when nothing slowed (a backend that was busy at start may be free now). A
check times every gated candidate on one training step, best of two rounds, the current backend
first and unlimited; it switches only to a backend at least ``margin`` faster, so two backends
of equal speed do not flap. The start chose on a ``tiny`` step, before the run's model was
known; once it is (``use_model``), the checks time the run's own model, whose products may
favour another backend (an int8 GEMM's lead over float32 BLAS grows with the product). Checks
cost time, so they are spaced by their own cost: never more than ``max_overhead`` of the run's
time goes to them.

Switching is safe for the replicas: every gated backend computes the same bits (the gates and
the per-step probe prove it), so the switch changes only who multiplies and the backend named
in the next hash messages. The node does the switch between steps (p2p/node.py ``recheck``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from daisychain.model.config import ModelConfig
from daisychain.p2p.options import Compute
from daisychain.peer.backend import Candidate, StepTimer, measure


@dataclass(frozen=True)
class RecheckPolicy:
    rounds: int = 2  # timings of each candidate per check; its figure is the fastest
    min_interval_s: float = 30.0  # never two checks closer than this
    periodic_s: float = 300.0  # a check this often even when the step did not slow down
    max_overhead: float = 0.05  # checks take at most this share of the run's time
    slowdown: float = 1.5  # a step this much slower than the best seen asks for a check
    margin: float = 1.2  # switch only to a backend this much faster than the current one

    def __post_init__(self) -> None:
        if self.rounds < 1 or not 0 < self.max_overhead <= 1:
            raise ValueError("rounds must be >= 1 and max_overhead in (0, 1]")
        if self.slowdown <= 1 or self.margin < 1:
            raise ValueError("slowdown must be > 1 and margin >= 1")


@dataclass(frozen=True)
class Check:
    """One re-check: every candidate's row, what it kept, and why."""

    rows: tuple[Candidate, ...]  # in the order timed: the current backend first
    current: str
    chosen: str
    cost_s: float  # wall seconds the check took
    cause: str  # "slowdown" or "periodic"

    @property
    def switched(self) -> bool:
        return self.chosen != self.current

    def figures(self) -> dict[str, float]:
        """Each candidate's seconds per timed step (``tiny``, or the run's model once known; a
        lower bound where it was stopped)."""
        return {r.name: r.seconds or 0.0 for r in self.rows}

    def reason(self) -> str:
        def ms(r: Candidate) -> str:
            return f"{r.name} {'>= ' if not r.complete else ''}{(r.seconds or 0.0) * 1e3:.1f} ms"

        figures = ", ".join(ms(r) for r in self.rows)
        after = f"after a {self.cause} check ({figures})"
        if self.switched:
            return f"switched {self.current} -> {self.chosen} {after}"
        return f"kept {self.current} {after}"


class Recheck:
    """When to measure the backends again, and the measurement. Not thread-safe: the node calls
    ``observe`` and ``due`` from its loop and ``run`` from one compute thread at a time."""

    def __init__(
        self,
        computes: Sequence[Compute],
        timer: StepTimer,
        policy: RecheckPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_check: Callable[[Check], None] | None = None,
        start_cost_s: float = 0.0,
        timer_for: Callable[[ModelConfig], StepTimer] | None = None,
    ) -> None:
        self.computes = list(computes)
        self.timer = timer
        # How to time a given model (``peer.backend.step_timer``); None keeps ``timer`` for the
        # whole run (a fixed timer, as tests give).
        self.timer_for = timer_for
        self.model: ModelConfig | None = None  # the model ``timer`` times, once it is the run's
        self.policy = policy or RecheckPolicy()
        self.clock = clock
        self.on_check = on_check
        self.checks: list[Check] = []
        self._last = clock()  # the choice at start counts as the first check
        self._cost = start_cost_s
        self._best_seq_s = float("inf")  # the best seconds per sequence seen on this backend
        self._slowed = False

    def use_model(self, cfg: ModelConfig) -> None:
        """Time ``cfg``, the run's model, from the next check on (a new timer only when the
        model changed: the timer holds that model's parameters and batch)."""
        if self.timer_for is not None and cfg != self.model:
            self.timer, self.model = self.timer_for(cfg), cfg

    def observe(self, seq_s: float) -> None:
        """A training step's compute seconds per sequence on the current backend."""
        if seq_s <= 0:
            return
        self._slowed = self._slowed or seq_s > self.policy.slowdown * self._best_seq_s
        self._best_seq_s = min(self._best_seq_s, seq_s)

    def _gap(self) -> float:
        return max(self.policy.min_interval_s, self._cost / self.policy.max_overhead)

    def due(self) -> str | None:
        """The cause of a check now ("slowdown", "periodic"), or None. Never with one candidate."""
        if len(self.computes) < 2:
            return None
        waited = self.clock() - self._last
        if waited < self._gap():
            return None
        if self._slowed:
            return "slowdown"
        return "periodic" if waited >= max(self.policy.periodic_s, self._gap()) else None

    def run(self, current: Compute, cause: str = "periodic") -> Check:
        """Measure every candidate (``current`` first, unlimited) and keep the fastest only if it
        beats ``current`` by the margin. Blocking: run it off the event loop."""
        t0 = self.clock()
        order = [current, *(c for c in self.computes if c.name != current.name)]
        rows = measure(order, self.timer, self.policy.rounds)
        mine = rows[0]
        assert mine.complete and mine.seconds is not None  # timed first, with no limit
        done = [r for r in rows if r.complete and r.seconds is not None]
        best = min(done, key=lambda r: r.seconds or 0.0)
        faster = best.seconds is not None and best.seconds * self.policy.margin <= mine.seconds
        chosen = best.name if faster else current.name
        now = self.clock()
        check = Check(tuple(rows), current.name, chosen, now - t0, cause)
        self.checks.append(check)
        self._last, self._cost, self._slowed = now, now - t0, False
        if check.switched:
            self._best_seq_s = float("inf")  # the new backend's steps set its own baseline
        if self.on_check is not None:
            self.on_check(check)
        return check

    def compute(self, name: str) -> Compute:
        return next(c for c in self.computes if c.name == name)
