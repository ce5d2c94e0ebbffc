"""The step's heap policy (``daisychain.model.heap``): freed step memory stays mapped.

Counted in page faults, never timed: with the policy, a ``small`` step after the first one touches
(almost) no fresh pages; without it (the opt-out) every step faults its temporaries in again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from daisychain.model import heap

CHILD = """
import json, resource
import numpy as np
from daisychain import training
from daisychain.model import heap
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
cfg = preset("small", vocab_size=2048)
state = training.init(cfg, AdamWConfig(lr=1e-3), 1)
tokens = (np.arange(100_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x, y = training.next_batch(state, tokens)
    training.train_step(state, x, y, with_hash=False)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": heap.keep_step_memory(), "faults": faults}))
"""


def _run(opt_out: bool) -> dict[str, object]:
    env = dict(os.environ)
    env.pop(heap.ENV_OPT_OUT, None)
    if opt_out:
        env[heap.ENV_OPT_OUT] = "0"
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    doc: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_later_steps_fault_far_fewer_pages_than_without_the_policy() -> None:
    kept, plain = _run(opt_out=False), _run(opt_out=True)
    assert kept["kept"] is True and plain["kept"] is False  # the opt-out is honoured
    kept_faults, plain_faults = kept["faults"], plain["faults"]
    assert isinstance(kept_faults, list) and isinstance(plain_faults, list)
    # ~35,000 faults per later small step without the policy (every temporary faulted in again)
    assert plain_faults[2] > 5000
    assert kept_faults[2] * 10 < plain_faults[2]
