"""The contract GPT model (docs/MODEL.md): configuration, parameters, forward/backward.

``gpt`` is the contract path (int8 products, pinned float32 elementwise work); ``reference`` is a
plain float oracle of the same architecture used by tests and convergence runs.
"""

from daisychain.model.config import DEFAULT_VOCAB, PRESETS, ConfigError, ModelConfig, preset
from daisychain.model.gpt import forward_backward, forward_logits
from daisychain.model.params import Params, count_params, init_params, param_names, param_shapes

__all__ = [
    "DEFAULT_VOCAB",
    "PRESETS",
    "ConfigError",
    "ModelConfig",
    "Params",
    "count_params",
    "forward_backward",
    "forward_logits",
    "init_params",
    "param_names",
    "param_shapes",
    "preset",
]
